// safetensors parsing and Hugging Face model directories: good paths and every bad input.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <random>
#include <tuple>

#include "io/gguf_quants.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "test_io_util.h"

using namespace tessera;
using namespace tessera::io;
using namespace tessera::io::testing;

namespace {

const char* kConfig = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4})";

SafetensorsHeader parse(const std::string& header, const Bytes& data) {
  Bytes b = safetensors_bytes(header, data);
  return parse_safetensors_header(b.data(), b.size(), "x.safetensors");
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out;
  for (float f : v) out.push_back(f32_to_bf16(f));
  return out;
}

std::vector<uint16_t> to_f16(const std::vector<float>& v) {
  std::vector<uint16_t> out;
  for (float f : v) out.push_back(f32_to_f16(f));
  return out;
}

// A directory with config.json and one model.safetensors holding F32, BF16 and F16 tensors.
void make_model_dir(const TempDir& d) {
  write_file(d / "config.json", kConfig);
  write_file(d / "generation_config.json", R"({"eos_token_id": [2, 3]})");
  SafetensorsBuilder b;
  b.add_f32("a.f32", {2, 3}, {1, 2, 3, 4, 5, 6});
  b.add_u16("b.bf16", "BF16", {3}, to_bf16({1.5f, -2.0f, 3.25f}));
  b.add_u16("c.f16", "F16", {2}, to_f16({0.5f, -7.0f}));
  write_file(d / "model.safetensors", b.bytes());
}

}  // namespace

TEST(IoMappedFile, ErrorsNameTheFile) {
  TempDir d;
  expect_error([&] { MappedFile::open(d / "missing.bin"); }, {"missing.bin", "no such file"});
  expect_error([&] { MappedFile::open(d.path()); }, {d.path(), "is a directory"});
  write_file(d / "empty.bin", Bytes{});
  expect_error([&] { MappedFile::open(d / "empty.bin"); }, {"empty.bin", "empty"});
  write_file(d / "ok.bin", Bytes{1, 2, 3});
  auto f = MappedFile::open(d / "ok.bin");
  EXPECT_EQ(f->size(), 3u);
  EXPECT_EQ(f->data()[2], 3);
  if (::geteuid() != 0) {  // root reads anything, so the permission case only runs as a user
    write_file(d / "secret.bin", Bytes{1});
    ::chmod((d / "secret.bin").c_str(), 0);
    expect_error([&] { MappedFile::open(d / "secret.bin"); }, {"secret.bin", "permission denied"});
  }
}

TEST(IoSafetensors, ParsesHeaderAndMetadata) {
  Bytes data(24);
  auto h = parse(
      R"({"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}})",
      data);
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].name, "w");
  EXPECT_EQ(h.tensors[0].shape, (Shape{2, 3}));
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.data_size, 24u);
}

TEST(IoSafetensors, TruncatedFile) {
  Bytes tiny = {1, 2, 3};
  expect_error([&] { parse_safetensors_header(tiny.data(), tiny.size(), "t.safetensors"); },
               {"t.safetensors", "too short"});
  // A valid file cut in the middle of its data: the tensor now extends past the end.
  Bytes full = SafetensorsBuilder().add_f32("w", {4}, {1, 2, 3, 4}).bytes();
  full.resize(full.size() - 5);
  expect_error(
      [&] { parse_safetensors_header(full.data(), full.size(), "cut.safetensors"); },
      {"cut.safetensors: tensor 'w': data_offsets [0, 16] extend past the end of the data (size 11)"});
}

TEST(IoSafetensors, HeaderLengthPastEnd) {
  Bytes b = safetensors_bytes("{}", {});
  b[0] = 0xff;
  b[1] = 0xff;
  expect_error([&] { parse_safetensors_header(b.data(), b.size(), "h.safetensors"); },
               {"h.safetensors", "header length 65535 extends past the end of the file (size 10)"});
}

TEST(IoSafetensors, MalformedHeaders) {
  Bytes d16(16);
  expect_error([&] { parse("{not json", d16); }, {"x.safetensors", "not valid JSON"});
  expect_error([&] { parse("[1, 2]", d16); },
               {"x.safetensors", "header is a JSON array, expected an object"});
  expect_error([&] { parse(R"({"w": {"shape": [4], "data_offsets": [0, 16]}})", d16); },
               {"tensor 'w'", "missing 'dtype'"});
  expect_error([&] { parse(R"({"w": {"dtype": "F32", "data_offsets": [0, 16]}})", d16); },
               {"tensor 'w'", "missing 'shape'"});
  expect_error([&] { parse(R"({"w": {"dtype": "F32", "shape": [4]}})", d16); },
               {"tensor 'w'", "missing 'data_offsets'"});
  expect_error([&] { parse(R"({"w": {"dtype": "Q7", "shape": [4], "data_offsets": [0, 16]}})", d16); },
               {"tensor 'w'", "unknown dtype 'Q7'"});
  expect_error([&] { parse(R"({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})", d16); },
               {"tensor 'w'", "negative"});
  expect_error([&] { parse(R"({"w": 5})", d16); }, {"tensor 'w'", "expected an object"});
}

TEST(IoSafetensors, OffsetsOutOfRangeOrReversed) {
  Bytes d16(16);
  expect_error([&] { parse(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", d16); },
               {"x.safetensors: tensor 'w': data_offsets [8, 24] extend past the end of the data (size 16)"});
  expect_error([&] { parse(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [16, 0]}})", d16); },
               {"tensor 'w'", "[16, 0]", "end before they begin"});
  expect_error(
      [&] {
        parse(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 18446744073709551615]}})", d16);
      },
      {"tensor 'w'"});
}

TEST(IoSafetensors, SizeDisagreesWithShapeAndDtype) {
  Bytes d16(16);
  expect_error([&] { parse(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", d16); },
               {"tensor 'w'", "hold 16 bytes but F32 [3] needs 12"});
  expect_error([&] { parse(R"({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 16]}})", d16); },
               {"tensor 'w'", "BF16 [4] needs 8"});
  expect_error(
      [&] {
        parse(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 4], "data_offsets": [0, 16]}})",
              d16);
      },
      {"tensor 'w'", "too many elements"});
}

TEST(IoSafetensors, OverlappingTensors) {
  Bytes d16(16);
  expect_error(
      [&] {
        parse(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
                  "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
              d16);
      },
      {"tensor 'b'", "[8, 16] overlap tensor 'a' [0, 12]"});
  // Zero-sized tensors hold no bytes and never overlap.
  auto h = parse(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                     "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}})",
                 d16);
  EXPECT_EQ(h.tensors.size(), 2u);
}

TEST(IoSafetensors, NamesFromTheFileArePrintable) {
  Bytes d16(16);
  std::string msg = expect_error(
      [&] {
        parse("{\"bad\\nname\": {\"dtype\": \"F32\", \"shape\": [8], \"data_offsets\": [0, 16]}}", d16);
      },
      {"bad\\x0aname"});
}

TEST(IoSafetensorsDir, ZeroCopyWhenDtypeMatches) {
  TempDir d;
  make_model_dir(d);
  auto src = open_safetensors_dir(d.path());
  ASSERT_EQ(src->tensors().size(), 3u);
  EXPECT_EQ(src->tensors()[0].name, "a.f32");  // sorted by name
  EXPECT_EQ(src->find("b.bf16")->stored_type, "BF16");
  EXPECT_EQ(src->find("missing"), nullptr);
  EXPECT_NE(src->config_json().find("LlamaForCausalLM"), std::string::npos);
  EXPECT_NE(src->generation_config_json().find("eos_token_id"), std::string::npos);

  Tensor a1 = src->load("a.f32", DType::F32);
  Tensor a2 = src->load("a.f32", DType::F32);
  EXPECT_EQ(a1.data, a2.data) << "same dtype must be a view into the mapping";
  EXPECT_EQ(a1.shape, (Shape{2, 3}));
  EXPECT_FLOAT_EQ(a1.ptr<float>()[5], 6.0f);
  Tensor b = src->load("b.bf16", DType::BF16);
  EXPECT_EQ(b.data, src->load("b.bf16", DType::BF16).data);
  EXPECT_FLOAT_EQ(bf16_to_f32(b.ptr<uint16_t>()[2]), 3.25f);
}

TEST(IoSafetensorsDir, ConvertsOtherDtypes) {
  TempDir d;
  make_model_dir(d);
  auto src = open_safetensors_dir(d.path());
  Tensor a = src->load("a.f32", DType::BF16);
  EXPECT_EQ(a.dtype, DType::BF16);
  EXPECT_FLOAT_EQ(bf16_to_f32(a.ptr<uint16_t>()[4]), 5.0f);
  Tensor b = src->load("b.bf16", DType::F32);
  EXPECT_FLOAT_EQ(b.ptr<float>()[1], -2.0f);
  Tensor c = src->load("c.f16", DType::F32);
  EXPECT_FLOAT_EQ(c.ptr<float>()[1], -7.0f);
  Tensor c2 = src->load("c.f16", DType::BF16);
  EXPECT_FLOAT_EQ(bf16_to_f32(c2.ptr<uint16_t>()[0]), 0.5f);
  expect_error([&] { src->load("a.f32", DType::I32); }, {"tensor 'a.f32'", "cannot load weights as int32"});
  expect_error([&] { src->load("nope", DType::F32); }, {d.path(), "no tensor named 'nope'"});
}

TEST(IoSafetensorsDir, ViewOutlivesTheSource) {
  TempDir d;
  make_model_dir(d);
  Tensor a;
  {
    auto src = open_safetensors_dir(d.path());
    a = src->load("a.f32", DType::F32);
  }
  EXPECT_FLOAT_EQ(a.ptr<float>()[0], 1.0f);  // the mapping is kept alive by the tensor
}

TEST(IoSafetensorsDir, UnsupportedDtypeIsListedButCannotLoadAsFloat) {
  TempDir d;
  write_file(d / "config.json", kConfig);
  std::vector<int64_t> ids = {1, 2, 3};
  write_file(d / "model.safetensors", SafetensorsBuilder().add("ids", "I64", {3}, ids.data(), 24).bytes());
  auto src = open_safetensors_dir(d.path());
  EXPECT_EQ(src->find("ids")->stored_type, "I64");
  expect_error([&] { src->load("ids", DType::F32); },
               {"model.safetensors: tensor 'ids': stored as I64, which cannot be loaded as float32"});
}

TEST(IoSafetensorsDir, MissingOrMalformedConfig) {
  TempDir d;
  write_file(d / "model.safetensors", SafetensorsBuilder().add_f32("w", {1}, {1}).bytes());
  expect_error([&] { open_safetensors_dir(d.path()); }, {d / "config.json", "missing"});
  write_file(d / "config.json", "{\"hidden_size\": ");
  expect_error([&] { open_safetensors_dir(d.path()); }, {d / "config.json", "malformed JSON"});
  write_file(d / "config.json", "[1]");
  expect_error([&] { open_safetensors_dir(d.path()); }, {d / "config.json", "expected a JSON object"});
  write_file(d / "config.json", kConfig);
  write_file(d / "generation_config.json", "{oops");
  expect_error([&] { open_safetensors_dir(d.path()); }, {"generation_config.json", "malformed JSON"});
}

TEST(IoSafetensorsDir, NoWeights) {
  TempDir d;
  write_file(d / "config.json", kConfig);
  expect_error([&] { open_safetensors_dir(d.path()); },
               {"no model.safetensors or model.safetensors.index.json"});
  expect_error([&] { open_safetensors_dir(d / "nowhere"); }, {"nowhere", "not a directory"});
}

TEST(IoSafetensorsDir, ShardedIndex) {
  TempDir d;
  write_file(d / "config.json", kConfig);
  write_file(d / "model-00001-of-00002.safetensors",
             SafetensorsBuilder().add_f32("x", {2}, {1, 2}).add_f32("y", {1}, {3}).bytes());
  write_file(d / "model-00002-of-00002.safetensors", SafetensorsBuilder().add_f32("z", {1}, {4}).bytes());
  write_file(d / "model.safetensors.index.json", R"({"metadata": {"total_size": 16}, "weight_map": {
      "x": "model-00001-of-00002.safetensors", "y": "model-00001-of-00002.safetensors",
      "z": "model-00002-of-00002.safetensors"}})");
  auto src = open_safetensors_dir(d.path());
  ASSERT_EQ(src->tensors().size(), 3u);
  EXPECT_EQ(src->find("z")->file, d / "model-00002-of-00002.safetensors");
  EXPECT_FLOAT_EQ(src->load("z", DType::F32).ptr<float>()[0], 4.0f);
  EXPECT_FLOAT_EQ(src->load("x", DType::F32).ptr<float>()[1], 2.0f);
}

TEST(IoSafetensorsDir, IndexPointingToMissingShardOrTensor) {
  TempDir d;
  write_file(d / "config.json", kConfig);
  write_file(d / "a.safetensors", SafetensorsBuilder().add_f32("x", {1}, {1}).bytes());
  write_file(d / "model.safetensors.index.json",
             R"({"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}})");
  expect_error([&] { open_safetensors_dir(d.path()); },
               {"model.safetensors.index.json", "shard 'b.safetensors'", "'y'", "not found"});
  write_file(d / "model.safetensors.index.json",
             R"({"weight_map": {"x": "a.safetensors", "q": "a.safetensors"}})");
  expect_error([&] { open_safetensors_dir(d.path()); },
               {"a.safetensors: tensor 'q' is listed in", "but not in this shard"});
  write_file(d / "model.safetensors.index.json", R"({"weight_map": {"x": "../a.safetensors"}})");
  expect_error([&] { open_safetensors_dir(d.path()); }, {"expected a file name in the same directory"});
  write_file(d / "model.safetensors.index.json", R"({"nothing": 1})");
  expect_error([&] { open_safetensors_dir(d.path()); }, {"missing 'weight_map'"});
}

TEST(IoSafetensorsDir, CorruptShardNamesTheFile) {
  TempDir d;
  write_file(d / "config.json", kConfig);
  Bytes b = SafetensorsBuilder().add_f32("w", {4}, {1, 2, 3, 4}).bytes();
  b.resize(b.size() - 4);
  write_file(d / "model.safetensors", b);
  expect_error([&] { open_safetensors_dir(d.path()); },
               {d / "model.safetensors", "tensor 'w'", "extend past the end of the data"});
}

TEST(IoSafetensorsDir, ReadsAFileWrittenByTheSafetensorsLibrary) {
  // quants_expected.safetensors is written by safetensors.numpy.save_file (tools/make_io_fixtures.py).
  auto f = SafetensorsFile::open(fixture("quants_expected.safetensors"));
  ASSERT_NE(f->header().find("t.Q4_1"), nullptr);
  EXPECT_EQ(f->header().find("t.Q4_1")->shape, (Shape{2, 256}));
  EXPECT_EQ(f->load("t.Q4_1", DType::F32).numel(), 512);
}

// gpt-oss's MXFP4 experts as the hub stores them (<proj>_blocks U8 [E, N, K / 32, 16]: byte j of a block
// holds values 2j (low nibble) and 2j + 1 (high); <proj>_scales U8 [E, N, K / 32], E8M0) are presented as
// <proj> [E, N, K] stored "MXFP4" (io/expert_layout.cpp): GGML's blocks (byte j: values j and j + 16) with
// gate_up's interleaved rows (gate at even ones) de-interleaved, or dequantised. The expected values here are
// computed from the hub's layout directly (FP4 E2M1 * 2^(scale - 127)).
namespace mxfp4 {

constexpr double kFp4[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};

struct Proj {
  std::vector<uint8_t> blocks, scales;
  int64_t E, N, nb;
  double value(int64_t e, int64_t n, int64_t k) const {  // the hub's layout, row n as stored
    const int64_t b = k / 32, i = k % 32;
    const uint8_t byte = blocks[static_cast<size_t>(((e * N + n) * nb + b) * 16 + i / 2)];
    return std::ldexp(kFp4[i % 2 == 0 ? byte & 0xf : byte >> 4],
                      scales[static_cast<size_t>((e * N + n) * nb + b)] - 127);
  }
};

Proj random_proj(int64_t E, int64_t N, int64_t nb, uint32_t seed) {
  std::mt19937 rng(seed);
  Proj p{std::vector<uint8_t>(static_cast<size_t>(E * N * nb * 16)),
         std::vector<uint8_t>(static_cast<size_t>(E * N * nb)), E, N, nb};
  for (auto& b : p.blocks) b = static_cast<uint8_t>(rng());
  for (auto& s : p.scales) s = static_cast<uint8_t>(120 + rng() % 10);
  return p;
}

void write_dir(const TempDir& d, const std::map<std::string, const Proj*>& projs,
               const std::string& dtype = "U8", bool scales = true) {
  write_file(d / "config.json", R"({"architectures": ["GptOssForCausalLM"]})");
  SafetensorsBuilder b;
  for (const auto& [name, p] : projs) {
    const std::string base = "model.layers.0.mlp.experts." + name;
    b.add(base + "_blocks", dtype, {p->E, p->N, p->nb, 16}, p->blocks.data(), p->blocks.size());
    if (scales) b.add(base + "_scales", "U8", {p->E, p->N, p->nb}, p->scales.data(), p->scales.size());
  }
  write_file(d / "model.safetensors", b.bytes());
}

}  // namespace mxfp4

TEST(IoSafetensorsMxfp4, ExpertsPresentedAsGgmlBlocksWithGateAndUpApartOrDequantised) {
  TempDir d;
  const mxfp4::Proj gate_up = mxfp4::random_proj(3, 4, 2, 1), down = mxfp4::random_proj(3, 5, 1, 2);
  mxfp4::write_dir(d, {{"gate_up_proj", &gate_up}, {"down_proj", &down}});
  auto src = open_checkpoint(d.path());
  ASSERT_EQ(src->tensors().size(), 2u);
  for (const auto& [name, p, K] :
       {std::tuple{"gate_up_proj", &gate_up, 64}, std::tuple{"down_proj", &down, 32}}) {
    const std::string full = std::string("model.layers.0.mlp.experts.") + name;
    const TensorMeta* m = src->find(full);
    ASSERT_NE(m, nullptr) << full;
    EXPECT_EQ(m->shape, (Shape{3, p->N, K})) << full;
    EXPECT_EQ(m->stored_type, "MXFP4");
    const Tensor q = src->load(full, DType::MXFP4), f = src->load(full, DType::F32);
    ASSERT_EQ(q.nbytes(), static_cast<size_t>(3 * p->N * K / 32 * 17));
    std::vector<float> deq(static_cast<size_t>(q.numel()));
    dequantize_blocks(39, static_cast<const uint8_t*>(q.data), deq.data(), deq.size() / 32);
    const bool gu = std::string(name) == "gate_up_proj";
    for (int64_t e = 0; e < 3; ++e)
      for (int64_t r = 0; r < p->N; ++r) {
        const int64_t stored_row = gu ? (r < p->N / 2 ? 2 * r : 2 * (r - p->N / 2) + 1) : r;
        for (int64_t k = 0; k < K; ++k) {
          const size_t i = static_cast<size_t>((e * p->N + r) * K + k);
          ASSERT_EQ(deq[i], static_cast<float>(p->value(e, stored_row, k)))
              << full << " " << e << " " << r << " " << k;
          ASSERT_EQ(f.ptr<float>()[i], deq[i]);
        }
      }
  }
  expect_error([&] { src->load("model.layers.0.mlp.experts.down_proj", DType::Q8_0); },
               {"model.layers.0.mlp.experts.down_proj", "MXFP4 blocks", "q8_0"});
}

TEST(IoSafetensorsMxfp4, BrokenPairsAreRefusedNamingTheTensors) {
  const mxfp4::Proj down = mxfp4::random_proj(2, 4, 1, 3);
  {
    TempDir d;
    mxfp4::write_dir(d, {{"down_proj", &down}}, "U8", false);
    expect_error([&] { open_checkpoint(d.path()); }, {"down_proj_blocks", "down_proj_scales", "beside it"});
  }
  {
    TempDir d;
    mxfp4::write_dir(d, {{"down_proj", &down}}, "I8");
    expect_error([&] { open_checkpoint(d.path()); }, {"down_proj_blocks", "I8 / U8", "are U8"});
  }
  {
    TempDir d;
    const mxfp4::Proj odd = mxfp4::random_proj(2, 3, 1, 4);  // gate_up rows must pair gate with up
    mxfp4::write_dir(d, {{"gate_up_proj", &odd}});
    expect_error([&] { open_checkpoint(d.path()); }, {"gate_up_proj_blocks", "[2, 3, 1, 16]", "N even"});
  }
}
