// The benchmark harness (`tessera bench`, src/runtime/bench_*) in quick mode on a tiny fixture: every
// reported field exists and is positive. No timing thresholds: this only keeps the harness working.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "backends/cpu/kernels.h"
#include "bench/bench_machine.h"
#include "bench/bench_model.h"
#include "golden_util.h"
#include "tessera/error.h"

namespace {

void expect_positive_fields(const nlohmann::json& j) {
  for (const char* k :
       {"load_s", "ttft_s", "prefill_s", "prefill_tokens_per_s", "decode_s", "decode_tokens_per_s",
        "peak_rss_mb", "weight_bytes", "decode_weight_bytes_per_token", "decode_kv_bytes_per_token",
        "prefill_flops", "decode_bandwidth_fraction", "prefill_gflops", "prefill_f32_peak_fraction"}) {
    ASSERT_TRUE(j.contains(k)) << k;
    EXPECT_GT(j[k].get<double>(), 0) << k;
  }
  for (const char* k : {"read_bandwidth_gbs", "peak_f32_gflops"})
    EXPECT_GT(j["machine"][k].get<double>(), 0) << k;
  const auto& bf16 = j["machine"]["peak_bf16_gflops"];
  EXPECT_TRUE(bf16.is_null() || bf16.get<double>() > 0);
  EXPECT_EQ(j["runs"].size(), j["repeats"].get<size_t>());
}

}  // namespace

TEST(Bench, PromptIsDeterministicAndInRange) {
  auto a = tessera::bench::bench_prompt(512, 1024), b = tessera::bench::bench_prompt(512, 1024);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 512u);
  for (int32_t id : a) {
    EXPECT_GE(id, 10);
    EXPECT_LT(id, 1024);
  }
  // The first ids are pinned: bench/bench_common.py reimplements the same sequence for the other engines.
  EXPECT_EQ(tessera::bench::bench_prompt(3, 151936),
            (std::vector<int32_t>{63952, 63059, 67340}));  // from bench_common.py
  EXPECT_THROW(tessera::bench::bench_prompt(4, 10), tessera::Error);
}

TEST(Bench, LibraryQuickRunReportsPositiveFields) {
  tessera::bench::BenchOptions o;
  o.model = tessera::golden::model_path("qwen3_tied");
  o.prompt_tokens = 12;
  o.new_tokens = 5;
  o.repeats = 2;
  o.bandwidth_bytes = size_t{16} << 20;
  o.peak_seconds = 0.03;
  const auto r = tessera::bench::run_bench(o);
  const auto j = tessera::bench::to_json(r);
  expect_positive_fields(j);
  EXPECT_EQ(j["prompt_tokens"], 12);
  EXPECT_EQ(j["new_tokens"], 5);
  EXPECT_EQ(j["architecture"], "Qwen3ForCausalLM");
  // qwen3_tied: 2 layers × (q 128×64 + k 64×64 + v 64×64 + o 64×128 + 3 MLP 128×64), tied 1024×64 embedding.
  EXPECT_EQ(j["params"]["layer_matrices"], 2 * (128 * 64 + 64 * 64 * 2 + 64 * 128 + 3 * 128 * 64));
  EXPECT_EQ(j["params"]["lm_head"], 1024 * 64);
  EXPECT_TRUE(j["params"]["tied"].get<bool>());
  EXPECT_FALSE(tessera::bench::to_text(r).empty());
}

TEST(Bench, BadOptionsAreErrors) {
  tessera::bench::BenchOptions o;
  o.model = tessera::golden::model_path("qwen3_tied");
  o.probe_machine = false;
  o.new_tokens = 1;
  EXPECT_THROW(tessera::bench::run_bench(o), tessera::Error);
  o.new_tokens = 4;
  o.prompt_tokens = 0;
  EXPECT_THROW(tessera::bench::run_bench(o), tessera::Error);
  o.prompt_tokens = 4;
  o.model = "/nonexistent/model/dir";
  EXPECT_THROW(tessera::bench::run_bench(o), tessera::Error);
}

// `tessera bench FIXTURE --quick --json ARGS`: the report, or a test failure with the output.
nlohmann::json cli_bench(const std::string& args) {
  const std::string out = ::testing::TempDir() + "tessera_bench_" + std::to_string(::getpid()) + ".json";
  const std::string cmd = std::string(TESSERA_CLI_PATH) + " bench " +
                          tessera::golden::model_path("qwen3_tied") + " --quick --json " + args + " >" + out +
                          " 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream f(out);
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  std::remove(out.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// The CLI end to end, as bench/compare.sh --quick runs it.
TEST(Bench, CliQuickJson) {
  const auto j = cli_bench("--repeats 2");
  ASSERT_FALSE(j.is_discarded());
  expect_positive_fields(j);
  EXPECT_EQ(j["repeats"], 2);
  EXPECT_EQ(j["prompt_tokens"], 16);  // --quick defaults
  EXPECT_EQ(j["new_tokens"], 8);
}

// What the matmuls multiply is reported: bf16 inputs only for a bf16 model on avx512bf16 without
// --exact-bf16-matmul; the KV cache bytes follow (bf16 cache by default, f32 with the flag).
TEST(Bench, CliReportsMatmulInputsAndKvCacheDtype) {
  const auto fast = cli_bench("--dtype bfloat16");
  const auto exact = cli_bench("--dtype bfloat16 --exact-bf16-matmul");
  const auto f32 = cli_bench("--dtype float32");
  ASSERT_FALSE(fast.is_discarded() || exact.is_discarded() || f32.is_discarded());
  EXPECT_EQ(fast["matmul_inputs"], fast["isa"] == "avx512bf16" ? "bfloat16" : "float32");
  EXPECT_EQ(exact["matmul_inputs"], "float32");
  EXPECT_EQ(f32["matmul_inputs"], "float32");
  // "amx": whether the bf16 prefill gemm runs on AMX tiles on this machine (the isa and the CPU decide).
  EXPECT_EQ(fast["amx"].get<bool>(), fast["isa"] == "avx512bf16" && tessera::cpu::amx_supported());
  EXPECT_DOUBLE_EQ(exact["decode_kv_bytes_per_token"].get<double>(),
                   2 * fast["decode_kv_bytes_per_token"].get<double>());
  EXPECT_DOUBLE_EQ(f32["decode_kv_bytes_per_token"].get<double>(),
                   exact["decode_kv_bytes_per_token"].get<double>());
}

TEST(Bench, CliBadModelIsOneLineError) {
  const std::string out = ::testing::TempDir() + "tessera_bench_err_" + std::to_string(::getpid());
  const int status = std::system(
      (std::string(TESSERA_CLI_PATH) + " bench /nonexistent --quick >/dev/null 2>" + out).c_str());
  std::ifstream f(out);
  const std::string err((std::istreambuf_iterator<char>(f)), {});
  std::remove(out.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << err;
  EXPECT_EQ(err.rfind("tessera: error: ", 0), 0u) << err;
  EXPECT_NE(err.find("/nonexistent"), std::string::npos) << err;
}
