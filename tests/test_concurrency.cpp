// One backend and its compiled steps shared by several threads (backend.h: executables are immutable, the
// per-run state lives in the DeviceCache each caller owns): 4 threads, each with its own cache, running many
// steps (row-mapped prefills, decodes with logits and with in-step sampling) at once give bitwise what the
// same work gives run sequentially. Also: concurrent submitters on one ThreadPool, and a CompileCache that
// several threads ask for the same keys (each compiled once). The ThreadSanitizer stage of scripts/test.sh
// runs these suites.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "golden_util.h"
#include "runtime/compile_cache.h"
#include "step_test_util.h"
#include "tessera/error.h"

using namespace tessera;
using namespace tessera::step_test;

namespace {

constexpr int kThreads = 4;
constexpr int kLen = 320;  // cache slots: long enough for the split decode attention (>= 256 keys)

// llama_gqa on the cpu backend, and a CompileCache of the executables every thread runs.
struct Shared {
  StepModel<> m;
  std::unique_ptr<runtime::CompileCache> cache;

  explicit Shared(bool bf16_kv)
      : m(golden::model_path("llama_gqa"), "llama_gqa", cpu_backend(bf16_kv)),
        cache(std::make_unique<runtime::CompileCache>(*m.be)) {}
  graph::Graph build(const ShapeKey& key) const { return m.graph(key); }
  const backends::Executable& exe(const ShapeKey& key) {
    return cache->get(key, [this](const ShapeKey& k) { return build(k); });
  }
};

ShapeKey key(Phase phase, int batch, int seq, int cache_rows = 0, Sampling s = Sampling::Off) {
  return step_key(phase, batch, seq, kLen, cache_rows, s);
}

SamplingParams params(uint64_t seed, bool do_sample) {
  return {.temperature = 1.1f,
          .top_k = 40,
          .top_p = 0.9f,
          .min_p = 0.0f,
          .repetition_penalty = 1.2f,
          .seed = seed,
          .do_sample = do_sample};
}

// Everything one worker's run produces.
struct Result {
  std::vector<float> logits;    // every logits output, concatenated
  std::vector<int32_t> tokens;  // every token chosen
  bool operator==(const Result& o) const {
    return tokens == o.tokens && logits.size() == o.logits.size() &&
           std::memcmp(logits.data(), o.logits.data(), logits.size() * sizeof(float)) == 0;
  }
};

// Worker w's run, on a 2-row cache of its own: a row-mapped prefill with logits into row 1 (a prompt long
// enough that decode attention splits its keys over the threads), a row-mapped sampled prefill into row 0,
// then decode steps over both rows alternating a logits step (host argmax) and an in-step sampling step (row 0
// sampled, row 1 greedy).
Result work(Shared& s, int w, int decode_steps) {
  auto cache = s.m.cache(2, kLen);
  const int64_t vocab = s.m.vocab();
  Result r;
  std::vector<float> logits;
  std::vector<int32_t> tok;
  const int la = 230 + 5 * w, lb = 40 + 9 * w;
  std::vector<int32_t> a, b;
  for (int i = 0; i < la; ++i) a.push_back(1 + (i * (7 + w) + w) % static_cast<int>(vocab - 1));
  for (int i = 0; i < lb; ++i) b.push_back(1 + (i * 13 + 3 * w) % static_cast<int>(vocab - 1));
  StepInputs in = prefill_inputs(a);
  in.cache_rows = {1};
  s.exe(key(Phase::Prefill, 1, la, 2)).run(in, *cache, logits);
  r.logits.insert(r.logits.end(), logits.begin(), logits.end());
  int32_t next1 = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());

  in = sampled_prefill_inputs(b, params(100 + static_cast<uint64_t>(w), true));
  in.cache_rows = {0};
  s.exe(key(Phase::Prefill, 1, lb, 2, Sampling::Sample)).run_tokens(in, *cache, tok);
  int32_t next0 = tok[0];
  r.tokens.push_back(next0);

  for (int j = 0; j < decode_steps; ++j) {
    in = {};
    append_decode_row(in, next0, lb + j, lb + j);
    append_decode_row(in, next1, la + j, la + j);
    if (j % 2 == 0) {
      s.exe(key(Phase::Decode, 2, 1)).run(in, *cache, logits);
      r.logits.insert(r.logits.end(), logits.begin(), logits.end());
      next0 = static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + vocab) - logits.begin());
      next1 = static_cast<int32_t>(std::max_element(logits.begin() + vocab, logits.end()) - logits.begin() - vocab);
    } else {
      params(100 + static_cast<uint64_t>(w), true).append_encoded(j, in.sample_params);
      params(0, false).append_encoded(j, in.sample_params);
      s.exe(key(Phase::Decode, 2, 1, 0, Sampling::Sample)).run_tokens(in, *cache, tok);
      next0 = tok[0];
      next1 = tok[1];
    }
    r.tokens.push_back(next0);
    r.tokens.push_back(next1);
  }
  return r;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

class CpuConcurrency : public ::testing::TestWithParam<bool> {};

TEST_P(CpuConcurrency, FourThreadsSharingExecutablesEqualSequentialRunsBitwise) {
  Shared s(GetParam());
  const int steps = 24, rounds = 3;
  std::vector<Result> want;
  auto t0 = std::chrono::steady_clock::now();
  for (int w = 0; w < kThreads; ++w) want.push_back(work(s, w, steps));
  const double sequential = seconds_since(t0);
  for (int w = 1; w < kThreads; ++w) ASSERT_NE(want[w].tokens, want[0].tokens) << "workers must differ";
  const int compiled = s.cache->stats().compiles;
  EXPECT_EQ(compiled, 2 * kThreads + 2) << "two prefill lengths per worker and two decodes";

  std::atomic<int> mismatches{0};
  std::vector<std::string> errors(kThreads);
  t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w)
    threads.emplace_back([&, w] {
      try {
        for (int round = 0; round < rounds; ++round)
          if (!(work(s, w, steps) == want[static_cast<size_t>(w)])) ++mismatches;
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(w)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  const double concurrent = seconds_since(t0) / rounds;
  for (int w = 0; w < kThreads; ++w) EXPECT_EQ(errors[static_cast<size_t>(w)], "") << "worker " << w;
  EXPECT_EQ(mismatches.load(), 0) << "runs that differ from the sequential ones";
  EXPECT_EQ(s.cache->stats().compiles, compiled) << "nothing recompiled";
  std::printf("[ concurrency ] %d workers: sequential %.3f s, concurrent %.3f s (per round, %d pool threads)\n",
              kThreads, sequential, concurrent, cpu::ThreadPool::instance().num_threads());
}

INSTANTIATE_TEST_SUITE_P(KvCache, CpuConcurrency, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "bf16" : "f32"); });

// Several threads submitting jobs to one pool at once: each job sees its own work done exactly once.
TEST(ThreadPoolConcurrency, ConcurrentSubmittersEachGetTheirOwnJobs) {
  for (int pool_threads : {2, 3}) {
    cpu::ThreadPool pool(pool_threads);
    std::atomic<int> bad{0};
    std::vector<std::thread> callers;
    for (int c = 0; c < kThreads; ++c)
      callers.emplace_back([&, c] {
        for (int rep = 0; rep < 300; ++rep) {
          const int64_t n = 1 + (rep * 7 + c) % 200;
          std::vector<int> seen(static_cast<size_t>(n), 0);  // written by whichever thread owns the range
          if (rep % 3 == 0) {
            pool.parallel_for(n, 1 + rep % 4, [&](int64_t b, int64_t e) {
              for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)] += 1 + c;
            });
          } else if (rep % 3 == 1) {
            pool.parallel_chunks(n, 1 + rep % 5, [&](int64_t b, int64_t e) {
              for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)] += 1 + c;
            });
          } else {
            std::vector<std::atomic<int>> visits(static_cast<size_t>(pool_threads));
            pool.run([&](int tid, int nth) {
              if (nth != pool_threads) ++bad;
              visits[static_cast<size_t>(tid)]++;
              // A nested parallel region runs inline on this thread.
              pool.parallel_for(4, 1, [&](int64_t, int64_t) {});
            });
            for (auto& v : visits) bad += v.load() != 1;
            std::fill(seen.begin(), seen.end(), 1 + c);
          }
          for (int v : seen) bad += v != 1 + c;
        }
      });
    for (auto& t : callers) t.join();
    EXPECT_EQ(bad.load(), 0) << pool_threads << " pool threads";
  }
}

// Threads asking a CompileCache for the same keys at once: each key is built and compiled once, every thread
// gets the same executable, and the stats count one compile per key and a hit for every other request.
TEST(CompileCacheConcurrency, SameKeyFromManyThreadsCompilesOnce) {
  Shared s(false);
  std::atomic<int> builds{0};
  const ShapeKey keys[] = {key(Phase::Prefill, 1, 7), key(Phase::Decode, 1, 1), key(Phase::Decode, 2, 1),
                           key(Phase::Prefill, 1, 5, 3, Sampling::Greedy)};
  constexpr int kAsks = 25;
  std::vector<std::vector<const backends::Executable*>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAsks; ++i) {
        const ShapeKey& k = keys[(i + t) % 4];
        got[static_cast<size_t>(t)].push_back(&s.cache->get(k, [&](const ShapeKey& kk) {
          ++builds;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));  // others arrive while this one builds
          return s.build(kk);
        }));
        (void)s.cache->contains(k);
        (void)s.cache->stats();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(builds.load(), 4);
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kAsks; ++i)
      EXPECT_EQ(got[static_cast<size_t>(t)][static_cast<size_t>(i)], &s.cache->get(keys[(i + t) % 4], [&](const ShapeKey& kk) {
        return s.build(kk);
      }));
  const runtime::CompileStats st = s.cache->stats();
  EXPECT_EQ(st.compiles, 4);
  EXPECT_EQ(st.keys.size(), 4u);
  EXPECT_EQ(st.hits, kThreads * kAsks - 4 + kThreads * kAsks);  // the checks above are hits too
  for (const ShapeKey& k : keys) EXPECT_TRUE(s.cache->contains(k));
}

// A build that throws: the error reaches the thread that compiles and every thread that waited for it; the key
// stays uncompiled and a later request builds it afresh.
TEST(CompileCacheConcurrency, AFailedCompileReachesWaitersAndCanBeRetried) {
  Shared s(false);
  const ShapeKey k = key(Phase::Decode, 1, 1);
  std::atomic<int> builds{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      try {
        s.cache->get(k, [&](const ShapeKey&) -> graph::Graph {
          ++builds;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          fail("no graph for this key");
        });
      } catch (const Error& e) {
        if (std::string(e.what()).find("no graph for this key") != std::string::npos) ++failures;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), kThreads);
  EXPECT_GE(builds.load(), 1);
  EXPECT_FALSE(s.cache->contains(k));
  EXPECT_EQ(s.cache->stats().compiles, 0);
  s.exe(k);
  EXPECT_TRUE(s.cache->contains(k));
  EXPECT_EQ(s.cache->stats().compiles, 1);
}

}  // namespace
