// GGUF: dequantisation against gguf-py, the llama -> Hugging Face view against
// transformers' own GGUF loader, and every kind of broken file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "models/architecture.h"
#include "models/config.h"
#include "tessera/model.h"
#include "test_io_util.h"

using namespace tessera;
using namespace tessera::io;
using namespace tessera::io::testing;

namespace {

std::vector<float> as_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert(t.data, t.dtype, out.data(), DType::F32, t.numel());
  return out;
}

// Largest |a - b| relative to max(1, |b|).
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  return m;
}

// A minimal llama GGUF: metadata, then the given tensor infos and zeroed data.
Bytes llama_gguf(
    const std::vector<std::tuple<std::string, std::vector<uint64_t>, uint32_t, uint64_t>>& tensors,
    size_t data_bytes, const std::string& arch = "llama") {
  GgufBuilder b;
  b.header(3, tensors.size(), 7)
      .kv_string("general.architecture", arch)
      .kv_u32("llama.embedding_length", 64)
      .kv_u32("llama.feed_forward_length", 96)
      .kv_u32("llama.block_count", 1)
      .kv_u32("llama.attention.head_count", 4)
      .kv_u32("llama.context_length", 128)
      .kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  for (const auto& [name, dims, type, off] : tensors) b.tensor(name, dims, type, off);
  b.align().zeros(data_bytes);
  return b.bytes();
}

}  // namespace

TEST(IoGguf, DequantisesEveryTypeLikeGgufPy) {
  auto g = GgufFile::open(fixture("quants.gguf"));
  auto expected = SafetensorsFile::open(fixture("quants_expected.safetensors"));
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(g->alignment(), 32u);
  int checked = 0;
  for (const auto& e : expected->header().tensors) {
    SCOPED_TRACE(e.name);
    const GgufTensorInfo* info = g->find_tensor(e.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->shape, (Shape{2, 256}));
    EXPECT_EQ("t." + info->type_name, e.name);
    const std::vector<float> want = as_f32(expected->load(e.name, DType::F32));
    const std::vector<float> got = as_f32(g->load_tensor(e.name, DType::F32));
    EXPECT_LE(max_rel_diff(got, want), 1e-6);
    // BF16/F16 outputs are the F32 values rounded once.
    const std::vector<float> got_bf16 = as_f32(g->load_tensor(e.name, DType::BF16));
    EXPECT_LE(max_rel_diff(got_bf16, want), 1.0 / 128);
    ++checked;
  }
  EXPECT_EQ(checked, 11);  // F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K
}

TEST(IoGguf, ZeroCopyForMatchingFloatTypes) {
  auto g = GgufFile::open(fixture("quants.gguf"));
  EXPECT_EQ(g->load_tensor("t.F32", DType::F32).data, g->load_tensor("t.F32", DType::F32).data);
  EXPECT_EQ(g->load_tensor("t.BF16", DType::BF16).data, g->load_tensor("t.BF16", DType::BF16).data);
  EXPECT_NE(g->load_tensor("t.F16", DType::F32).data, g->load_tensor("t.F16", DType::F32).data);
}

TEST(IoGguf, UnsupportedQuantTypeNamesTensorAndType) {
  auto g = GgufFile::open(fixture("quants.gguf"));
  expect_error([&] { g->load_tensor("t.Q2_K", DType::F32); },
               {"quants.gguf: tensor 't.Q2_K'", "GGML type Q2_K is not supported", "Q4_1"});
}

TEST(IoGguf, MetadataGetters) {
  auto g = GgufFile::open(fixture("tiny_llama.gguf"));
  EXPECT_EQ(g->get_string("general.architecture"), "llama");
  EXPECT_EQ(g->get_int("llama.block_count"), 1);
  EXPECT_NEAR(*g->get_float("llama.rope.freq_base"), 50000.0, 1e-9);
  EXPECT_EQ(g->get_string("nope"), std::nullopt);
  auto toks = g->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(toks);
  EXPECT_EQ(toks->size(), 32u);
  EXPECT_EQ((*toks)[5], "tok5");
  EXPECT_EQ(g->array_size("tokenizer.ggml.tokens"), 32u);
  expect_error([&] { g->get_int("general.architecture"); },
               {"metadata key 'general.architecture' is string, expected an integer"});
  expect_error([&] { g->get_int_array("tokenizer.ggml.tokens"); }, {"is array of string"});
}

TEST(IoGgufLlama, MatchesTransformersGgufLoader) {
  auto src = open_gguf(fixture("tiny_llama.gguf"));
  auto expected = SafetensorsFile::open(fixture("tiny_llama_expected.safetensors"));
  ASSERT_EQ(src->tensors().size(), expected->header().tensors.size());
  for (const auto& e : expected->header().tensors) {
    SCOPED_TRACE(e.name);
    const TensorMeta* m = src->find(e.name);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->shape, e.shape);
    const std::vector<float> want = as_f32(expected->load(e.name, DType::F32));
    EXPECT_LE(max_rel_diff(as_f32(src->load(e.name, DType::F32)), want), 1e-6);
  }
  EXPECT_EQ(src->find("model.layers.0.self_attn.q_proj.weight")->stored_type, "Q8_0");
  ASSERT_EQ(src->unmapped_tensors().size(), 1u);
  EXPECT_EQ(src->unmapped_tensors()[0], "rope_freqs.weight");
  ASSERT_NE(src->gguf(), nullptr);
}

TEST(IoGgufLlama, QkRowsAreUnpermuted) {
  // Guard against the test above passing vacuously: the raw GGUF rows differ from HF's.
  auto g = GgufFile::open(fixture("tiny_llama.gguf"));
  auto src = open_gguf(fixture("tiny_llama.gguf"));
  const auto raw = as_f32(g->load_tensor("blk.0.attn_k.weight", DType::F32));  // [32, 64], GGUF row order
  const auto hf = as_f32(src->load("model.layers.0.self_attn.k_proj.weight", DType::F32));
  ASSERT_EQ(raw.size(), hf.size());
  EXPECT_GT(max_rel_diff(raw, hf), 1e-3);
  // head_dim 16, 2 kv heads: HF row 1 (first half, i = 1) is GGUF row 2; HF row 8 (second half, i = 0) is
  // GGUF row 1.
  EXPECT_EQ(hf[1 * 64 + 3], raw[2 * 64 + 3]);
  EXPECT_EQ(hf[8 * 64 + 3], raw[1 * 64 + 3]);
}

TEST(IoGgufLlama, ConfigLikeTransformers) {
  auto src = open_gguf(fixture("tiny_llama.gguf"));
  auto want = nlohmann::json::parse(read_text_file(fixture("tiny_llama_expected.json")))["config"];
  auto got = nlohmann::json::parse(src->config_json());
  for (const auto& [k, v] : want.items()) {
    SCOPED_TRACE(k);
    ASSERT_TRUE(got.contains(k));
    if (v.is_number_float())
      EXPECT_NEAR(got[k].get<double>(), v.get<double>(), 1e-9 * std::abs(v.get<double>()));
    else
      EXPECT_EQ(got[k], v);
  }
  EXPECT_EQ(got["architectures"][0], "LlamaForCausalLM");
  auto gen = nlohmann::json::parse(src->generation_config_json());
  EXPECT_EQ(gen["eos_token_id"], 2);
}

TEST(IoGgufLlama, LoadsAsBf16) {
  auto src = open_gguf(fixture("tiny_llama.gguf"));
  Tensor t = src->load("model.layers.0.self_attn.q_proj.weight", DType::BF16);
  EXPECT_EQ(t.dtype, DType::BF16);
  EXPECT_EQ(t.shape, (Shape{64, 64}));
  auto f32 = as_f32(src->load("model.layers.0.self_attn.q_proj.weight", DType::F32));
  EXPECT_LE(max_rel_diff(as_f32(t), f32), 1.0 / 128);
}

TEST(IoGgufLlama, UnsupportedArchitectureListsSupported) {
  TempDir d;
  write_file(d / "m.gguf", llama_gguf({}, 0, "falcon"));
  expect_error(
      [&] { open_gguf(d / "m.gguf"); },
      {"m.gguf",
       "architecture 'falcon' is not supported (supported: llama (with experts: Mixtral), "
       "qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3, glm4, gpt-oss, smollm3, olmo2 (OLMo 2), qwen35 "
       "(Qwen3.5), qwen35moe (Qwen3.5-MoE), qwen3next (Qwen3-Next))"});
}

TEST(IoGgufLlama, MissingMetadataKey) {
  TempDir d;
  GgufBuilder b;
  b.header(3, 0, 1).kv_string("general.architecture", "llama");
  write_file(d / "m.gguf", b.bytes());
  expect_error([&] { open_gguf(d / "m.gguf"); }, {"m.gguf", "llama.attention.head_count' is missing"});
}

TEST(IoGgufLlama, DegenerateShapesDoNotCrash) {
  TempDir d;
  // An empty q projection and an embedding: loads as an empty tensor.
  write_file(
      d / "z.gguf",
      llama_gguf({{"token_embd.weight", {64, 4}, 0, 0}, {"blk.0.attn_q.weight", {64, 0}, 0, 1024}}, 1024));
  auto src = open_gguf(d / "z.gguf");
  EXPECT_EQ(src->load("model.layers.0.self_attn.q_proj.weight", DType::F32).numel(), 0);
  // q rows not divisible into 4 heads x 2 rotary halves.
  write_file(d / "r.gguf",
             llama_gguf({{"token_embd.weight", {64, 4}, 0, 0}, {"blk.0.attn_q.weight", {64, 6}, 0, 1024}},
                        1024 + 64 * 6 * 4));
  expect_error([&] { open_gguf(d / "r.gguf"); },
               {"blk.0.attn_q.weight' has 6 rows, not a multiple of 2 x 4 heads"});
}

TEST(IoGgufBad, BadMagicAndVersion) {
  TempDir d;
  write_file(d / "a.gguf", std::string("GGUX") + std::string(20, '\0'));
  expect_error([&] { GgufFile::open(d / "a.gguf"); }, {"a.gguf", "bad magic"});
  write_file(d / "b.gguf", GgufBuilder().header(1, 0, 0).bytes());
  expect_error([&] { GgufFile::open(d / "b.gguf"); },
               {"b.gguf", "unsupported GGUF version 1 (supported: 2, 3)"});
  write_file(d / "c.gguf", GgufBuilder().header(0x03000000, 0, 0).bytes());
  expect_error([&] { GgufFile::open(d / "c.gguf"); }, {"big-endian"});
  auto v2 = GgufFile::parse(GgufBuilder().header(2, 0, 0).bytes().data(), 24, "v2");
  EXPECT_EQ(v2->version(), 2u);
}

TEST(IoGgufBad, Truncated) {
  Bytes full = llama_gguf({{"token_embd.weight", {64, 32}, 0, 0}}, 64 * 32 * 4);
  for (size_t cut : {size_t(3), size_t(10), size_t(30), size_t(100), size_t(250), full.size() - 1}) {
    SCOPED_TRACE(cut);
    expect_error([&] { GgufFile::parse(full.data(), cut, "cut.gguf"); }, {"cut.gguf"});
  }
  expect_error(
      [&] { GgufFile::parse(full.data(), full.size() - 1, "cut.gguf"); },
      {"tensor 'token_embd.weight' (F32 [32, 64], 8192 bytes at data offset 0) extends past the end"});
}

TEST(IoGgufBad, HugeCountsAndLengths) {
  expect_error([&] { GgufFile::parse(GgufBuilder().header(3, 1ull << 60, 0).bytes().data(), 24, "h.gguf"); },
               {"h.gguf", "tensor info count 1152921504606846976 cannot fit"});
  expect_error([&] { GgufFile::parse(GgufBuilder().header(3, 0, ~0ull).bytes().data(), 24, "h.gguf"); },
               {"metadata key/value count"});
  Bytes s = GgufBuilder().header(3, 0, 1).u64(~0ull).zeros(16).bytes();
  expect_error([&] { GgufFile::parse(s.data(), s.size(), "h.gguf"); },
               {"h.gguf", "truncated", "length 18446744073709551615"});
  Bytes arr = GgufBuilder().header(3, 0, 1).str("k").u32(9).u32(4).u64(1ull << 62).zeros(16).bytes();
  expect_error([&] { GgufFile::parse(arr.data(), arr.size(), "h.gguf"); }, {"key 'k'", "element count"});
  Bytes nested = GgufBuilder()
                     .header(3, 0, 1)
                     .str("k")
                     .u32(9)
                     .u32(9)
                     .u64(1)
                     .u32(9)
                     .u64(1)
                     .u32(9)
                     .u64(1)
                     .u32(9)
                     .u64(1)
                     .u32(9)
                     .u64(1)
                     .u32(4)
                     .u64(0)
                     .bytes();
  expect_error([&] { GgufFile::parse(nested.data(), nested.size(), "h.gguf"); }, {"nested deeper"});
}

TEST(IoGgufBad, TensorInfoProblems) {
  auto one = [](std::vector<uint64_t> dims, uint32_t type, uint64_t off) {
    return GgufBuilder().header(3, 1, 0).tensor("w", std::move(dims), type, off).align().zeros(4096).bytes();
  };
  auto err = [](const Bytes& b, std::initializer_list<std::string> n) {
    expect_error([&] { GgufFile::parse(b.data(), b.size(), "t.gguf"); }, n);
  };
  err(one({32}, 77, 0), {"tensor 'w'", "unknown GGML type id 77"});
  err(one({33}, 2, 0), {"tensor 'w'", "row length 33 is not a multiple of the Q4_0 block size 32"});
  err(one({32}, 0, 7), {"data offset 7 is not a multiple of the alignment 32"});
  err(one({1ull << 40, 1ull << 40}, 0, 0), {"dimensions overflow"});
  err(one({}, 0, 0), {"0 dimensions"});
  err(one({1, 1, 1, 1, 1}, 0, 0), {"5 dimensions"});
  Bytes dup =
      GgufBuilder().header(3, 2, 0).tensor("w", {4}, 0, 0).tensor("w", {4}, 0, 32).align().zeros(64).bytes();
  err(dup, {"duplicate tensor 'w'"});
  Bytes ok = one({32, 2}, 2, 0);
  auto g = GgufFile::parse(ok.data(), ok.size(), "t.gguf");
  EXPECT_EQ(g->find_tensor("w")->shape, (Shape{2, 32}));
  EXPECT_EQ(g->find_tensor("w")->nbytes, 36u);
}

TEST(IoGgufBad, BadAlignment) {
  Bytes b = GgufBuilder().header(3, 0, 1).kv_u32("general.alignment", 48).bytes();
  expect_error([&] { GgufFile::parse(b.data(), b.size(), "a.gguf"); },
               {"general.alignment 48 is not a power of two"});
}

TEST(IoGgufBad, DuplicateKey) {
  Bytes b = GgufBuilder().header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2).bytes();
  expect_error([&] { GgufFile::parse(b.data(), b.size(), "d.gguf"); }, {"metadata key 'k'", "duplicate"});
}

namespace {

// The GGUF at `path` loaded as float32 against a golden: logits at every position within 1e-4 (the largest
// difference recorded as a test property) and 16 greedy tokens (no eos, as the golden's loop).
void expect_logits_and_greedy(const std::string& path, const nlohmann::json& want) {
  LoadOptions opt;
  opt.dtype = DType::F32;
  CausalLM model = AutoModelForCausalLM::from_pretrained(path, opt);
  const auto ids = want["input_ids"].get<std::vector<int32_t>>();
  const std::vector<float> got = model.forward(ids);
  const auto logits = want["logits"].get<std::vector<std::vector<double>>>();
  ASSERT_EQ(got.size(), logits.size() * logits[0].size());
  double worst = 0;
  for (size_t t = 0; t < logits.size(); ++t)
    for (size_t v = 0; v < logits[t].size(); ++v)
      worst = std::max(worst, std::abs(got[t * logits[t].size() + v] - logits[t][v]));
  EXPECT_LE(worst, 1e-4);
  char shown[32];
  std::snprintf(shown, sizeof shown, "%.3g", worst);
  ::testing::Test::RecordProperty("max_abs_logit_diff", shown);

  GenerationConfig g;
  g.max_new_tokens = 16;  // greedy, no eos: as the golden's loop
  const auto out = model.generate({ids}, {}, g);
  const std::vector<int32_t> new_ids(out.sequences[0].begin() + static_cast<std::ptrdiff_t>(ids.size()),
                                     out.sequences[0].end());
  EXPECT_EQ(new_ids, want["greedy_ids"].get<std::vector<int32_t>>());
}

// Qwen2 (q/k/v biases, untied) and Qwen3 (q/k norms, head_dim from attention.key_length, tied) GGUFs against
// what Transformers makes of the same files (tools/make_io_fixtures.py): the config it derives, the tensor
// names, the float32 logits of the whole model at every position, and 16 greedy tokens.
class IoGgufQwen : public ::testing::TestWithParam<std::string> {};

TEST_P(IoGgufQwen, ConfigTensorsLogitsAndGreedyMatchTransformersGgufLoader) {
  const std::string arch = GetParam();
  const std::string path = fixture("tiny_" + arch + ".gguf");
  const auto want = nlohmann::json::parse(read_text_file(fixture("tiny_" + arch + "_expected.json")));
  auto src = open_gguf(path);
  auto cfg = nlohmann::json::parse(src->config_json());
  EXPECT_EQ(cfg["architectures"][0], want["model_class"]);
  for (const auto& [k, v] : want["config"].items()) {
    SCOPED_TRACE(k);
    ASSERT_TRUE(cfg.contains(k));
    if (v.is_number_float())
      EXPECT_NEAR(cfg[k].get<double>(), v.get<double>(), 1e-9 * std::abs(v.get<double>()));
    else
      EXPECT_EQ(cfg[k], v);
  }
  std::vector<std::string> names;
  for (const TensorMeta& m : src->tensors()) names.push_back(m.name);
  auto hf = want["tensors"].get<std::vector<std::string>>();
  if (want["config"]["tie_word_embeddings"] == true)  // Transformers lists the tied head; the file has none
    hf.erase(std::remove(hf.begin(), hf.end(), "lm_head.weight"), hf.end());
  EXPECT_EQ(names, hf);

  expect_logits_and_greedy(path, want);
}

INSTANTIATE_TEST_SUITE_P(Archs, IoGgufQwen, ::testing::Values("qwen2", "qwen3"));

}  // namespace

namespace {

// Gemma 2 (norms stored as 1 + weight, both soft-caps, sliding window 4), Gemma 3 text (6 layers, q/k norms,
// five sliding layers and a global one), Phi-3 (fused attn_qkv and gate/up ffn_up, partial rotary, sliding
// window) and a Mistral written as llama.cpp writes it (arch llama, head_dim 32 apart from hidden / heads)
// against Transformers' GGUF loader on the same files (tools/make_io_fixtures.py). Where that loader leaves a
// key llama.cpp reads at its config class's default (Gemma: query_pre_attn_scalar, which llama.cpp derives
// from head_dim, and the soft-caps; Phi-3: sliding_window and rope.dimension_count) the golden was made with
// llama.cpp's value set on its config, listed in the file's "overrides". The prompt (11 tokens) is longer
// than the window. Checked: the config, the tensor names, f32 logits at every position within 1e-4, and 16
// greedy tokens. GLM-4 (q/k/v biases, fused ffn_up, post-sublayer norms, partial interleaved rotary, head_dim
// 16 != hidden / heads): Transformers' GGUF loader has no glm4, so its golden is the Glm4ForCausalLM the file
// was converted from, holding the weights the GGUF stores (dequantised by gguf-py).
class IoGgufLlamaCppArch : public ::testing::TestWithParam<std::string> {};

TEST_P(IoGgufLlamaCppArch, ConfigTensorsLogitsAndGreedyMatchTransformers) {
  const std::string arch = GetParam();
  const std::string path = fixture("tiny_" + arch + ".gguf");
  const auto want = nlohmann::json::parse(read_text_file(fixture("tiny_" + arch + "_expected.json")));
  auto src = open_gguf(path);
  auto cfg = nlohmann::json::parse(src->config_json());
  EXPECT_EQ(cfg["architectures"][0], want["model_class"]);
  auto expected_cfg = want["config"];
  for (const auto& [k, v] : want["overrides"].items()) expected_cfg[k] = v;
  for (const auto& [k, v] : expected_cfg.items()) {
    SCOPED_TRACE(k);
    ASSERT_TRUE(cfg.contains(k));
    if (v.is_number_float())
      EXPECT_NEAR(cfg[k].get<double>(), v.get<double>(), 1e-9 * std::abs(v.get<double>()));
    else
      EXPECT_EQ(cfg[k], v);
  }
  std::vector<std::string> names;
  for (const TensorMeta& m : src->tensors()) names.push_back(m.name);
  auto hf = want["tensors"].get<std::vector<std::string>>();
  if (want["config"]["tie_word_embeddings"] == true)
    hf.erase(std::remove(hf.begin(), hf.end(), "lm_head.weight"), hf.end());
  EXPECT_EQ(names, hf);

  expect_logits_and_greedy(path, want);
}

INSTANTIATE_TEST_SUITE_P(Archs, IoGgufLlamaCppArch,
                         ::testing::Values("gemma2", "gemma3", "phi3", "mistral", "glm4", "smollm3",
                                           "olmo2"));

// llama.cpp's converter stores Gemma's RMSNorm weights as 1 + weight; the source gives back HF's weight, so
// the Gemma models' (1 + weight) is not applied twice.
TEST(IoGgufGemma, NormWeightsLoadAsHuggingFaceStoresThem) {
  for (const std::string arch : {"gemma2", "gemma3"}) {
    SCOPED_TRACE(arch);
    auto g = GgufFile::open(fixture("tiny_" + arch + ".gguf"));
    auto src = open_gguf(g);
    const std::pair<const char*, const char*> norms[] = {
        {"output_norm.weight", "model.norm.weight"},
        {"blk.1.post_ffw_norm.weight", "model.layers.1.post_feedforward_layernorm.weight"},
        {"blk.1.ffn_norm.weight", "model.layers.1.pre_feedforward_layernorm.weight"}};
    for (const auto& [gguf_name, hf_name] : norms) {
      const std::vector<float> stored = as_f32(g->load_tensor(gguf_name, DType::F32));
      const std::vector<float> hf = as_f32(src->load(hf_name, DType::F32));
      ASSERT_EQ(hf.size(), stored.size());
      for (size_t i = 0; i < hf.size(); ++i) EXPECT_EQ(hf[i], stored[i] - 1.0f) << hf_name << "[" << i << "]";
    }
    // Other tensors are not shifted.
    EXPECT_EQ(as_f32(src->load("model.embed_tokens.weight", DType::F32)),
              as_f32(g->load_tensor("token_embd.weight", DType::F32)));
  }
}

// A minimal GGUF of `arch` (hidden 32, 2 heads, one block): its required metadata, the u32 keys given,
// token_embd, blk.0.attn_norm and the extra F32 tensors (GGUF dims order: columns first), zero data but what
// `data` gives (by tensor name).
Bytes arch_gguf(const std::string& arch, const std::vector<std::pair<std::string, uint32_t>>& keys,
                const std::vector<std::pair<std::string, std::vector<uint64_t>>>& extra = {},
                const std::map<std::string, std::vector<float>>& data = {}) {
  std::vector<std::pair<std::string, std::vector<uint64_t>>> tensors = {{"token_embd.weight", {32, 48}},
                                                                        {"blk.0.attn_norm.weight", {32}}};
  tensors.insert(tensors.end(), extra.begin(), extra.end());
  GgufBuilder b;
  b.header(3, tensors.size(), 7 + keys.size())
      .kv_string("general.architecture", arch)
      .kv_u32(arch + ".embedding_length", 32)
      .kv_u32(arch + ".feed_forward_length", 64)
      .kv_u32(arch + ".block_count", 1)
      .kv_u32(arch + ".attention.head_count", 2)
      .kv_u32(arch + ".context_length", 64)
      .kv_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  for (const auto& [k, v] : keys) b.kv_u32(arch + "." + k, v);
  uint64_t offset = 0;
  for (const auto& [name, dims] : tensors) {
    b.tensor(name, dims, 0, offset);
    uint64_t n = 4;
    for (uint64_t d : dims) n *= d;
    offset += (n + 31) / 32 * 32;
  }
  b.align();
  for (const auto& [name, dims] : tensors) {
    uint64_t n = 1;
    for (uint64_t d : dims) n *= d;
    const auto it = data.find(name);
    if (it != data.end() && it->second.size() == n) {
      b.raw(it->second.data(), n * 4);
    } else {
      b.zeros(n * 4);
    }
    b.zeros((n * 4 + 31) / 32 * 32 - n * 4);
  }
  return b.bytes();
}

// Phi-3's 128k variants as llama.cpp's converter writes them: the longrope factors as F32 tensors and the
// original context in metadata become config.json's rope_scaling and original_max_position_embeddings, and
// are not weights; zero factors are refused by the config reader, naming the field.
TEST(IoGgufLlamaCppArch, Phi3LongropeFactorsBecomeRopeScaling) {
  TempDir d;
  const std::vector<float> short_f = {1, 1.5f, 2, 2.5f, 3, 3.5f, 4, 4.5f}, long_f = {2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<std::pair<std::string, std::vector<uint64_t>>> tensors = {
      {"rope_factors_short.weight", {8}}, {"rope_factors_long.weight", {8}}};
  write_file(d / "p.gguf",
             arch_gguf("phi3", {{"rope.scaling.original_context_length", 16}}, tensors,
                       {{"rope_factors_short.weight", short_f}, {"rope_factors_long.weight", long_f}}));
  auto src = open_gguf(d / "p.gguf");
  auto cfg = nlohmann::json::parse(src->config_json());
  EXPECT_EQ(cfg["rope_scaling"]["rope_type"], "longrope");
  EXPECT_EQ(cfg["rope_scaling"]["short_factor"].get<std::vector<float>>(), short_f);
  EXPECT_EQ(cfg["rope_scaling"]["long_factor"].get<std::vector<float>>(), long_f);
  EXPECT_EQ(cfg["original_max_position_embeddings"], 16);
  EXPECT_FALSE(cfg["rope_scaling"].contains("attention_factor"));
  for (const auto& t : src->tensors()) EXPECT_EQ(t.name.find("rope_factors"), std::string::npos) << t.name;
  EXPECT_TRUE(src->unmapped_tensors().empty());
  cfg["pad_token_id"] = 0;  // the minimal file has no tokenizer (Phi3Config's default pad id 32000)
  const models::DecoderConfig c =
      models::find_architecture("Phi3ForCausalLM", "p.gguf").parse_config(cfg, "p.gguf");
  EXPECT_EQ(c.rope.type, "longrope");
  EXPECT_EQ(c.longrope_switch(), 16);
  write_file(d / "z.gguf", arch_gguf("phi3", {{"rope.scaling.original_context_length", 16}}, tensors));
  auto zero = nlohmann::json::parse(open_gguf(d / "z.gguf")->config_json());
  zero["pad_token_id"] = 0;
  expect_error([&] { models::find_architecture("Phi3ForCausalLM", "z.gguf").parse_config(zero, "z.gguf"); },
               {"z.gguf", "short_factor", "positive"});
}

// GLM-4 without attention.key_length or rope.dimension_count: llama.cpp's head size (hidden / heads) and a
// whole-head rotary part, said explicitly because Glm4Config's defaults (head_dim 128, factor 0.5) differ.
TEST(IoGgufLlamaCppArch, Glm4DefaultsAreLlamaCppsNotGlm4Configs) {
  TempDir d;
  write_file(d / "g.gguf", arch_gguf("glm4", {}));
  auto cfg = nlohmann::json::parse(open_gguf(d / "g.gguf")->config_json());
  EXPECT_EQ(cfg["head_dim"], 16);
  EXPECT_EQ(cfg["partial_rotary_factor"], 1.0);
  write_file(d / "h.gguf", arch_gguf("glm4", {{"attention.key_length", 8}, {"rope.dimension_count", 4}}));
  cfg = nlohmann::json::parse(open_gguf(d / "h.gguf")->config_json());
  EXPECT_EQ(cfg["head_dim"], 8);
  EXPECT_EQ(cfg["partial_rotary_factor"], 0.5);
}

TEST(IoGgufLlamaCppArch, BadInputsNameTheFileAndKey) {
  TempDir d;
  // Gemma 2: a value head size apart from the key head size (HF attention has one head_dim).
  write_file(d / "g2.gguf",
             arch_gguf("gemma2", {{"attention.key_length", 16}, {"attention.value_length", 8}}));
  expect_error([&] { open_gguf(d / "g2.gguf"); },
               {"g2.gguf", "gemma2.attention.value_length is 8 but the key length is 16",
                "gemma2.attention.key_length"});
  // Gemma 2: a soft-cap of 0 (tanh(s / 0)).
  write_file(d / "g2c.gguf", arch_gguf("gemma2", {{"attn_logit_softcapping", 0}}));
  expect_error([&] { open_gguf(d / "g2c.gguf"); },
               {"g2c.gguf", "gemma2.attn_logit_softcapping is 0, expected a positive number"});
  // OLMo 3 (llama.cpp writes it as olmo2 with a sliding window): not read yet, said by name.
  write_file(d / "o3.gguf", arch_gguf("olmo2", {{"attention.sliding_window", 4}}));
  expect_error([&] { open_gguf(d / "o3.gguf"); },
               {"o3.gguf", "olmo2.attention.sliding_window is set", "OLMo 3", "Olmo3ForCausalLM"});
  // Gemma 3: llama.cpp requires the sliding window.
  write_file(d / "g3.gguf", arch_gguf("gemma3", {}));
  expect_error([&] { open_gguf(d / "g3.gguf"); },
               {"g3.gguf", "GGUF metadata key 'gemma3.attention.sliding_window' is missing"});
  // Phi-3: separate q/k/v projections instead of the fused attn_qkv; the longrope factors of the 128k models.
  write_file(d / "p.gguf", arch_gguf("phi3", {}, {{"blk.0.attn_q.weight", {32, 32}}}));
  expect_error([&] { open_gguf(d / "p.gguf"); },
               {"p.gguf", "tensor 'blk.0.attn_q.weight'", "phi3 GGUF with separate q/k/v", "attn_qkv"});
  write_file(d / "pl.gguf", arch_gguf("phi3", {{"rope.scaling.original_context_length", 16}},
                                      {{"rope_factors_long.weight", {8}}}));
  expect_error([&] { open_gguf(d / "pl.gguf"); },
               {"pl.gguf", "tensor 'rope_factors_short.weight' is missing", "longrope"});
  // Phi-3: a rotary part that is no even size within the head (16).
  write_file(d / "pr.gguf", arch_gguf("phi3", {{"rope.dimension_count", 5}}));
  expect_error([&] { open_gguf(d / "pr.gguf"); }, {"pr.gguf", "phi3.rope.dimension_count is 5"});
  // GLM-4: a fused attn_qkv (llama.cpp reads one; Glm4ForCausalLM has separate q/k/v), a separate ffn_gate,
  // NextN layers, and a rotary part that is no even size within the head.
  write_file(d / "gq.gguf", arch_gguf("glm4", {}, {{"blk.0.attn_qkv.weight", {32, 64}}}));
  expect_error([&] { open_gguf(d / "gq.gguf"); },
               {"gq.gguf", "tensor 'blk.0.attn_qkv.weight'", "glm4 GGUF with a fused attn_qkv", "attn_q"});
  write_file(d / "gg.gguf", arch_gguf("glm4", {}, {{"blk.0.ffn_gate.weight", {32, 64}}}));
  expect_error([&] { open_gguf(d / "gg.gguf"); }, {"gg.gguf", "tensor 'blk.0.ffn_gate.weight'", "ffn_up"});
  write_file(d / "gn.gguf", arch_gguf("glm4", {}, {{"blk.0.nextn.eh_proj.weight", {64, 32}}}));
  expect_error([&] { open_gguf(d / "gn.gguf"); },
               {"gn.gguf", "tensor 'blk.0.nextn.eh_proj.weight'", "NextN"});
  write_file(d / "gr.gguf", arch_gguf("glm4", {{"rope.dimension_count", 7}}));
  expect_error([&] { open_gguf(d / "gr.gguf"); }, {"gr.gguf", "glm4.rope.dimension_count is 7"});
  // llama (Mistral's GGUF architecture): a rotary part smaller than the head.
  write_file(d / "m.gguf", arch_gguf("llama", {{"attention.key_length", 32}, {"rope.dimension_count", 16}}));
  expect_error([&] { open_gguf(d / "m.gguf"); },
               {"m.gguf", "llama.rope.dimension_count is 16 but the head size is 32", "not supported"});
}

}  // namespace
