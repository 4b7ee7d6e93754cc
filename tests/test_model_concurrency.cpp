// One CausalLM used from 4 threads at once (generate() with different prompts, greedy and seeded sampling,
// a left-padded batch, and a SlotBatch per thread) gives exactly what the same calls give one after another.
// The threads start on a freshly loaded model, so they also compile concurrently. Suite names hold
// "Concurrency" for the ThreadSanitizer stage.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "golden_util.h"
#include "pjrt_test_util.h"
#include "tessera/batch.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
namespace golden = tessera::golden;

namespace {

CausalLM load(const std::string& device) {
  LoadOptions opt;
  opt.dtype = DType::F32;
  opt.device_map = device;
  return AutoModelForCausalLM::from_pretrained(golden::model_path("llama_gqa"), opt);
}

std::vector<int32_t> prompt(int len, int salt) {
  std::vector<int32_t> ids(static_cast<size_t>(len));
  for (int i = 0; i < len; ++i) ids[static_cast<size_t>(i)] = 3 + (i * 53 + salt * 89) % 1000;
  return ids;
}

struct Job {
  std::vector<std::vector<int32_t>> ids, mask;
  GenerationConfig cfg;
};

// Work for thread `t`: a greedy single-row generation, a seeded sampled one (temperature, top-p, repetition
// penalty) and a greedy left-padded batch of two rows; prompts differ per thread. `same_shapes` (xla-cpu, where
// a compile takes seconds): every thread's calls share their compiled shapes (prompts within one bucket, one
// budget); otherwise budgets differ per thread too.
std::vector<Job> jobs_for(int t, bool same_shapes) {
  std::vector<Job> jobs;
  GenerationConfig greedy;
  greedy.max_new_tokens = same_shapes ? 8 : 10 + t;
  greedy.eos_token_id = {};
  GenerationConfig sampled = greedy;
  sampled.do_sample = true;
  sampled.seed = 1000 + t;
  sampled.temperature = 1.3f;
  sampled.top_p = 0.9f;
  sampled.repetition_penalty = 1.2f;
  jobs.push_back({{prompt(3 + 3 * t, t)}, {}, greedy});
  jobs.push_back({{prompt(6 + t, 10 + t)}, {}, sampled});
  std::vector<int32_t> a = prompt(8, 20 + t), b = prompt(5, 30 + t);
  b.insert(b.begin(), 3, 0);
  jobs.push_back({{a, b}, {std::vector<int32_t>(8, 1), {0, 0, 0, 1, 1, 1, 1, 1}}, greedy});
  return jobs;
}

// A SlotBatch of 2 slots serving 3 requests (the third joins when the first ends).
std::vector<std::vector<int32_t>> serve(CausalLM& m, int t) {
  SlotBatch batch(m, 2, 48);
  GenerationConfig g;
  g.eos_token_id = {};
  std::vector<std::vector<int32_t>> out(3);
  std::vector<int> owner = {-1, -1};
  int next = 0;
  while (next < 3 || batch.running_count() > 0) {
    while (next < 3 && batch.free_slot() >= 0) {
      g.max_new_tokens = 4 + 3 * next;
      const int slot = batch.free_slot();
      batch.prefill(slot, prompt(4 + next + t, 40 + next + 3 * t), g);
      owner[static_cast<size_t>(slot)] = next++;
    }
    batch.step();
    for (int s = 0; s < 2; ++s)
      if (batch.busy(s) && !batch.running(s)) {
        out[static_cast<size_t>(owner[static_cast<size_t>(s)])] = batch.tokens(s);
        batch.release(s);
      }
  }
  return out;
}

struct Results {
  std::vector<std::vector<std::vector<int32_t>>> generated;  // per job: sequences
  std::vector<std::vector<int32_t>> served;
  bool operator==(const Results&) const = default;
};

Results run_thread_work(CausalLM& m, int t, bool same_shapes) {
  Results r;
  for (const Job& j : jobs_for(t, same_shapes)) r.generated.push_back(m.generate(j.ids, j.mask, j.cfg).sequences);
  r.served = serve(m, t);
  return r;
}

void expect_concurrent_equals_sequential(const std::string& device, bool same_shapes) {
  constexpr int kThreads = 4;
  CausalLM m = load(device);  // fresh: the threads compile concurrently too
  std::vector<Results> concurrent(kThreads);
  std::vector<std::string> errors(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      try {
        for (int round = 0; round < 2; ++round) {
          Results r = run_thread_work(m, t, same_shapes);
          if (round == 0) concurrent[static_cast<size_t>(t)] = r;
          if (!(r == concurrent[static_cast<size_t>(t)])) errors[static_cast<size_t>(t)] = "round 2 differs from round 1";
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(t)] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  std::vector<Results> sequential(kThreads);  // the same calls one after another (compiled by now)
  for (int t = 0; t < kThreads; ++t) sequential[static_cast<size_t>(t)] = run_thread_work(m, t, same_shapes);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[static_cast<size_t>(t)], "") << device << " thread " << t;
    EXPECT_EQ(concurrent[static_cast<size_t>(t)].generated, sequential[static_cast<size_t>(t)].generated)
        << device << " thread " << t;
    EXPECT_EQ(concurrent[static_cast<size_t>(t)].served, sequential[static_cast<size_t>(t)].served)
        << device << " thread " << t;
  }
}

TEST(ModelConcurrency, FourThreadsEqualSequentialOnCpu) { expect_concurrent_equals_sequential("cpu", false); }

TEST(ModelConcurrency, FourThreadsEqualSequentialOnXlaCpu) {
  REQUIRE_XLA_CPU();
  expect_concurrent_equals_sequential("xla-cpu", true);
}

}  // namespace
