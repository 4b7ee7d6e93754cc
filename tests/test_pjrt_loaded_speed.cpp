// Issue 12, item 10: on xla-cpu a step compiled in this process and the same step loaded from its serialized
// bytes (the on-disk compile cache's path) run at the same speed. The gap once reported (~10 against ~45
// tokens/s for SmolLM2 bf16) was generate() timing the first decode step together with the compile (or the
// load) of the decode program: the programs themselves decode equally fast. Measured here on a tiny bf16
// model: decode steps/s of the compiled executable and of one loaded into a fresh backend, alternated over
// rounds, medians within a factor of 2 either way (a loose bound: the machine is shared; no absolute
// threshold). Skipped without the plugin.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <vector>

#include "backends/backend.h"
#include "backends/pjrt/pjrt_backend.h"
#include "golden_util.h"
#include "io/weight_source.h"
#include "models/architecture.h"
#include "pjrt_test_util.h"
#include "runtime/weight_loader.h"

using namespace tessera;
namespace golden = tessera::golden;
using backends::StepInputs;

namespace {

// Wide: CI shares its cores with other jobs (2x flaked at load average 4); a loaded program built without
// optimisation runs several times slower, which this still catches.
constexpr double kFactor = 4.0;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

TEST(PjrtLoadedSpeed, CompiledAndLoadedStepsDecodeAtTheSameSpeed) {
  REQUIRE_XLA_CPU();
  const std::string dir = golden::model_path("llama_gqa");
  auto cj = golden::load_json(dir + "/config.json");
  const auto& arch = models::find_architecture(cj["architectures"][0].get<std::string>(), "llama_gqa");
  const auto config = arch.parse_config(cj, "llama_gqa");
  auto src = io::open_checkpoint(dir);
  size_t weight_bytes = 0;  // bf16 matrices, f32 vectors (as CausalLM loads them)
  const backends::WeightMap weights = runtime::load_weights(*src, arch, config, DType::BF16, {}, weight_bytes);

  const int len = 128, steps = 100, rounds = 5;
  const graph::ShapeKey key{.phase = graph::Phase::Decode, .batch = 1, .seq = 1, .cache_len = len,
                            .dtype = DType::BF16, .sampling = graph::Sampling::Greedy};
  graph::Graph g = arch.build_graph(config, key);
  graph::append_sampling(g, config.vocab_size);

  auto compiling = backends::make_pjrt_backend("xla-cpu");
  compiling->bind_weights(weights);
  auto compiled = compiling->compile(g);
  const std::string bytes = compiling->serialize(*compiled);
  auto loading = backends::make_pjrt_backend("xla-cpu");
  loading->bind_weights(weights);
  auto loaded = loading->load_serialized(g, bytes);
  ASSERT_EQ(loading->compile_timing().compiles, 0);

  // One round: `steps` greedy decode steps from slot 0 of a fresh cache; returns steps/s and the tokens.
  auto round = [&](backends::PjrtBackend& be, const backends::Executable& exe, std::vector<int32_t>& tokens) {
    auto cache = be.create_cache(config.num_layers, 1, config.num_kv_heads, len, config.head_dim);
    StepInputs in{{1}, {0}, {0}, {0}, {}, std::vector<int32_t>(graph::kSampleParams, 0)};
    in.sample_params[graph::kTemperature] = std::bit_cast<int32_t>(1.0f);
    in.sample_params[graph::kTopP] = std::bit_cast<int32_t>(1.0f);
    in.sample_params[graph::kRepetitionPenalty] = std::bit_cast<int32_t>(1.0f);
    std::vector<int32_t> tok;
    tokens.clear();
    exe.run_tokens(in, *cache, tok);  // the first run of a round is not timed
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 1; s <= steps; ++s) {
      in.ids = tok;
      in.positions = in.slots = {s};
      exe.run_tokens(in, *cache, tok);
      tokens.push_back(tok.at(0));
    }
    return steps / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<double> a, b;
  std::vector<int32_t> ta, tb;
  for (int r = 0; r < rounds; ++r) {
    a.push_back(round(*compiling, *compiled, ta));
    b.push_back(round(*loading, *loaded, tb));
    EXPECT_EQ(ta, tb) << "round " << r << ": the same program gives the same tokens";
  }
  const double compiled_rate = median(a), loaded_rate = median(b);
  std::printf("[ pjrt ] llama_gqa bf16 decode: compiled in this process %.0f steps/s, loaded from bytes %.0f "
              "steps/s (medians of %d rounds of %d steps)\n",
              compiled_rate, loaded_rate, rounds, steps);
  EXPECT_LE(loaded_rate, kFactor * compiled_rate);
  EXPECT_LE(compiled_rate, kFactor * loaded_rate);
}

}  // namespace
