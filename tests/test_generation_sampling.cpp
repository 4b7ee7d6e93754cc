// Sampling inside the compiled step (graph::Op::Sample) against the host sampler, across backends:
// the native cpu backend samples on the host (src/sampling/sampler.cpp); xla-cpu samples inside the
// StableHLO program and returns only token ids. Same seed -> same tokens on both, for greedy and for
// sampling with temperature, top-k, top-p, min-p and repetition penalty; Transformers' goldens for greedy and
// repetition penalty hold on xla-cpu; a seeded sampled generation repeats exactly; a decode step moves only
// its inputs up and the token ids down.
#include <gtest/gtest.h>

#include <cstring>

#include "backends/backend.h"
#include "backends/pjrt/pjrt_info.h"
#include "golden_util.h"
#include "io/weight_source.h"
#include "models/architecture.h"
#include "pjrt_test_util.h"
#include "sampling/sampler.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
namespace golden = tessera::golden;

namespace {

std::vector<int32_t> to32(const nlohmann::json& j) {
  auto v = golden::ids(j);
  return {v.begin(), v.end()};
}

CausalLM load(const std::string& name, const std::string& device) {
  LoadOptions opt;
  opt.dtype = DType::F32;
  opt.device_map = device;
  return AutoModelForCausalLM::from_pretrained(golden::model_path(name), opt);
}

GenerationConfig sampled(int n, uint64_t seed) {
  GenerationConfig g;
  g.max_new_tokens = n;
  g.do_sample = true;
  g.seed = seed;
  return g;
}

TEST(CounterRng, DependsOnlyOnSeedAndStepAndHas24Bits) {
  const double a = sampling::counter_uniform(42, 3);
  EXPECT_EQ(a, sampling::counter_uniform(42, 3));
  EXPECT_NE(a, sampling::counter_uniform(42, 4));
  EXPECT_NE(a, sampling::counter_uniform(43, 3));
  EXPECT_NE(a, sampling::counter_uniform(42 + (uint64_t{1} << 32), 3)) << "the seed's high word counts";
  // generate()'s rows: row 0 keeps the seed, the others get seeds of their own.
  EXPECT_EQ(sampling::row_seed(42, 0), 42u);
  EXPECT_NE(sampling::row_seed(42, 1), 42u);
  EXPECT_NE(sampling::row_seed(42, 1), sampling::row_seed(42, 2));
  EXPECT_NE(sampling::row_seed(42, 1), sampling::row_seed(43, 1));
  double sum = 0;
  for (uint32_t i = 0; i < 4096; ++i) {
    const double u = sampling::counter_uniform(7, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    EXPECT_EQ(u, static_cast<double>(static_cast<float>(u))) << "u must be exact in float32";
    sum += u;
  }
  EXPECT_NEAR(sum / 4096, 0.5, 0.02);
}

// The cpu backend's Op::Sample (used when a graph samples in the step) equals the host path on the same
// logits.
TEST(CpuSampleOp, EqualsHostSamplerOnTheSameLogits) {
  auto cj = golden::load_json(golden::model_path("llama_gqa/config.json"));
  const auto& arch = models::find_architecture(cj["architectures"][0].get<std::string>(), "llama_gqa");
  const auto config = arch.parse_config(cj, "llama_gqa");
  auto src = io::open_checkpoint(golden::model_path("llama_gqa"));
  backends::WeightMap weights;
  for (const auto& w : arch.weights(config)) weights.emplace(w.name, src->load(w.name, DType::F32));
  auto be = backends::make_cpu_backend();
  be->bind_weights(weights);
  const int batch = 2, seq = 5, len = 8;
  backends::StepInputs in;
  in.ids = {3, 4, 5, 6, 7, 9, 9, 10, 11, 12};  // [2 * 5]
  in.positions = {0, 1, 2, 3, 4, 1, 0, 1, 2, 3};
  in.slots = {0, 1, 2, 3, 4};
  in.kv_begin = {0, 1};
  for (auto [mode, seed] : {std::pair{graph::Sampling::Greedy, 0}, std::pair{graph::Sampling::Sample, 5},
                            std::pair{graph::Sampling::Sample, 6}}) {
    GenerationConfig cfg = sampled(1, static_cast<uint64_t>(seed));
    cfg.temperature = 0.7f;
    cfg.top_k = 40;
    cfg.top_p = 0.8f;
    cfg.min_p = 0.02f;
    cfg.repetition_penalty = 1.5f;
    graph::ShapeKey key{
        .phase = graph::Phase::Prefill, .batch = batch, .seq = seq, .cache_len = len, .dtype = DType::F32};
    std::vector<float> logits;
    be->compile(arch.build_graph(config, key))
        ->run(in, *be->create_cache(config.num_layers, batch, config.num_kv_heads, len, config.head_dim),
              logits);
    key.sampling = mode;
    graph::Graph g = arch.build_graph(config, key);
    graph::append_sampling(g, config.vocab_size);
    in.seen_from = {0, 1};  // row 1's first id is our own padding: not seen
    in.sample_params.assign(static_cast<size_t>(batch) * graph::kSampleParams, 0);
    for (int b = 0; b < batch; ++b) {
      int32_t* p = in.sample_params.data() + b * graph::kSampleParams;
      std::memcpy(&p[graph::kTemperature], &cfg.temperature, 4);
      std::memcpy(&p[graph::kTopP], &cfg.top_p, 4);
      std::memcpy(&p[graph::kMinP], &cfg.min_p, 4);
      std::memcpy(&p[graph::kRepetitionPenalty], &cfg.repetition_penalty, 4);
      p[graph::kTopK] = cfg.top_k;
      p[graph::kSeedLo] = seed + b;  // the draw is keyed by each row's own seed (and step), not by the row
      p[graph::kStep] = 0;
      p[graph::kDoSample] = 1;  // a Sample program samples the rows that ask for it (a Greedy one ignores it)
    }
    std::vector<int32_t> tokens;
    be->compile(g)->run_tokens(
        in, *be->create_cache(config.num_layers, batch, config.num_kv_heads, len, config.head_dim), tokens);
    ASSERT_EQ(tokens.size(), 2u);
    for (int b = 0; b < batch; ++b) {
      float* row = logits.data() + b * config.vocab_size;
      std::vector<int32_t> seen(in.ids.begin() + b * seq + in.seen_from[static_cast<size_t>(b)],
                                in.ids.begin() + (b + 1) * seq);
      sampling::apply_repetition_penalty(row, config.vocab_size, seen, cfg.repetition_penalty);
      int32_t expect;
      if (mode == graph::Sampling::Greedy) {
        expect = sampling::argmax(row, config.vocab_size);
      } else {
        sampling::apply_warpers(row, config.vocab_size, cfg);
        expect = sampling::sample_from_logits(row, config.vocab_size,
                                              sampling::counter_uniform(static_cast<uint64_t>(seed + b), 0));
      }
      EXPECT_EQ(tokens[static_cast<size_t>(b)], expect) << graph::sampling_name(mode) << " row " << b;
    }
  }
}

TEST(DeviceSampling, GreedyAndRepetitionPenaltyMatchTransformersOnXlaCpu) {
  REQUIRE_XLA_CPU();
  for (const char* name : {"qwen3_tied", "llama_gqa"}) {
    auto j = golden::load_model_golden(name);
    CausalLM m = load(name, "xla-cpu");
    for (const auto& c : j["greedy"]) {
      GenerationConfig g;
      g.max_new_tokens = c["max_new_tokens"].get<int>();
      auto out = m.generate({to32(c["input_ids"])}, {}, g);
      EXPECT_TRUE(out.device_sampling);
      EXPECT_EQ(out.sequences[0], to32(c["output_ids"])) << name;
    }
    for (const auto& c : j["repetition_penalty"]) {
      GenerationConfig g;
      g.max_new_tokens = c["max_new_tokens"].get<int>();
      g.repetition_penalty = c["repetition_penalty"].get<float>();
      auto out = m.generate({to32(c["input_ids"])}, {}, g);
      EXPECT_EQ(out.sequences[0], to32(c["output_ids"])) << name << " penalty " << g.repetition_penalty;
    }
    // Left-padded batch with EOS: finished rows get pad ids, the penalty sees the caller's padding.
    auto e = j["eos"];
    GenerationConfig g;
    g.max_new_tokens = e["max_new_tokens"].get<int>();
    g.eos_token_id = {e["eos_token_id"].get<int32_t>()};
    g.pad_token_id = e["pad_token_id"].get<int32_t>();
    std::vector<std::vector<int32_t>> ids, mask;
    for (const auto& r : e["batched"]["input_ids"]) ids.push_back(to32(r));
    for (const auto& r : e["batched"]["attention_mask"]) mask.push_back(to32(r));
    auto out = m.generate(ids, mask, g);
    std::vector<std::vector<int32_t>> expect;
    for (const auto& r : e["batched"]["output_ids"]) expect.push_back(to32(r));
    EXPECT_EQ(out.sequences, expect) << name;
  }
}

TEST(DeviceSampling, SameSeedGivesSameTokensOnCpuAndXlaCpu) {
  REQUIRE_XLA_CPU();
  CausalLM cpu = load("llama_gqa", "cpu");
  CausalLM xla = load("llama_gqa", "xla-cpu");
  struct Case {
    float temperature, top_p, min_p, penalty;
    int top_k;
  };
  const Case cases[] = {{1.0f, 1.0f, 0.0f, 1.0f, 0},   {0.7f, 1.0f, 0.0f, 1.0f, 20},
                        {1.3f, 0.85f, 0.0f, 1.0f, 0},  {1.0f, 1.0f, 0.1f, 1.0f, 0},
                        {0.9f, 0.9f, 0.05f, 1.4f, 50}, {1.5f, 0.95f, 0.0f, 0.8f, 0}};
  const std::vector<std::vector<int32_t>> prompt = {{3, 4, 5, 6, 7}, {0, 0, 8, 9, 10}};
  const std::vector<std::vector<int32_t>> mask = {{1, 1, 1, 1, 1}, {0, 0, 1, 1, 1}};
  int differing_rows = 0;
  for (const Case& c : cases)
    for (uint64_t seed : {1ull, 2ull, 0x123456789abcull}) {
      GenerationConfig g = sampled(16, seed);
      g.temperature = c.temperature;
      g.top_k = c.top_k;
      g.top_p = c.top_p;
      g.min_p = c.min_p;
      g.repetition_penalty = c.penalty;
      auto a = cpu.generate(prompt, mask, g);
      auto b = xla.generate(prompt, mask, g);
      EXPECT_FALSE(a.device_sampling);
      EXPECT_TRUE(b.device_sampling);
      EXPECT_EQ(a.sequences, b.sequences)
          << "seed " << seed << " T " << c.temperature << " top_k " << c.top_k << " top_p " << c.top_p
          << " min_p " << c.min_p << " penalty " << c.penalty;
      differing_rows += a.sequences[0] != a.sequences[1];
    }
  EXPECT_GT(differing_rows, 0);
}

TEST(DeviceSampling, SeededSampledGenerationRepeatsAndMovesOnlyTokenIds) {
  REQUIRE_XLA_CPU();
  CausalLM m = load("qwen3_tied", "xla-cpu");
  GenerationConfig g = sampled(24, 1234);
  g.temperature = 1.2f;
  g.top_p = 0.9f;
  g.repetition_penalty = 1.2f;
  auto a = m.generate({{5, 6, 7}}, {}, g);
  auto b = m.generate({{5, 6, 7}}, {}, g);
  EXPECT_EQ(a.sequences, b.sequences);
  g.seed = 99;
  EXPECT_NE(m.generate({{5, 6, 7}}, {}, g).sequences, a.sequences);
  // Per decode step, batch 1: ids, positions, slots, kv_begin (4 x int32) + the sampling parameters up; one
  // int32 token id down. No logits and no KV cache cross.
  ASSERT_EQ(a.decode_steps, 23);
  const uint64_t up = (4 + graph::kSampleParams) * sizeof(int32_t), down = sizeof(int32_t);
  EXPECT_EQ(a.decode_h2d_bytes, a.decode_steps * up);
  EXPECT_EQ(a.decode_d2h_bytes, a.decode_steps * down);
  std::printf("[ sampling ] xla-cpu decode step: %llu bytes up, %llu bytes down\n",
              static_cast<unsigned long long>(up), static_cast<unsigned long long>(down));
}

}  // namespace
