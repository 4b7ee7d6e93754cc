// One backend and its compiled steps shared by several threads (backend.h: executables are immutable, the
// per-run state lives in the DeviceCache each caller owns): 4 threads, each with its own cache, running many
// steps (row-mapped prefills, decodes with logits and with in-step sampling) at once give bitwise what the
// same work gives run sequentially. Also: concurrent submitters on one ThreadPool, and a CompileCache that
// several threads ask for the same keys (each compiled once). The ThreadSanitizer stage of scripts/test.sh
// runs these suites.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/thread_pool.h"
#include "golden_util.h"
#include "graph/compile_cache.h"
#include "io/weight_source.h"
#include "models/architecture.h"
#include "tessera/error.h"

using namespace tessera;
namespace golden = tessera::golden;
using backends::StepInputs;
using graph::Phase;
using graph::Sampling;
using graph::ShapeKey;

namespace {

constexpr int kThreads = 4;
constexpr int kLen = 320;  // cache slots: long enough for the split decode attention (>= 256 keys)

struct Shared {
  const models::Architecture* arch = nullptr;
  models::DecoderConfig config;
  std::unique_ptr<backends::Backend> be;
  std::unique_ptr<graph::CompileCache> cache;  // the executables every thread runs

  explicit Shared(bool bf16_kv) {
    const std::string dir = golden::model_path("llama_gqa");
    auto cj = golden::load_json(dir + "/config.json");
    arch = &models::find_architecture(cj["architectures"][0].get<std::string>(), "llama_gqa");
    config = arch->parse_config(cj, "llama_gqa");
    auto src = io::open_checkpoint(dir);
    backends::WeightMap weights;
    for (const auto& w : arch->weights(config)) weights.emplace(w.name, src->load(w.name, DType::F32));
    backends::CpuBackendOptions o;
    o.bf16_kv_cache = bf16_kv;
    be = backends::make_cpu_backend(nullptr, o);
    be->bind_weights(std::move(weights));
    cache = std::make_unique<graph::CompileCache>(*be);
  }
  graph::Graph build(const ShapeKey& key) const {
    graph::Graph g = arch->build_graph(config, key);
    graph::append_sampling(g, config.vocab_size);
    return g;
  }
  const backends::Executable& exe(const ShapeKey& key) {
    return cache->get(key, [this](const ShapeKey& k) { return build(k); });
  }
};

ShapeKey key(Phase phase, int batch, int seq, int cache_rows = 0, Sampling s = Sampling::Off) {
  return ShapeKey{.phase = phase, .batch = batch, .seq = seq, .cache_len = kLen, .dtype = DType::F32, .sampling = s,
                  .cache_rows = cache_rows};
}

std::vector<int32_t> params(uint64_t seed, int step, bool do_sample) {
  std::vector<int32_t> p(graph::kSampleParams, 0);
  const float temperature = 1.1f, top_p = 0.9f, min_p = 0.0f, penalty = 1.2f;
  std::memcpy(&p[graph::kTemperature], &temperature, 4);
  std::memcpy(&p[graph::kTopP], &top_p, 4);
  std::memcpy(&p[graph::kMinP], &min_p, 4);
  std::memcpy(&p[graph::kRepetitionPenalty], &penalty, 4);
  p[graph::kTopK] = 40;
  p[graph::kSeedLo] = static_cast<int32_t>(seed);
  p[graph::kStep] = step;
  p[graph::kDoSample] = do_sample ? 1 : 0;
  return p;
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
  auto cache = s.be->create_cache(s.config.num_layers, 2, s.config.local_kv_heads(), kLen, s.config.head_dim);
  const int64_t vocab = s.config.vocab_size;
  Result r;
  std::vector<float> logits;
  std::vector<int32_t> tok;
  const int la = 230 + 5 * w, lb = 40 + 9 * w;
  StepInputs in;
  for (int i = 0; i < la; ++i) {
    in.ids.push_back(1 + (i * (7 + w) + w) % static_cast<int>(vocab - 1));
    in.positions.push_back(i);
    in.slots.push_back(i);
  }
  in.kv_begin = {0};
  in.cache_rows = {1};
  s.exe(key(Phase::Prefill, 1, la, 2)).run(in, *cache, logits);
  r.logits.insert(r.logits.end(), logits.begin(), logits.end());
  int32_t next1 = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());

  in = {};
  for (int i = 0; i < lb; ++i) {
    in.ids.push_back(1 + (i * 13 + 3 * w) % static_cast<int>(vocab - 1));
    in.positions.push_back(i);
    in.slots.push_back(i);
  }
  in.kv_begin = {0};
  in.cache_rows = {0};
  in.seen_from = {0};
  in.sample_params = params(100 + static_cast<uint64_t>(w), 0, true);
  s.exe(key(Phase::Prefill, 1, lb, 2, Sampling::Sample)).run_tokens(in, *cache, tok);
  int32_t next0 = tok[0];
  r.tokens.push_back(next0);

  for (int j = 0; j < decode_steps; ++j) {
    in = {};
    in.ids = {next0, next1};
    in.positions = {lb + j, la + j};
    in.slots = {lb + j, la + j};
    in.kv_begin = {0, 0};
    if (j % 2 == 0) {
      s.exe(key(Phase::Decode, 2, 1)).run(in, *cache, logits);
      r.logits.insert(r.logits.end(), logits.begin(), logits.end());
      next0 = static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + vocab) - logits.begin());
      next1 = static_cast<int32_t>(std::max_element(logits.begin() + vocab, logits.end()) - logits.begin() - vocab);
    } else {
      in.sample_params = params(100 + static_cast<uint64_t>(w), j, true);
      const auto p1 = params(0, j, false);
      in.sample_params.insert(in.sample_params.end(), p1.begin(), p1.end());
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
  const graph::CompileStats st = s.cache->stats();
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
