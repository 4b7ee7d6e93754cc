// Rows at different positions on the native cpu backend (graph.h: per-row slots, row-mapped steps over a
// multi-row cache, the sampler state per cache row): every row of a batched step gives what its sequence
// gives alone, when rows sit at different slots and positions, join a running batch at different steps, or
// replace a finished row; in-step sampling per row (greedy and sampled rows in one program); and step inputs
// that do not fit the step are refused with a message naming the field, before anything is read.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>

#include "error_util.h"
#include "golden_util.h"
#include "rows_test_util.h"
#include "step_test_util.h"

using namespace tessera;
using namespace tessera::step_test;
using tessera::testing::expect_error;

namespace {

std::string fixture_dir(const std::string& name) {
  if (name.rfind("qwen3_sliding", 0) == 0) return golden::variant_path(name);
  return golden::model_path(name);
}

// A tiny checkpoint on the cpu backend (float32 weights), with its compiled steps.
using Tiny = StepModel<>;

Tiny load_tiny(const std::string& name, bool bf16_kv) {
  return Tiny(fixture_dir(name), name, cpu_backend(bf16_kv));
}

using Param = std::tuple<const char*, bool>;  // (model, bf16 KV cache)

class CpuRows : public ::testing::TestWithParam<Param> {
 protected:
  Tiny& model() {
    static std::map<std::string, std::unique_ptr<Tiny>> loaded;
    auto& m = loaded[std::string(std::get<0>(GetParam())) + (std::get<1>(GetParam()) ? "/bf16kv" : "")];
    if (!m) m = std::make_unique<Tiny>(load_tiny(std::get<0>(GetParam()), std::get<1>(GetParam())));
    return *m;
  }
};

// (a) One prefill and decode steps over 3 rows whose sequences sit at different cache slots (per-row slots)
// and different positions (different prompt lengths, left-padded in the prefill).
TEST_P(CpuRows, BatchWithPerRowSlotsEqualsEachSequenceAlone) {
  expect_per_row_slots_equal_alone(model(), {.len = 40,
                                             .seq = 9,
                                             .steps = 6,
                                             .seed = 11,
                                             .prompts = {5, 9, 3},
                                             .offsets = {0, 4, 11},
                                             .pad_position = 1});
}

// A 4-row cache that requests join at different steps: a row-mapped prefill (batch 1) into a free cache row,
// then decode steps over all 4 rows (inactive rows carry a dummy token into their own row), or over the
// active rows only (a row-mapped decode) while exactly two are active. A finished row is replaced.
struct Join {
  int request, row, at;  // request index, cache row, global step at which it is prefilled
};

TEST_P(CpuRows, RowsJoiningARunningBatchEqualEachSequenceAlone) {
  Tiny& m = model();
  const int len = 32, rows = 4;
  std::mt19937 rng(23);
  // request: (prompt, decode steps)
  const std::pair<int, int> shapes[] = {{4, 3}, {6, 5}, {3, 9}, {5, 6}, {7, 4}};
  std::vector<Request> reqs;
  std::vector<std::vector<std::vector<float>>> want;
  for (auto [p, n] : shapes) {
    reqs.push_back(random_request(rng, m.vocab(), p, n));
    want.push_back(alone(m, reqs.back(), len));
  }
  // Request 2 into row 2 first; request 0 into row 0 at step 1; request 3 at step 3 (into row 3); request 1
  // at step 4 (row 1); request 0 ends after its 3 steps (steps 1..3) and request 4 takes row 0 at step 5.
  const Join joins[] = {{2, 2, 0}, {0, 0, 1}, {3, 3, 3}, {1, 1, 4}, {4, 0, 5}};
  auto cache = m.cache(rows, len);
  struct Active {
    int request = -1, done = 0;  // decode steps run
  };
  Active active[rows];
  int checked = 0;
  std::vector<float> logits;
  for (int step = 0; step < 16; ++step) {
    for (const Join& jn : joins) {
      if (jn.at != step) continue;
      ASSERT_EQ(active[jn.row].request, -1) << "row " << jn.row << " busy";
      const Request& r = reqs[static_cast<size_t>(jn.request)];
      StepInputs in = prefill_inputs(r.prompt_ids());
      in.cache_rows = {jn.row};
      m.exe(step_key(Phase::Prefill, 1, r.prompt, len, rows)).run(in, *cache, logits);
      expect_close(logits, want[static_cast<size_t>(jn.request)][0],
                   "prefill of request " + std::to_string(jn.request));
      active[jn.row] = {jn.request, 0};
      ++checked;
    }
    std::vector<int> live;
    for (int b = 0; b < rows; ++b)
      if (active[b].request >= 0) live.push_back(b);
    if (live.empty()) continue;
    // Two active rows: a row-mapped decode over just those (in reverse cache order); else all four rows.
    const bool mapped = live.size() == 2;
    std::vector<int> step_rows = mapped ? std::vector<int>{live[1], live[0]} : std::vector<int>{0, 1, 2, 3};
    StepInputs in;
    for (int b : step_rows) {
      const Active& a = active[b];
      if (a.request < 0) {  // a free row: any token, written into its own row (slot 0), ignored
        append_decode_row(in, 0, 0, 0);
        continue;
      }
      const Request& r = reqs[static_cast<size_t>(a.request)];
      const int pos = r.prompt + a.done;
      append_decode_row(in, r.tokens[static_cast<size_t>(pos)], pos, pos);
    }
    const int batch = static_cast<int>(step_rows.size());
    if (mapped) in.cache_rows.assign(step_rows.begin(), step_rows.end());
    m.exe(step_key(Phase::Decode, batch, 1, len, mapped ? rows : 0)).run(in, *cache, logits);
    for (int i = 0; i < batch; ++i) {
      Active& a = active[step_rows[static_cast<size_t>(i)]];
      if (a.request < 0) continue;
      ++a.done;
      expect_close(row(logits, i, m.vocab()),
                   want[static_cast<size_t>(a.request)][static_cast<size_t>(a.done)],
                   "request " + std::to_string(a.request) + " decode step " + std::to_string(a.done - 1) +
                       " at global step " + std::to_string(step) + (mapped ? " (row-mapped)" : ""));
      ++checked;
      if (a.done == reqs[static_cast<size_t>(a.request)].steps()) a = {};  // finished: the row is free
    }
  }
  int expected = 0;
  for (const Request& r : reqs) expected += 1 + r.steps();
  EXPECT_EQ(checked, expected) << "every prefill and decode step of every request was compared";
}

INSTANTIATE_TEST_SUITE_P(Models, CpuRows,
                         ::testing::Values(Param{"llama_gqa", false}, Param{"llama_gqa", true},
                                           Param{"qwen3_sliding", false}),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_bf16kv" : "");
                         });

// (c) In-step sampling over rows: a Greedy program and a Sample program whose rows mix sampling (kDoSample 1)
// and greedy (0), with a repetition penalty (the seen mask is per cache row, cleared by a prefill: a row that
// replaces a finished one must not inherit its ids). Each request's tokens equal what it gives alone: greedy
// rows alone in a 1-row cache; sampled rows alone in the same cache row of an otherwise idle cache (the draw
// is keyed by the sequence's seed and token index only, so any row would do; the same row keeps the test's
// reference independent of that).
struct SampledRequest {
  std::vector<int32_t> prompt;
  int new_tokens = 0;
  bool do_sample = false;
  uint64_t seed = 0;
};

SamplingParams sampler(const SampledRequest& r) {
  return {.temperature = 0.9f,
          .top_k = 50,
          .top_p = 0.95f,
          .min_p = 0.0f,
          .repetition_penalty = 1.3f,
          .seed = r.seed,
          .do_sample = r.do_sample};
}

TEST(CpuRowsSampling, InStepSamplingPerRowEqualsEachSequenceAlone) {
  Tiny m = load_tiny("llama_gqa", false);
  const int len = 40, rows = 3;
  for (Sampling mode : {Sampling::Greedy, Sampling::Sample}) {
    // (request, cache row, step it joins); request 0 finishes and request 3 takes its row.
    const std::vector<SampledRequest> reqs = {{{5, 9, 5, 9, 12}, 4, true, 7},
                                              {{3, 4, 5}, 8, false, 0},
                                              {{20, 21, 22, 23, 24, 25}, 7, true, 0x1234567890ull},
                                              {{9, 5, 9, 5}, 6, true, 8}};
    const Join joins[] = {{1, 1, 0}, {0, 0, 0}, {2, 2, 2}, {3, 0, 4}};
    std::vector<std::vector<int32_t>> want;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const bool sampled = mode == Sampling::Sample && reqs[i].do_sample;
      int row = 0;
      for (const Join& jn : joins)
        if (jn.request == static_cast<int>(i)) row = jn.row;
      const SampledRequest& r = reqs[i];
      want.push_back(sampled ? sampled_alone(m, r.prompt, r.new_tokens, sampler(r), mode, len, rows, row)
                             : sampled_alone(m, r.prompt, r.new_tokens, sampler(r), mode, len));
    }
    auto cache = m.cache(rows, len);
    struct Active {
      int request = -1, made = 0;
      int32_t last = 0;
    };
    Active active[rows];
    std::vector<std::vector<int32_t>> got(reqs.size());
    std::vector<int32_t> tok;
    for (int step = 0; step < 20; ++step) {
      for (const Join& jn : joins) {
        if (jn.at != step) continue;
        ASSERT_EQ(active[jn.row].request, -1);
        const SampledRequest& r = reqs[static_cast<size_t>(jn.request)];
        const int p = static_cast<int>(r.prompt.size());
        StepInputs in = sampled_prefill_inputs(r.prompt, sampler(r));
        in.cache_rows = {jn.row};
        m.exe(step_key(Phase::Prefill, 1, p, len, rows, mode)).run_tokens(in, *cache, tok);
        got[static_cast<size_t>(jn.request)].push_back(tok[0]);
        active[jn.row] = {jn.request, 1, tok[0]};
      }
      bool any = false;
      StepInputs in;
      for (int b = 0; b < rows; ++b) {
        Active& a = active[b];
        if (a.request >= 0 && a.made == reqs[static_cast<size_t>(a.request)].new_tokens) a = {};  // finished
        any = any || a.request >= 0;
        const SampledRequest idle{};
        const SampledRequest& r = a.request >= 0 ? reqs[static_cast<size_t>(a.request)] : idle;
        const int pos = a.request >= 0 ? static_cast<int>(r.prompt.size()) + a.made - 1 : 0;
        append_decode_row(in, a.request >= 0 ? a.last : 0, pos, pos);
        sampler(r).append_encoded(a.made, in.sample_params);
      }
      if (!any) continue;
      m.exe(step_key(Phase::Decode, rows, 1, len, 0, mode)).run_tokens(in, *cache, tok);
      for (int b = 0; b < rows; ++b) {
        Active& a = active[b];
        if (a.request < 0) continue;
        got[static_cast<size_t>(a.request)].push_back(tok[static_cast<size_t>(b)]);
        a.last = tok[static_cast<size_t>(b)];
        ++a.made;
      }
    }
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << graph::sampling_name(mode) << " request " << i;
  }
}

// (d) Inputs that do not fit the step are refused with the field named, before any kernel runs.
TEST(CpuRowsInputs, BadStepInputsAreRefusedWithAMessage) {
  Tiny m = load_tiny("llama_gqa", false);
  const int len = 16, rows = 4;
  auto cache = m.cache(rows, len);
  // A row-mapped prefill of 3 tokens into cache row 2.
  StepInputs good;
  good.ids = {5, 6, 7};
  good.positions = {0, 1, 2};
  good.slots = {0, 1, 2};
  good.kv_begin = {0};
  good.cache_rows = {2};
  const Executable& prefill = m.exe(step_key(Phase::Prefill, 1, 3, len, rows));
  std::vector<float> logits;
  prefill.run(good, *cache, logits);  // fits
  auto with = [&](auto change) {
    StepInputs in = good;
    change(in);
    return in;
  };
  auto refused = [&](const Executable& exe, const StepInputs& in, const std::string& needle,
                     DeviceCache* c = nullptr) {
    expect_error([&] { exe.run(in, c ? *c : *cache, logits); }, needle);
  };
  refused(prefill, with([](StepInputs& in) { in.ids.pop_back(); }),
          "StepInputs::ids has 2 values, expected 3");
  refused(prefill, with([](StepInputs& in) { in.ids[1] = 1024; }), "ids[1] = 1024 is not a token id");
  refused(prefill, with([](StepInputs& in) { in.ids[0] = -1; }), "ids[0] = -1");
  refused(prefill, with([](StepInputs& in) { in.positions = {0}; }), "StepInputs::positions has 1 values");
  refused(prefill, with([](StepInputs& in) { in.slots = {0, 1}; }), "StepInputs::slots has 2 values");
  refused(prefill, with([](StepInputs& in) {
            in.slots = {14, 15, 16};
          }),
          "slots[2] = 16 is outside the cache's 16 slots");
  refused(prefill, with([](StepInputs& in) { in.slots = {-1, 0, 1}; }), "slots[0] = -1");
  refused(prefill, with([](StepInputs& in) { in.slots = {0, 2, 3}; }), "slots[1] = 2 does not follow");
  refused(prefill, with([](StepInputs& in) { in.kv_begin = {0, 0}; }), "StepInputs::kv_begin has 2 values");
  refused(prefill, with([](StepInputs& in) { in.kv_begin = {17}; }), "kv_begin[0] = 17");
  refused(prefill, with([](StepInputs& in) { in.cache_rows = {}; }),
          "StepInputs::cache_rows has 0 values, expected 1");
  refused(prefill, with([](StepInputs& in) { in.cache_rows = {4}; }),
          "cache_rows[0] = 4 is outside the cache's 4 rows");
  refused(prefill, with([](StepInputs& in) { in.cache_rows = {-1}; }), "cache_rows[0] = -1");
  // The cache must be the step's: rows, slots.
  auto small = m.cache(2, len);
  refused(prefill, good, "the cache has 2 rows of 16 slots", small.get());
  auto short_cache = m.cache(rows, 8);
  refused(prefill, good, "the cache has 4 rows of 8 slots", short_cache.get());

  // Decode over all 4 rows: per-row slots, or one [seq] list for every row.
  const Executable& decode = m.exe(step_key(Phase::Decode, rows, 1, len));
  StepInputs d;
  d.ids = {1, 2, 3, 4};
  d.positions = {3, 3, 3, 3};
  d.slots = {3, 4, 5, 6};
  d.kv_begin = {0, 0, 0, 0};
  decode.run(d, *cache, logits);
  d.slots = {3};
  decode.run(d, *cache, logits);
  d.slots = {3, 4};
  refused(decode, d, "StepInputs::slots has 2 values, expected 4 (batch * seq) or 1");
  d.slots = {3, 4, 5, 16};
  refused(decode, d, "slots[3] = 16");
  d.slots = {3, 4, 5, 6};
  d.cache_rows = {3, 2, 1, 0};
  refused(decode, d, "StepInputs::cache_rows is set but the step is not row-mapped");
  d.cache_rows = {0, 1, 2, 3};  // the identity is what an unmapped step does anyway
  decode.run(d, *cache, logits);

  // A row-mapped decode over 2 of the 4 rows: distinct rows.
  const Executable& mapped = m.exe(step_key(Phase::Decode, 2, 1, len, rows));
  StepInputs r2;
  r2.ids = {1, 2};
  r2.positions = {3, 3};
  r2.slots = {3, 3};
  r2.kv_begin = {0, 0};
  r2.cache_rows = {1, 1};
  refused(mapped, r2, "two step rows write slot 3 of cache row 1");
  r2.slots = {3, 4};  // one cache row, two slots: a token and its draft (Capabilities::shared_cache_rows)
  mapped.run(r2, *cache, logits);
  r2.slots = {3, 3};
  r2.cache_rows = {3, 1};
  mapped.run(r2, *cache, logits);

  // In-step sampling inputs.
  const Executable& sampled = m.exe(step_key(Phase::Prefill, 1, 3, len, rows, Sampling::Sample));
  StepInputs s = good;
  s.seen_from = {0};
  s.sample_params.assign(graph::kSampleParams, 0);
  std::vector<int32_t> tokens;
  sampled.run_tokens(s, *cache, tokens);
  ASSERT_EQ(tokens.size(), 1u);
  auto refused_tokens = [&](const StepInputs& in, const std::string& needle) {
    expect_error([&] { sampled.run_tokens(in, *cache, tokens); }, needle);
  };
  StepInputs bad = s;
  bad.seen_from = {};
  refused_tokens(bad, "StepInputs::seen_from has 0 values, expected 1");
  bad = s;
  bad.seen_from = {4};
  refused_tokens(bad, "seen_from[0] = 4 is outside [0, 3]");
  bad = s;
  bad.sample_params.pop_back();
  refused_tokens(bad,
                 "StepInputs::sample_params has " + std::to_string(graph::kSampleParams - 1) + " values");
  expect_error([&] { sampled.run(s, *cache, logits); }, "use run_tokens()");
  // Caches: sizes, and copies between caches that do not match.
  expect_error([&] { m.cache(0, len); }, "rows 0");
  expect_error([&] { m.be->copy_cache(*cache, *small); },
               "cpu copy_cache: from 2 layers x 4 rows x 16 slots into 2 layers x 2 rows");
  expect_error([&] { m.be->copy_cache(*cache, *short_cache); }, "at least as many slots");
  expect_error([&] { prefill.run_tokens(good, *cache, tokens); },
               "run_tokens() needs a graph with in-step sampling");
}

}  // namespace
