// Untrusted files: FIFOs, devices and oversized files are refused before they are
// read; JSON nesting is bounded before anything recurses over it; GGUF is detected
// by its magic bytes, not its name; GGUF values reach config.json form unchanged.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "io/io_util.h"
#include "io/json_util.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "tessera/auto_tokenizer.h"
#include "test_io_util.h"

using namespace tessera;
using namespace tessera::io;
using namespace tessera::io::testing;

namespace {

std::string nested(size_t depth, const std::string& inner = "0") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

// A directory with a valid config.json and a tiny model.safetensors.
void write_model_dir(const TempDir& d,
                     const std::string& config = R"({"architectures": ["LlamaForCausalLM"]})") {
  write_file(d / "config.json", config);
  write_file(d / "model.safetensors", SafetensorsBuilder().add_f32("w", {2}, {1.f, 2.f}).bytes());
}

// Runs `fn` and fails the test if it takes more than a few seconds (a FIFO read would block forever,
// so a regression shows up as the whole test binary timing out; this documents the bound).
template <typename Fn>
void quickly(Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

}  // namespace

TEST(IoJson, DepthIsBoundedBeforeParsing) {
  // 100k-deep legal JSON: nlohmann parses it, but dump() and every recursive walk would overflow the stack.
  expect_error([] { parse_json(nested(100000), "deep.json"); }, {"deep.json", "nested deeper than 128"});
  expect_error([] { parse_ordered_json(nested(100000, "{}"), "deep.json"); }, {"deep.json", "nested deeper"});
  EXPECT_EQ(parse_json(nested(kMaxJsonDepth), "ok.json").dump(), nested(kMaxJsonDepth));
  expect_error([] { parse_json(nested(kMaxJsonDepth + 1), "x.json"); }, {"x.json", "at byte 128"});
  // Brackets inside strings (and escaped quotes) are not nesting.
  const std::string s = "[\"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"]";
  EXPECT_TRUE(parse_json(s, "s.json").is_array());
}

TEST(IoJson, ParseErrorsAreOneLineWithoutLibraryPrefix) {
  const std::string msg =
      expect_error([] { parse_json("{\"a\": ", "cfg.json"); }, {"cfg.json: malformed JSON"});
  EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
}

TEST(IoFiles, FifoIsRefusedWithoutBlocking) {
  TempDir d;
  ASSERT_EQ(::mkfifo((d / "fifo").c_str(), 0600), 0);
  quickly([&] { expect_error([&] { read_regular_file(d / "fifo", 1024); }, {d / "fifo", "is a FIFO"}); });
  quickly([&] { expect_error([&] { MappedFile::open(d / "fifo"); }, {d / "fifo", "not a regular file"}); });
  quickly([&] { expect_error([&] { open_checkpoint(d / "fifo"); }, {d / "fifo", "is a FIFO"}); });
  quickly([&] {
    expect_error([&] { AutoTokenizer::from_pretrained(d / "fifo"); }, {d / "fifo", "is a FIFO"});
  });
  EXPECT_FALSE(has_gguf_magic(d / "fifo"));
}

TEST(IoFiles, SymlinkToDevZeroIsRefused) {
  TempDir d;
  ASSERT_EQ(::symlink("/dev/zero", (d / "zero.gguf").c_str()), 0);
  quickly([&] {
    expect_error([&] { open_checkpoint(d / "zero.gguf"); }, {"zero.gguf", "character device"});
  });
  quickly([&] { expect_error([&] { read_regular_file(d / "zero.gguf", 1 << 20); }, {"character device"}); });
  quickly([&] {
    expect_error([&] { AutoTokenizer::from_pretrained(d / "zero.gguf"); }, {"zero.gguf", "character device"});
  });
}

TEST(IoFiles, ConfigFilesInsideADirectoryMustBeRegular) {
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors"}) {
    SCOPED_TRACE(name);
    TempDir d;
    write_model_dir(d);
    std::filesystem::remove(d / name);
    ASSERT_EQ(::mkfifo((d / name).c_str(), 0600), 0);
    quickly([&] { expect_error([&] { open_checkpoint(d.path()); }, {d / name}); });
  }
  TempDir d;
  write_model_dir(d);
  ASSERT_EQ(::symlink("/dev/zero", (d / "generation_config.json").c_str()), 0);
  quickly([&] {
    expect_error([&] { open_checkpoint(d.path()); }, {"generation_config.json", "character device"});
  });
  TempDir g;
  write_model_dir(g);
  ASSERT_EQ(::symlink((g / "nowhere").c_str(), (g / "generation_config.json").c_str()), 0);
  expect_error([&] { open_checkpoint(g.path()); },
               {"generation_config.json", "symbolic link to a missing file"});
  TempDir t;
  ASSERT_EQ(::mkfifo((t / "tokenizer.json").c_str(), 0600), 0);
  quickly([&] {
    expect_error([&] { AutoTokenizer::from_pretrained(t.path()); }, {"tokenizer.json", "is a FIFO"});
  });
}

TEST(IoFiles, SizeIsCheckedBeforeReading) {
  TempDir d;
  {
    std::ofstream out(d / "big.json");
    out << "{}";
  }
  std::filesystem::resize_file(d / "big.json", kMaxConfigFileBytes + 1);  // sparse: nothing is written
  expect_error([&] { read_json_file(d / "big.json"); }, {"big.json", "more than the 64 MiB limit"});
  write_model_dir(d);
  std::filesystem::resize_file(d / "config.json", kMaxConfigFileBytes + 1);
  expect_error([&] { open_checkpoint(d.path()); }, {"config.json", "64 MiB"});
  EXPECT_EQ(read_regular_file(d / "model.safetensors", 1 << 20).size(),
            std::filesystem::file_size(d / "model.safetensors"));
}

TEST(IoFiles, DeepJsonInEveryConfigFileIsAnError) {
  const std::string deep = "{\"architectures\": [\"LlamaForCausalLM\"], \"x\": " + nested(100000) + "}";
  {
    TempDir d;
    write_model_dir(d, deep);
    expect_error([&] { open_checkpoint(d.path()); }, {d / "config.json", "nested deeper"});
  }
  {
    TempDir d;
    write_model_dir(d);
    write_file(d / "generation_config.json", deep);
    expect_error([&] { open_checkpoint(d.path()); }, {"generation_config.json", "nested deeper"});
  }
  {
    TempDir d;
    write_model_dir(d);
    std::filesystem::remove(d / "model.safetensors");
    write_file(d / "model.safetensors.index.json",
               "{\"weight_map\": {}, \"metadata\": " + nested(100000) + "}");
    expect_error([&] { open_checkpoint(d.path()); }, {"model.safetensors.index.json", "nested deeper"});
  }
  {
    // safetensors: no container is built inside __metadata__ (values are strings), however deep.
    const std::string header = "{\"__metadata__\": {\"k\": " + nested(100000) + "}}";
    const Bytes st = safetensors_bytes(header, {});
    TempDir d;
    write_file(d / "config.json", R"({"architectures": ["LlamaForCausalLM"]})");
    write_file(d / "model.safetensors", st);
    expect_error([&] { open_checkpoint(d.path()); }, {"model.safetensors", "'__metadata__' value 'k'"});
    // ... nor more than 64 values (so no deep nesting) in a tensor entry.
    const Bytes deep_entry = safetensors_bytes("{\"w\": " + nested(100000) + "}", {});
    write_file(d / "model.safetensors", deep_entry);
    expect_error([&] { open_checkpoint(d.path()); }, {"model.safetensors: tensor 'w'", "more than 64"});
  }
}

TEST(IoGgufDetect, ByMagicNotName) {
  TempDir d;
  std::filesystem::copy_file(fixture("tiny_llama.gguf"), d / "model.bin");
  const auto src = open_checkpoint(d / "model.bin");
  EXPECT_NE(src->gguf(), nullptr);
  EXPECT_FALSE(src->tensors().empty());
  EXPECT_GT(AutoTokenizer::from_pretrained(d / "model.bin").vocab_size(), 0);
  EXPECT_TRUE(has_gguf_magic(d / "model.bin"));

  write_file(d / "x.gguf", std::string("hello, I am a text file\n"));
  expect_error([&] { open_checkpoint(d / "x.gguf"); }, {d / "x.gguf", "does not start with the GGUF magic"});
  expect_error([&] { AutoTokenizer::from_pretrained(d / "x.gguf"); }, {"x.gguf", "GGUF magic"});
  write_file(d / "short.gguf", std::string("GG"));
  expect_error([&] { open_checkpoint(d / "short.gguf"); }, {"short.gguf", "GGUF magic"});
  write_file(d / "notes.txt", std::string("text"));
  expect_error([&] { open_checkpoint(d / "notes.txt"); },
               {"notes.txt", "not a model directory or a GGUF file"});
}

namespace {

// A llama GGUF with the required keys but block_count (supplied in `extra`, already encoded, with any other
// key/values), one block's norm and a token_embd tensor.
Bytes llama_gguf_with(uint64_t n_extra, const Bytes& extra, uint32_t hidden = 8) {
  GgufBuilder b;
  b.header(3, 2, 5 + n_extra)
      .kv_string("general.architecture", "llama")
      .kv_u32("llama.embedding_length", hidden)
      .kv_u32("llama.feed_forward_length", 16)
      .kv_u32("llama.attention.head_count", 2)
      .kv_u32("llama.context_length", 32);
  b.raw(extra.data(), extra.size());
  b.tensor("token_embd.weight", {8, 4}, 0, 0)
      .tensor("blk.0.attn_norm.weight", {8}, 0, 128)
      .align()
      .zeros(160);
  return b.bytes();
}

Bytes kv_f32(const std::string& k, float v) { return GgufBuilder().kv_f32(k, v).bytes(); }
Bytes kv_u32(const std::string& k, uint32_t v) { return GgufBuilder().kv_u32(k, v).bytes(); }
Bytes cat(const Bytes& a, const Bytes& b) {
  Bytes out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

nlohmann::json config_of(const Bytes& gguf) {
  auto g = GgufFile::parse(gguf.data(), gguf.size(), "m.gguf");
  return nlohmann::json::parse(open_gguf(g)->config_json());
}

}  // namespace

Bytes eps(float v) { return GgufBuilder().kv_f32("llama.attention.layer_norm_rms_epsilon", v).bytes(); }

TEST(IoGgufConfig, ValuesPassThroughUnclamped) {
  // Unusual but possible values reach config.json form exactly as stored (range limits are the config
  // reader's, which names the config field).
  const auto c = config_of(
      llama_gguf_with(4, cat(cat(kv_u32("llama.block_count", 1), kv_f32("llama.rope.freq_base", 1e30f)),
                             cat(eps(0.f), kv_u32("tokenizer.ggml.eos_token_id", 4000000000u)))));
  EXPECT_EQ(c["num_hidden_layers"], 1);
  EXPECT_EQ(c["rope_theta"].get<double>(), static_cast<double>(1e30f));
  EXPECT_EQ(c["rms_norm_eps"].get<double>(), 0.0);
  EXPECT_EQ(c["eos_token_id"].get<int64_t>(), 4000000000);  // not wrapped to int32
  EXPECT_EQ(c["max_position_embeddings"], 32);
}

TEST(IoGgufConfig, ImpossibleValuesAreRefusedNamingTheGgufKey) {
  const Bytes one = kv_u32("llama.block_count", 1);
  expect_error([&] { config_of(llama_gguf_with(2, cat(kv_u32("llama.block_count", 1000000), eps(1e-5f)))); },
               {"m.gguf", "llama.block_count is 1000000 but the file holds tensors for blocks 0 to 0"});
  expect_error([&] { config_of(llama_gguf_with(2, cat(kv_u32("llama.block_count", 0), eps(1e-5f)))); },
               {"llama.block_count is 0"});
  expect_error([&] { config_of(llama_gguf_with(2, cat(one, eps(1e-5f)), 4096)); },
               {"llama.embedding_length is 4096 but token_embd.weight is [4, 8]"});
  expect_error([&] { config_of(llama_gguf_with(2, cat(one, eps(-1e-5f)))); },
               {"llama.attention.layer_norm_rms_epsilon is -1"});
  for (float base : {0.f, -1.f}) {
    expect_error(
        [&] {
          config_of(llama_gguf_with(3, cat(cat(one, eps(1e-5f)), kv_f32("llama.rope.freq_base", base))));
        },
        {"llama.rope.freq_base is", "expected a positive rotary base"});
  }
}

TEST(IoGgufConfig, NonFiniteAndOversizedValuesAreRefused) {
  const Bytes one_eps = cat(kv_u32("llama.block_count", 1), eps(1e-5f));
  // NaN would become JSON null (and then the default) in config.json form.
  expect_error([&] { config_of(llama_gguf_with(3, cat(one_eps, kv_f32("llama.rope.freq_base", NAN)))); },
               {"m.gguf", "llama.rope.freq_base", "not a finite number"});
  expect_error([&] { config_of(llama_gguf_with(2, cat(kv_u32("llama.block_count", 1), eps(INFINITY)))); },
               {"llama.attention.layer_norm_rms_epsilon", "not a finite number"});
  // A u64 block_count beyond int64 is refused by name, not wrapped.
  GgufBuilder k;
  k.str("llama.block_count").u32(10).u64(~0ull);
  expect_error([&] { config_of(llama_gguf_with(2, cat(k.bytes(), eps(1e-5f)))); },
               {"llama.block_count", "does not fit in int64"});
  // An array of u64 token types beyond int64.
  GgufBuilder arr;
  arr.str("tokenizer.ggml.token_type").u32(9).u32(10).u64(1).u64(~0ull);
  const Bytes t = llama_gguf_with(3, cat(one_eps, arr.bytes()));
  auto g = GgufFile::parse(t.data(), t.size(), "m.gguf");
  expect_error([&] { g->get_int_array("tokenizer.ggml.token_type"); },
               {"token_type", "does not fit in int64"});
}

namespace {
// Resident set size now (not the peak), from /proc/self/statm.
size_t rss_bytes() {
  std::ifstream in("/proc/self/statm");
  size_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// AddressSanitizer's redzones and quarantine (freed memory is kept a while) inflate resident memory about
// threefold, so the memory bounds below are scaled by this under it (scripts/test.sh stage 2).
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kRssSlack = 3;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr size_t kRssSlack = 3;
#else
constexpr size_t kRssSlack = 1;
#endif
#else
constexpr size_t kRssSlack = 1;
#endif
}  // namespace

TEST(IoGgufBounds, ArraysAreNotCopiedAtParseTime) {
  // 64M one-byte elements: validated against the bytes, decoded only when asked for (a copy as
  // uint64 would hold 512 MB for as long as the file is open).
  const uint64_t n = 64u << 20;
  GgufBuilder b;
  b.header(3, 0, 1).str("big").u32(9).u32(0).u64(n).zeros(n);
  const Bytes img = b.bytes();
  const size_t before = rss_bytes();
  auto g = GgufFile::parse(img.data(), img.size(), "big.gguf");
  EXPECT_LT(rss_bytes(), before + kRssSlack * (64u << 20));
  EXPECT_EQ(g->array_size("big"), n);
  GgufBuilder s;
  s.header(3, 0, 1).str("strs").u32(9).u32(8).u64(3).str("a").str("").str("ccc");
  const Bytes simg = s.bytes();
  auto sg = GgufFile::parse(simg.data(), simg.size(), "s.gguf");
  EXPECT_EQ(*sg->get_string_array("strs"), (std::vector<std::string>{"a", "", "ccc"}));
}

TEST(IoGgufBounds, OnlyFilesOfMostlyBlocksArePrefaultedAtOpen) {
  // 48 MiB in one tensor: as BF16 (type 30) the file is copied tensor by tensor at load, so opening it must
  // not fault its pages in; as Q8_0 (type 8) its blocks stay views of the mapping and are faulted in at open.
  TempDir dir;
  struct Case {
    uint32_t type;
    uint64_t rows, row_bytes;  // rows of 4096 values
    bool prefaulted;
  };
  for (const Case& c : {Case{30, 6144, 8192, false}, Case{8, 11565, 4352, true}}) {
    GgufBuilder b;
    b.header(3, 1, 0).tensor("w", {4096, c.rows}, c.type, 0).align().zeros(c.rows * c.row_bytes);
    const std::string path = dir / ("w" + std::to_string(c.type) + ".gguf");
    write_file(path, b.bytes());
    const size_t before = rss_bytes();
    auto g = GgufFile::open(path);
    const size_t now = rss_bytes(), grew = now > before ? now - before : 0;
    if (c.prefaulted) {
      EXPECT_GT(grew, size_t{40} << 20) << "type " << c.type;  // MADV_POPULATE_READ (Linux 5.14+)
    } else {
      EXPECT_LT(grew, kRssSlack * (size_t{8} << 20)) << "type " << c.type;
    }
  }
}

TEST(IoSafetensorsBounds, ManyEntriesAreStreamedNotHeldAsOneDom) {
  // 200k zero-size entries (and a duplicate name: the last entry wins, as in a JSON map).
  std::string header = "{";
  for (int i = 0; i < 200000; ++i)
    header += "\"e." + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},";
  header += R"("e.7":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"__metadata__":{"format":"pt"}})";
  const Bytes img = safetensors_bytes(header, Bytes(4));
  const size_t before = rss_bytes();
  const SafetensorsHeader h = parse_safetensors_header(img.data(), img.size(), "many.safetensors");
  EXPECT_LT(rss_bytes(), before + kRssSlack * (96u << 20));
  ASSERT_EQ(h.tensors.size(), 200000u);
  EXPECT_EQ(h.find("e.7")->dtype, "BF16");
  EXPECT_EQ(h.find("e.199999")->shape, (Shape{0}));
  EXPECT_EQ(h.metadata.at("format"), "pt");
  // Structure errors still name the tensor and the field.
  const Bytes bad =
      safetensors_bytes(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"b":{"dtype":7}})", {});
  expect_error([&] { parse_safetensors_header(bad.data(), bad.size(), "b.safetensors"); },
               {"b.safetensors: tensor 'b': 'dtype' is a JSON number, expected a string"});
  const Bytes top = safetensors_bytes("[1,2]", {});
  expect_error([&] { parse_safetensors_header(top.data(), top.size(), "t.safetensors"); },
               {"header is a JSON array, expected an object"});
  const Bytes scalar = safetensors_bytes("17", {});
  expect_error([&] { parse_safetensors_header(scalar.data(), scalar.size(), "s.safetensors"); },
               {"header is a JSON number, expected an object"});
}

TEST(IoShapes, ZeroDimDoesNotHideAnOverflowingShape) {
  // [0, 2^62, 4] holds no elements, but 2^62 * 4 overflows int64 wherever the shape is multiplied out.
  const Bytes st = safetensors_bytes(
      R"({"w":{"dtype":"F32","shape":[0,4611686018427387904,4],"data_offsets":[0,0]}})", {});
  expect_error([&] { parse_safetensors_header(st.data(), st.size(), "z.safetensors"); },
               {"z.safetensors: tensor 'w'", "too many elements"});
  GgufBuilder b;
  b.header(3, 1, 0).tensor("t", {0, 1ull << 57, 1ull << 30}, 0, 0).align().zeros(32);
  const Bytes g = b.bytes();
  expect_error([&] { GgufFile::parse(g.data(), g.size(), "z.gguf"); },
               {"z.gguf: tensor 't'", "dimensions overflow"});
}

TEST(IoSafetensorsBounds, OneValueCannotGrowIntoAHugeDom) {
  // Checked while streaming, before the value is built: a tensor entry is six JSON values, and
  // metadata maps strings to strings.
  std::string big = "[0";
  for (int i = 0; i < 100000; ++i) big += ",0";
  big += "]";
  const Bytes e = safetensors_bytes("{\"w\":" + big + "}", {});
  expect_error([&] { parse_safetensors_header(e.data(), e.size(), "e.safetensors"); },
               {"e.safetensors: tensor 'w'", "more than 64 JSON values"});
  const Bytes m = safetensors_bytes("{\"__metadata__\":{\"k\":" + big + "}}", {});
  expect_error([&] { parse_safetensors_header(m.data(), m.size(), "m.safetensors"); },
               {"m.safetensors: '__metadata__' value 'k' is a JSON array, expected a string"});
  const Bytes n = safetensors_bytes(R"({"__metadata__":[1]})", {});
  expect_error([&] { parse_safetensors_header(n.data(), n.size(), "n.safetensors"); },
               {"'__metadata__' is a JSON array, expected an object"});
  const Bytes ok = safetensors_bytes(R"({"__metadata__":{"format":"pt","n":3}})", {});
  EXPECT_EQ(parse_safetensors_header(ok.data(), ok.size(), "ok.safetensors").metadata.at("n"), "3");
}
