// Tensor parallelism on the PJRT backend (XLA CPU plugin): one process driving tp_size devices with one
// program (stablehlo.all_reduce / all_gather, num_replicas = tp_size), and one process per rank under mpirun
// (each its own device 0, the graph run in segments around host collectives). TP=2 and TP=4 must give the
// logits of TP=1 on xla-cpu within 1e-4 (fp32) and the same greedy tokens. Each test loads a model once per
// layout and reuses it for every check (compiles are the cost). Skipped without the plugin.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "backends/pjrt/pjrt_info.h"
#include "golden_util.h"
#include "pjrt_test_util.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
namespace golden = tessera::golden;

namespace {

const std::vector<int32_t> kPrompt = {1, 5, 9, 33, 70, 2, 41};
constexpr int kNewTokens = 16;

const std::vector<TpPlanRule> kReplicateAttention = {
    {"layers.*.self_attn.q_proj", "replicated_with_grad_allreduce", "test"},
    {"layers.*.self_attn.k_proj", "replicated_with_grad_allreduce", "test"},
    {"layers.*.self_attn.v_proj", "replicated_with_grad_allreduce", "test"},
    {"layers.*.self_attn.o_proj", "replicated_with_grad_allreduce", "test"},
};

CausalLM load(const std::string& model, int tp, bool tp_auto = false, std::vector<TpPlanRule> rules = {}) {
  LoadOptions opt;
  opt.dtype = DType::F32;
  opt.device_map = "xla-cpu";
  opt.distributed.tp_size = tp;
  opt.distributed.tp_plan_auto = tp_auto;
  opt.distributed.tp_plan = std::move(rules);
  return AutoModelForCausalLM::from_pretrained(golden::model_path(model), opt);
}

struct Result {
  std::vector<float> logits;    // forward over kPrompt: [len, vocab]
  std::vector<int32_t> tokens;  // greedy generate: prompt + kNewTokens
  uint64_t h2d_per_step = 0, d2h_per_step = 0;
};

Result run(CausalLM& m) {
  Result r;
  r.logits = m.forward(kPrompt);
  GenerationConfig g;
  g.max_new_tokens = kNewTokens;
  g.eos_token_id.clear();  // always kNewTokens tokens
  auto out = m.generate({kPrompt}, {}, g);
  EXPECT_TRUE(out.device_sampling);
  r.tokens = out.sequences[0];
  EXPECT_EQ(out.decode_steps, kNewTokens - 1);
  if (out.decode_steps > 0) {
    r.h2d_per_step = out.decode_h2d_bytes / static_cast<uint64_t>(out.decode_steps);
    r.d2h_per_step = out.decode_d2h_bytes / static_cast<uint64_t>(out.decode_steps);
  }
  return r;
}

// Loads `model` at TP=1 and at each layout; every layout must match TP=1.
struct Layout {
  int tp;
  bool tp_auto = false;
  std::vector<TpPlanRule> rules;
  std::string label;
};

void expect_tp_matches(const std::string& model, const std::vector<Layout>& layouts) {
  Result ref;
  {
    CausalLM m = load(model, 1);
    ref = run(m);
  }
  ASSERT_EQ(ref.tokens.size(), kPrompt.size() + kNewTokens);
  for (const Layout& l : layouts) {
    SCOPED_TRACE(model + " " + l.label);
    CausalLM m = load(model, l.tp, l.tp_auto, l.rules);
    EXPECT_EQ(m.info().tp_size, l.tp);
    EXPECT_EQ(m.info().tp_rank, 0);
    Result r = run(m);
    const auto d = golden::max_abs_diff(r.logits, ref.logits);
    EXPECT_LE(d.max_abs, 1e-4) << "at " << d.index;
    EXPECT_EQ(r.tokens, ref.tokens);
    // Per decode step: the step inputs once per device, one token id back from device 0.
    EXPECT_EQ(r.h2d_per_step, static_cast<uint64_t>(l.tp) * ref.h2d_per_step);
    EXPECT_EQ(r.d2h_per_step, ref.d2h_per_step);
    EXPECT_EQ(r.d2h_per_step, sizeof(int32_t));
  }
}

TEST(PjrtTensorParallel, Qwen3TiedMatchesSingleDevice) {
  REQUIRE_XLA_CPU();
  // Tied embeddings; 2 KV heads, so TP=4 replicates attention (--tp-plan auto).
  expect_tp_matches("qwen3_tied", {{2, false, {}, "tp=2"}, {4, true, {}, "tp=4 auto"}});
}

TEST(PjrtTensorParallel, Qwen3Tp4MatchesSingleDevice) {
  REQUIRE_XLA_CPU();
  expect_tp_matches("qwen3_tp4", {{2, false, {}, "tp=2"}, {4, false, {}, "tp=4"}});
}

TEST(PjrtTensorParallel, LlamaTp4MatchesSingleDevice) {
  REQUIRE_XLA_CPU();
  expect_tp_matches("llama_tp4", {{2, false, {}, "tp=2"}, {4, false, {}, "tp=4"}});
}

TEST(PjrtTensorParallel, Glm4MatchesSingleDevice) {
  REQUIRE_XLA_CPU();
  // 2 KV heads: TP=4 with the four replicating rules the error message names, and with auto.
  expect_tp_matches(
      "glm4",
      {{2, false, {}, "tp=2"}, {4, false, kReplicateAttention, "tp=4 rules"}, {4, true, {}, "tp=4 auto"}});
}

TEST(PjrtTensorParallel, DisableCompileIsAClearError) {
  REQUIRE_XLA_CPU();
  CausalLM m = load("llama_tp4", 2);
  GenerationConfig g;
  g.max_new_tokens = 2;
  g.disable_compile = true;
  try {
    m.generate({kPrompt}, {}, g);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("disable_compile"), std::string::npos) << e.what();
  }
}

// Runs a shell command line; returns its exit status (128 + N for signal N), stdout and stderr.
struct Shell {
  int code = -1;
  std::string out, err;
};
Shell shell(const std::string& command) {
  static int n = 0;
  const std::string base =
      ::testing::TempDir() + "tessera_pjrt_tp_" + std::to_string(::getpid()) + "_" + std::to_string(n++);
  const int status = std::system((command + " </dev/null >" + base + ".out 2>" + base + ".err").c_str());
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  Shell r{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp(base + ".out"),
          slurp(base + ".err")};
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}
Shell cli(const std::string& args) { return shell(std::string(TESSERA_CLI_PATH) + " " + args); }

std::string ids_arg(const std::vector<int32_t>& ids = kPrompt) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

// The last line of stdout: the generated ids.
std::string last_line(const std::string& out) {
  std::string line, last;
  std::istringstream is(out);
  while (std::getline(is, line))
    if (!line.empty()) last = line;
  return last;
}

TEST(PjrtTensorParallelCli, GenerateTp2EqualsSingleDevice) {
  REQUIRE_XLA_CPU();
  const std::string base = "generate " + golden::model_path("glm4") +
                           " --device xla-cpu --max-new-tokens 12 " + "--input-ids " + ids_arg();
  auto one = cli(base);
  ASSERT_EQ(one.code, 0) << one.err;
  auto two = cli(base + " --tp-size 2");
  ASSERT_EQ(two.code, 0) << two.err;
  EXPECT_EQ(last_line(two.out), last_line(one.out));
  EXPECT_FALSE(last_line(one.out).empty());
}

// The guide's mode: two processes under mpirun, each driving its own xla-cpu device 0; collectives through
// MPI on the host between program segments. `model` generates the same ids after `prompt` as on one device.
void expect_mpirun_two_ranks_equal_one_device(const std::string& model,
                                              const std::vector<int32_t>& prompt = kPrompt) {
  const std::string args =
      "generate " + model + " --device xla-cpu --max-new-tokens 12 --json -q --input-ids " + ids_arg(prompt);
  // The "ids" of every JSON line printed (one per rank).
  auto ids_of = [](const std::string& out) {
    std::vector<std::vector<int32_t>> all;
    std::istringstream is(out);
    std::string line;
    while (std::getline(is, line))
      if (line.rfind("{", 0) == 0)
        all.push_back(nlohmann::json::parse(line)["ids"].get<std::vector<int32_t>>());
    return all;
  };
  auto one = cli(args);
  ASSERT_EQ(one.code, 0) << one.err;
  const auto want = ids_of(one.out);
  ASSERT_EQ(want.size(), 1u) << one.out;
  ASSERT_EQ(want[0].size(), prompt.size() + 12);
  // Each rank writes its own file: through mpirun's shared stdout two long JSON lines can interleave.
  const std::string base = ::testing::TempDir() + "tessera_mpirun_" + std::to_string(::getpid()) + "_out.";
  auto many = shell(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun --oversubscribe -np 2 sh -c '" +
      std::string(TESSERA_CLI_PATH) + " " + args + " --tp-size 2 > " + base + "$OMPI_COMM_WORLD_RANK'");
  ASSERT_EQ(many.code, 0) << many.err;
  std::string outs;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream f(base + std::to_string(rank));
    outs += std::string(std::istreambuf_iterator<char>(f), {});
    std::remove((base + std::to_string(rank)).c_str());
  }
  // Every rank prints the same ids (the launcher, not this test, keeps only rank 0's output).
  const auto got = ids_of(outs);
  EXPECT_EQ(got.size(), 2u) << outs;
  for (const auto& ids : got) EXPECT_EQ(ids, want[0]);
}

TEST(PjrtTensorParallelCli, MpirunTwoRanksEqualsSingleDevice) {
  REQUIRE_XLA_CPU();
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not on PATH";
  expect_mpirun_two_ranks_equal_one_device(golden::model_path("qwen3_tied"));
}

// A GGUF of K-quant and Q5 blocks (tools/make_kquant_fixture.py): each rank uploads its share of the blocks'
// integers, scales and offsets (column-parallel layers split rows; a row-parallel layer whose half of the
// columns is not whole blocks, 128 of a 256-value Q4_K row, is dequantised on the host), and the segments
// around the host collectives find each part through its placeholder.
TEST(PjrtTensorParallelCli, MpirunTwoRanksKeepBlocksAndEqualSingleDevice) {
  REQUIRE_XLA_CPU();
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not on PATH";
  expect_mpirun_two_ranks_equal_one_device(
      std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/io/tiny_kquants.gguf",
      {1, 5, 9, 33, 60, 2, 41});  // its vocabulary is 64
}

}  // namespace
