// One xla-cpu backend used from several threads at once (backend.h: executables are immutable, per-sequence
// state lives in the caller's DeviceCache): the same compiled executables run by 4 threads, each with its
// own caches, give exactly what sequential runs give (whole-step programs, in-step sampling, op by op);
// the transfer counters add up; compiles from 4 threads at once each count once. Skipped without the plugin.
#include <gtest/gtest.h>

#include <latch>
#include <memory>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "backends/pjrt/pjrt_backend.h"
#include "golden_util.h"
#include "pjrt_test_util.h"
#include "step_test_util.h"

using namespace tessera;
using namespace tessera::step_test;

namespace {

constexpr int kThreads = 4;

using Model = StepModel<backends::PjrtBackend>;

constexpr int kPrompt = 6, kSteps = 10, kLen = 24;

// A request: its prompt and the tokens fed at each decode step (teacher-forced), or with in-step sampling the
// seed its draws use.
struct Request {
  std::vector<int32_t> tokens;  // kPrompt + kSteps
  uint64_t seed = 0;
};

std::vector<Request> requests(int n, int64_t vocab) {
  std::mt19937 rng(41);
  std::uniform_int_distribution<int32_t> id(1, static_cast<int32_t>(vocab) - 1);
  std::vector<Request> out(static_cast<size_t>(n));
  for (auto& r : out) {
    for (int i = 0; i < kPrompt + kSteps; ++i) r.tokens.push_back(id(rng));
    r.seed = rng();
  }
  return out;
}

// The logits of every step of `r` (prefill, then each decode step), concatenated.
std::vector<float> run_logits(Model& m, const Executable& prefill, const Executable& decode, const Request& r) {
  auto cache = m.cache(1, kLen);
  StepInputs in = prefill_inputs(std::span(r.tokens).first(kPrompt));
  std::vector<float> all, logits;
  prefill.run(in, *cache, logits);
  all = logits;
  for (int j = 0; j < kSteps; ++j) {
    in.ids = {r.tokens[static_cast<size_t>(kPrompt + j)]};
    in.positions = in.slots = {kPrompt + j};
    decode.run(in, *cache, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

// The tokens `r`'s prompt decodes to with in-step sampling (temperature 0.8, top-k 50, repetition
// penalty 1.2, its own seed).
std::vector<int32_t> run_tokens(Model& m, const Executable& prefill, const Executable& decode, const Request& r) {
  auto cache = m.cache(1, kLen);
  const SamplingParams p{.temperature = 0.8f,
                         .top_k = 50,
                         .top_p = 1.0f,
                         .min_p = 0.0f,
                         .repetition_penalty = 1.2f,
                         .seed = r.seed,
                         .do_sample = true};
  StepInputs in = sampled_prefill_inputs(std::span(r.tokens).first(kPrompt), p);
  std::vector<int32_t> out, tok;
  prefill.run_tokens(in, *cache, tok);
  out.push_back(tok.at(0));
  in.seen_from.clear();
  for (int j = 0; j < kSteps; ++j) {
    in.ids = {out.back()};
    in.positions = in.slots = {kPrompt + j};
    in.sample_params.clear();
    p.append_encoded(j + 1, in.sample_params);
    decode.run_tokens(in, *cache, tok);
    out.push_back(tok.at(0));
  }
  return out;
}

// Runs fn(i) for every request index i on kThreads threads (request i on thread i % kThreads), all starting
// together.
template <class Fn>
void on_threads(int n, Fn fn) {
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kThreads);
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      try {
        for (int i = t; i < n; i += kThreads) fn(i);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(t)] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[static_cast<size_t>(t)], "") << "thread " << t;
}

Model& qwen() {
  static Model m(golden::model_path("qwen3_tied"), "qwen3_tied", backends::make_pjrt_backend("xla-cpu"));
  return m;
}

TEST(PjrtThreads, OneExecutableFromFourThreadsEqualsSequential) {
  REQUIRE_XLA_CPU();
  Model& m = qwen();
  auto prefill = m.be->compile(m.graph(step_key(Phase::Prefill, 1, kPrompt, kLen)));
  auto decode = m.be->compile(m.graph(step_key(Phase::Decode, 1, 1, kLen)));
  const auto reqs = requests(3 * kThreads, m.config.vocab_size);
  std::vector<std::vector<float>> sequential, concurrent(reqs.size());
  for (const auto& r : reqs) sequential.push_back(run_logits(m, *prefill, *decode, r));
  const auto before = m.be->transfer_stats();
  on_threads(static_cast<int>(reqs.size()),
             [&](int i) { concurrent[static_cast<size_t>(i)] = run_logits(m, *prefill, *decode, reqs[static_cast<size_t>(i)]); });
  const auto after = m.be->transfer_stats();
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(concurrent[i], sequential[i]) << "request " << i;
  // Every run counted once, with its bytes: no update lost between threads.
  const uint64_t runs = reqs.size() * (1 + kSteps);
  EXPECT_EQ(after.runs - before.runs, runs);
  EXPECT_EQ(after.d2h_bytes - before.d2h_bytes, runs * m.config.vocab_size * sizeof(float));
  const uint64_t up_per_request = (3 * kPrompt + 1 + kSteps * 4) * sizeof(int32_t);  // ids, positions, slots, kv_begin
  EXPECT_EQ(after.h2d_bytes - before.h2d_bytes, reqs.size() * up_per_request);
}

TEST(PjrtThreads, InStepSamplingFromFourThreadsEqualsSequential) {
  REQUIRE_XLA_CPU();
  Model& m = qwen();
  auto prefill = m.be->compile(m.graph(step_key(Phase::Prefill, 1, kPrompt, kLen, 0, Sampling::Sample)));
  auto decode = m.be->compile(m.graph(step_key(Phase::Decode, 1, 1, kLen, 0, Sampling::Sample)));
  const auto reqs = requests(2 * kThreads, m.config.vocab_size);
  std::vector<std::vector<int32_t>> sequential, concurrent(reqs.size());
  for (const auto& r : reqs) sequential.push_back(run_tokens(m, *prefill, *decode, r));
  on_threads(static_cast<int>(reqs.size()),
             [&](int i) { concurrent[static_cast<size_t>(i)] = run_tokens(m, *prefill, *decode, reqs[static_cast<size_t>(i)]); });
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(concurrent[i], sequential[i]) << "request " << i;
  EXPECT_NE(sequential[0], sequential[1]) << "different seeds and prompts should give different tokens";
}

TEST(PjrtThreads, OpByOpFromFourThreadsEqualsSequential) {
  REQUIRE_XLA_CPU();
  Model& m = qwen();
  auto prefill = m.be->compile_op_by_op(m.graph(step_key(Phase::Prefill, 1, kPrompt, kLen)));
  auto decode = m.be->compile_op_by_op(m.graph(step_key(Phase::Decode, 1, 1, kLen)));
  const int compiled = m.be->op_compiles();
  const auto reqs = requests(kThreads, m.config.vocab_size);
  std::vector<std::vector<float>> sequential, concurrent(reqs.size());
  for (const auto& r : reqs) sequential.push_back(run_logits(m, *prefill, *decode, r));
  on_threads(static_cast<int>(reqs.size()),
             [&](int i) { concurrent[static_cast<size_t>(i)] = run_logits(m, *prefill, *decode, reqs[static_cast<size_t>(i)]); });
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(concurrent[i], sequential[i]) << "request " << i;
  EXPECT_EQ(m.be->op_compiles(), compiled) << "op-by-op runs compile nothing (every op was compiled up front)";
}

TEST(PjrtThreads, CompilesFromFourThreadsCountOnceEach) {
  REQUIRE_XLA_CPU();
  Model& m = qwen();
  const int before = m.be->compile_timing().compiles;
  std::vector<std::unique_ptr<Executable>> exes(kThreads);
  on_threads(kThreads, [&](int i) {
    exes[static_cast<size_t>(i)] = m.be->compile(m.graph(step_key(Phase::Prefill, 1, 2 + i, kLen)));
  });
  EXPECT_EQ(m.be->compile_timing().compiles - before, kThreads);
  for (int i = 0; i < kThreads; ++i) EXPECT_NE(exes[static_cast<size_t>(i)], nullptr);
}

}  // namespace
