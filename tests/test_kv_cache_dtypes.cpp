// Quantised KV caches (LoadOptions::kv_cache_dtype q8_0 / fp8; native cpu backend and xla-cpu): logits near
// those of a bfloat16 cache on every golden model, results that do not depend on the company a request keeps
// (a batch, a prefix-cache hit), the bytes a position takes, and a clear error for what cannot run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "golden_util.h"
#include "pjrt_test_util.h"
#include "tessera/batch.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
namespace golden = tessera::golden;

namespace {

CausalLM load(const std::string& name, const std::string& kv) {
  LoadOptions o;
  o.dtype = DType::F32;
  o.kv_cache_dtype = kv;
  return AutoModelForCausalLM::from_pretrained(golden::model_path(name), o);
}

GenerationConfig greedy(int n) {
  GenerationConfig g;
  g.max_new_tokens = n;
  return g;
}

float max_abs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// The largest difference of two logit vectors over the reference's largest magnitude.
double relative_gap(const std::vector<float>& got, const std::vector<float>& ref) {
  return golden::max_abs_diff(got, ref).max_abs / std::max(1e-6, static_cast<double>(max_abs(ref)));
}

// Each position's relative_gap of `got` against `ref` ([positions, vocab] logits), ascending.
std::vector<double> position_gaps(const std::vector<float>& got, const std::vector<float>& ref,
                                  size_t positions, int64_t vocab) {
  std::vector<double> gaps;
  for (size_t t = 0; t < positions; ++t) {
    const auto at = [&](const std::vector<float>& v) {
      return std::vector<float>(v.begin() + static_cast<long>(t * vocab),
                                v.begin() + static_cast<long>((t + 1) * vocab));
    };
    gaps.push_back(relative_gap(at(got), at(ref)));
  }
  std::sort(gaps.begin(), gaps.end());
  return gaps;
}

}  // namespace

// Every position's logits of a 96-token prompt against the float32 cache's (exact), as a fraction of that
// position's largest logit: the bounds README states, with the measured worst case over the golden models in
// brackets — q8_0 2% at the median position (1.6%) and 4% at the 90th percentile (2.7%); fp8 (3 mantissa
// bits) 14% (12.9%) and 28% (26.5%), the worst on gemma4_moe (attention scale 1 over normalised q and k: the
// sharpest scores; 9.9% and 19.6% on every other model). Not the largest gap: a token whose expert choice
// flips (the MoE models) moves its logits by up to 43%, and the bfloat16 cache's own rounding does that on
// mixtral too (its gaps are printed beside: at the median 0.6% at most). Also printed: how many of 32 greedy
// tokens follow the float32 cache's (not asserted: random tiny models have near ties).
TEST(KvCacheDtype, LogitsStayNearTheExactCacheOnEveryGoldenModel) {
  for (const std::string& name : golden::model_names()) {
    SCOPED_TRACE(name);
    CausalLM exact = load(name, "float32");
    const int64_t vocab = exact.info().vocab_size;
    const std::vector<int32_t> prompt = golden::made_up_ids(96, 3, vocab);
    const std::vector<float> ref = exact.forward(prompt);
    const auto ref_tokens = exact.generate({prompt}, {}, greedy(32)).sequences[0];
    std::printf("[ kv     ] %-16s", name.c_str());
    for (const auto& [kv, median, p90] : {std::tuple<std::string, double, double>{"bfloat16", 1.0, 1.0},
                                          {"q8_0", 0.02, 0.04},
                                          {"fp8", 0.14, 0.28}}) {
      CausalLM m = load(name, kv);
      EXPECT_EQ(dtype_name(m.info().kv_cache_dtype), kv == "fp8" ? std::string("float8_e4m3fn") : kv);
      const std::vector<float> got = m.forward(prompt);
      ASSERT_EQ(got.size(), ref.size());
      const std::vector<double> gaps = position_gaps(got, ref, prompt.size(), vocab);
      const double max_gap = gaps.back(), median_gap = gaps[gaps.size() / 2],
                   p90_gap = gaps[gaps.size() * 9 / 10];
      if (kv != "bfloat16") {
        EXPECT_LE(median_gap, median) << kv;
        EXPECT_LE(p90_gap, p90) << kv;
        EXPECT_GT(median_gap, 0.0) << kv
                                   << ": identical to the float32 cache (is the cache quantised at all?)";
      }
      const auto tokens = m.generate({prompt}, {}, greedy(32)).sequences[0];
      int same = 0;
      while (same < 32 && tokens[prompt.size() + same] == ref_tokens[prompt.size() + same]) ++same;
      std::printf(" | %s median %.4f p90 %.4f max %.4f, %2d/32 greedy", kv.c_str(), median_gap, p90_gap,
                  max_gap, same);
    }
    std::printf("\n");
  }
}

// A request's tokens and logits do not depend on its company: in a batch with another prompt, and from a
// prefix-cache hit, they equal the request run alone, bit for bit (q8_0 with a padded block, fp8).
TEST(KvCacheDtype, BatchAndPrefixHitGiveTheRequestAloneToTheLastBit) {
  for (const std::string kv : {"q8_0", "fp8"}) {
    for (const std::string name : {"llama_gqa", "qwen3_tied"}) {
      SCOPED_TRACE(kv + " " + name);
      CausalLM m = load(name, kv);
      const int64_t vocab = m.info().vocab_size;
      const std::vector<int32_t> system = golden::made_up_ids(40, 1, vocab);
      std::vector<int32_t> a = system, b = system;
      for (int32_t t : golden::made_up_ids(7, 2, vocab)) a.push_back(t);
      for (int32_t t : golden::made_up_ids(11, 3, vocab)) b.push_back(t);

      auto run = [&](SlotBatch& batch, int slot, const std::vector<int32_t>& prompt) {
        std::vector<std::vector<float>> logits;
        batch.prefill(slot, prompt, greedy(8));
        logits.push_back(batch.last_logits(slot));
        while (batch.running(slot)) {
          batch.step();
          logits.push_back(batch.last_logits(slot));
        }
        return logits;
      };
      const SlotBatchOptions opts{
          .keep_logits = true, .decode_rows = SlotBatchOptions::DecodeRows::Running, .prefix_block = 16};
      SlotBatch alone(m, 1, 128, opts);
      const auto want = run(alone, 0, b);
      SlotBatch shared(m, 2, 128, opts);
      shared.prefill(0, a, greedy(20));  // keeps a's two whole chunks; runs beside b
      const int64_t reused = shared.reused_tokens();
      const auto got = run(shared, 1, b);
      EXPECT_EQ(shared.reused_tokens() - reused, 32);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i] == want[i]) << "token " << i;
      EXPECT_EQ(shared.tokens(1), alone.tokens(0));
    }
  }
}

// Bytes per position: 2 (keys, values) x layers x kv heads x a head's row: head_dim x 2 (bfloat16), x 1
// (fp8), or 34 bytes per whole block of 32 values (q8_0; a 16-value head takes one padded block).
TEST(KvCacheDtype, BytesPerTokenFollowTheDtype) {
  for (const std::string name : {"llama_gqa", "qwen3_tied"}) {
    SCOPED_TRACE(name);
    const nlohmann::json c = golden::load_json(golden::model_path(name + "/config.json"));
    const int64_t layers = c["num_hidden_layers"], kv_heads = c["num_key_value_heads"];
    const int64_t hd = c.contains("head_dim")
                           ? c["head_dim"].get<int64_t>()
                           : c["hidden_size"].get<int64_t>() / c["num_attention_heads"].get<int64_t>();
    const auto per = [&](int64_t row) { return static_cast<size_t>(2 * layers * kv_heads * row); };
    EXPECT_EQ(load(name, "auto").info().kv_bytes_per_token, per(4 * hd));  // float32 weights: float32
    EXPECT_EQ(load(name, "bfloat16").info().kv_bytes_per_token, per(2 * hd));
    EXPECT_EQ(load(name, "fp8").info().kv_bytes_per_token, per(hd));
    EXPECT_EQ(load(name, "q8_0").info().kv_bytes_per_token, per((hd + 31) / 32 * 34));
    EXPECT_EQ(load(name, "fp8").info().kv_cache_dtype, DType::F8_E4M3);
  }
}

TEST(KvCacheDtype, AnUnknownDtypeIsAnErrorNamingIt) {
  try {
    load("llama_gqa", "int4");
    ADD_FAILURE() << "int4 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'int4'"), std::string::npos) << e.what();
  }
}

// On xla-cpu a q8_0 cache is int8 bytes laid out as the cpu cache's blocks (34 bytes per 32 values, a head of
// 16 values one padded block), quantised in the program as the cpu backend quantises (same scale, same
// rounding): every position's logits of a 96-token prompt within the cpu q8_0 cache's bounds of the float32
// cache, and next to the cpu device's own q8_0 cache (0.01% at the median position, 0.2% at the worst, where
// an f32 rounding difference can move one quant by a step); 80 greedy tokens (the dynamic cache grows,
// copying blocks) printed beside the cpu's.
TEST(KvCacheDtype, XlaCpuQ8CacheQuantisesAsTheCpuCache) {
  REQUIRE_XLA_CPU();
  for (const char* name : {"llama_gqa", "gemma4", "qwen3_5_moe"}) {
    SCOPED_TRACE(name);
    auto on = [&](const char* device, const char* kv) {
      LoadOptions o;
      o.dtype = DType::F32;
      o.device_map = device;
      o.kv_cache_dtype = kv;
      return AutoModelForCausalLM::from_pretrained(golden::model_path(name), o);
    };
    CausalLM exact = on("xla-cpu", "float32"), m = on("xla-cpu", "q8_0"), cpu = on("cpu", "q8_0");
    EXPECT_EQ(m.info().kv_cache_dtype, DType::Q8_0);
    EXPECT_EQ(m.info().kv_bytes_per_token, cpu.info().kv_bytes_per_token);
    EXPECT_LT(m.info().kv_bytes_per_token, exact.info().kv_bytes_per_token);
    const int64_t vocab = exact.info().vocab_size;
    const std::vector<int32_t> prompt = golden::made_up_ids(96, 3, vocab);
    const std::vector<float> ref = exact.forward(prompt), got = m.forward(prompt),
                             native = cpu.forward(prompt);
    ASSERT_EQ(got.size(), ref.size());
    const std::vector<double> gaps = position_gaps(got, ref, prompt.size(), vocab),
                              to_cpu = position_gaps(got, native, prompt.size(), vocab);
    EXPECT_LE(gaps[gaps.size() / 2], 0.02);
    EXPECT_LE(gaps[gaps.size() * 9 / 10], 0.04);
    EXPECT_GT(gaps.back(), 0.0) << "identical to the float32 cache (is the cache quantised at all?)";
    EXPECT_LE(to_cpu[to_cpu.size() / 2], 1e-4);  // measured 1e-5 at most
    EXPECT_LE(to_cpu.back(), 2e-3);              // measured 6.2e-4 (gemma4)
    const auto tokens = m.generate({prompt}, {}, greedy(80)).sequences[0];
    const auto cpu_tokens = cpu.generate({prompt}, {}, greedy(80)).sequences[0];
    int same = 0;
    while (same < 80 && tokens[prompt.size() + same] == cpu_tokens[prompt.size() + same]) ++same;
    std::printf(
        "[ kv     ] %-12s xla-cpu q8_0: median %.4f p90 %.4f of float32; median %.5f max %.5f of cpu q8_0; "
        "%d/80 greedy as cpu q8_0\n",
        name, gaps[gaps.size() / 2], gaps[gaps.size() * 9 / 10], to_cpu[to_cpu.size() / 2], to_cpu.back(),
        same);
  }
}

// On xla-cpu a bfloat16 or fp8 cache is stored in that type (the program rounds keys and values when it
// writes them and attends in float32): half and a quarter of the float32 cache's bytes per position, and
// every position's logits of a 96-token prompt near the float32 cache's, within the bounds the cpu device
// states (bfloat16: as the cpu's own bfloat16 cache; fp8 14% / 28% at the median / 90th percentile position),
// on a model of each attention kind (GQA, Gemma 4's per-layer geometry and shared keys and values, a hybrid).
TEST(KvCacheDtype, XlaCpuBfloat16AndFp8CachesStayNearTheFloat32Cache) {
  REQUIRE_XLA_CPU();
  for (const char* name : {"llama_gqa", "gemma4", "qwen3_5_moe"}) {
    SCOPED_TRACE(name);
    auto on_xla = [&](const char* kv) {
      LoadOptions o;
      o.dtype = DType::F32;
      o.device_map = "xla-cpu";
      o.kv_cache_dtype = kv;
      return AutoModelForCausalLM::from_pretrained(golden::model_path(name), o);
    };
    CausalLM exact = on_xla("float32");
    const int64_t vocab = exact.info().vocab_size;
    const std::vector<int32_t> prompt = golden::made_up_ids(96, 3, vocab);
    const std::vector<float> ref = exact.forward(prompt);
    for (const auto& [kv, want_dtype, median, p90, bytes] :
         {std::tuple<const char*, DType, double, double, size_t>{"bfloat16", DType::BF16, 0.02, 0.04, 2},
          {"fp8", DType::F8_E4M3, 0.14, 0.28, 1}}) {
      CausalLM m = on_xla(kv);
      EXPECT_EQ(m.info().kv_cache_dtype, want_dtype);
      EXPECT_EQ(m.info().kv_bytes_per_token * 4, exact.info().kv_bytes_per_token * bytes) << kv;
      const std::vector<float> got = m.forward(prompt);
      ASSERT_EQ(got.size(), ref.size());
      const std::vector<double> gaps = position_gaps(got, ref, prompt.size(), vocab);
      EXPECT_LE(gaps[gaps.size() / 2], median) << kv;
      EXPECT_LE(gaps[gaps.size() * 9 / 10], p90) << kv;
      EXPECT_GT(gaps.back(), 0.0) << kv << ": identical to the float32 cache (is the cache rounded at all?)";
    }
  }
}
