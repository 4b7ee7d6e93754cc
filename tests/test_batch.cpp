// The step API (include/tessera/batch.h): rows that join a running SlotBatch at different times give, each,
// what the request gives alone through generate() (greedy ids) and the same float32 logits as the request
// alone in a batch of one slot; a staggered workload of mixed prompt lengths compiles its prompt buckets and
// one decode program; callbacks stop rows (generate() and SlotBatch); bad step-API inputs are clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "golden_util.h"
#include "pjrt_test_util.h"
#include "tessera/batch.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
namespace golden = tessera::golden;
namespace fs = std::filesystem;

namespace {

CausalLM load(const std::string& name, const std::string& device, const std::string& buckets = "auto") {
  LoadOptions opt;
  opt.dtype = DType::F32;
  opt.device_map = device;
  opt.buckets = buckets;
  return AutoModelForCausalLM::from_pretrained(golden::model_path(name), opt);
}

std::vector<int32_t> prompt(int len, int salt) {
  std::vector<int32_t> ids(static_cast<size_t>(len));
  for (int i = 0; i < len; ++i) ids[static_cast<size_t>(i)] = 3 + (i * 37 + salt * 101) % 1000;
  return ids;
}

GenerationConfig greedy(int n) {
  GenerationConfig g;
  g.max_new_tokens = n;
  return g;  // no eos: every request runs its whole budget
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

struct Request {
  int arrival;  // the batch step before which it joins (when a slot is free)
  int len, new_tokens, salt;
};

struct Served {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // per token (keep_logits)
  int slot = -1;
};

// Runs `requests` through `batch`: each joins at its arrival step (or as soon as a slot frees), finished
// slots are released at once. Returns what each request got.
std::vector<Served> serve(SlotBatch& batch, const std::vector<Request>& requests, bool logits) {
  std::vector<Served> out(requests.size());
  std::vector<int> owner(static_cast<size_t>(batch.slots()), -1);  // request in each slot
  size_t next = 0;
  for (int step = 0; next < requests.size() || batch.running_count() > 0; ++step) {
    while (next < requests.size() && requests[next].arrival <= step && batch.free_slot() >= 0) {
      const Request& r = requests[next];
      const int slot = batch.free_slot();
      batch.prefill(slot, prompt(r.len, r.salt), greedy(r.new_tokens));
      owner[static_cast<size_t>(slot)] = static_cast<int>(next);
      out[next].slot = slot;
      if (logits) out[next].logits.push_back(batch.last_logits(slot));
      ++next;
    }
    for (const SlotToken& t : batch.step())
      if (logits)
        out[static_cast<size_t>(owner[static_cast<size_t>(t.slot)])].logits.push_back(
            batch.last_logits(t.slot));
    for (int s = 0; s < batch.slots(); ++s) {
      if (!batch.busy(s) || batch.running(s)) continue;
      out[static_cast<size_t>(owner[static_cast<size_t>(s)])].tokens = batch.tokens(s);
      batch.release(s);
      owner[static_cast<size_t>(s)] = -1;
    }
  }
  return out;
}

// Five requests of different lengths (within the first pow2 bucket) and budgets, joining a 3-slot batch at
// different steps (some wait for a slot to free). `one_budget` (xla-cpu, where each compile takes seconds):
// every request has the same budget, so generate() alone compiles one prefill and one decode for them all.
std::vector<Request> staggered(bool one_budget) {
  std::vector<Request> r = {{0, 5, 12, 1}, {0, 9, 6, 2}, {3, 3, 10, 3}, {4, 14, 8, 4}, {5, 7, 9, 5}};
  if (one_budget)
    for (Request& q : r) q.new_tokens = 9;
  return r;
}

void expect_each_equals_alone(CausalLM& m, const std::string& device, bool host_sampling,
                              SlotBatchOptions::DecodeRows rows = SlotBatchOptions::DecodeRows::All) {
  const std::vector<Request> reqs = staggered(device != "cpu");
  SlotBatch batch(m, 3, 40,
                  {.host_sampling = host_sampling, .keep_logits = host_sampling, .decode_rows = rows});
  EXPECT_EQ(batch.device_sampling(), !host_sampling && device != "cpu");
  const std::vector<Served> got = serve(batch, reqs, host_sampling);
  EXPECT_GE(batch.steps(), 14);
  std::set<int> slots_used;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Request& r = reqs[i];
    slots_used.insert(got[i].slot);
    const auto alone = m.generate({prompt(r.len, r.salt)}, {}, greedy(r.new_tokens)).sequences[0];
    const std::vector<int32_t> want(alone.begin() + r.len, alone.end());
    EXPECT_EQ(got[i].tokens, want) << device << " request " << i << " in slot " << got[i].slot;
    if (!host_sampling) continue;
    // The same request alone in a batch of one slot: the same float32 logits for every token.
    SlotBatch one(m, 1, 40, {.host_sampling = true, .keep_logits = true});
    const std::vector<Served> solo = serve(one, {{0, r.len, r.new_tokens, r.salt}}, true);
    ASSERT_EQ(solo[0].tokens, want) << device << " request " << i;
    ASSERT_EQ(got[i].logits.size(), solo[0].logits.size());
    float worst = 0;
    for (size_t t = 0; t < solo[0].logits.size(); ++t) {
      ASSERT_EQ(got[i].logits[t].size(), solo[0].logits[t].size());
      for (size_t v = 0; v < solo[0].logits[t].size(); ++v)
        worst = std::max(worst, std::fabs(got[i].logits[t][v] - solo[0].logits[t][v]));
    }
    // The native backend's kernels are batch-invariant: bit-equal. XLA's CPU dot emitter reduces a 3-row and
    // a 1-row matmul in different orders, which on AVX-512 machines reaches 1.0014e-05 on these logits
    // (|logit| up to ~10, a few ulps); its bound is 2e-5.
    EXPECT_LE(worst, device == "cpu" ? 0.0f : 2e-5f) << device << " request " << i;
  }
  EXPECT_EQ(slots_used.size(), 3u) << "every slot served a request";
}

TEST(SlotBatchJoin, RowsJoiningAtDifferentTimesEachEqualTheRequestAloneOnCpu) {
  CausalLM m = load("llama_gqa", "cpu");
  expect_each_equals_alone(m, "cpu", true);
}

// Decode steps over the running slots only (row-mapped into the cache, a program per count of running slots):
// the same tokens and logits as alone.
TEST(SlotBatchJoin, RunningRowsOnlyDecodeEachEqualsTheRequestAloneOnCpu) {
  CausalLM m = load("llama_gqa", "cpu");
  expect_each_equals_alone(m, "cpu", true, SlotBatchOptions::DecodeRows::Running);
  expect_each_equals_alone(m, "cpu", true, SlotBatchOptions::DecodeRows::Auto);  // cpu: Running
}

// Mixtures of experts: a decode row's experts run on its own rows (matmul_rows), so each request's logits are
// bit-equal to its run alone, whichever experts its neighbours chose.
TEST(SlotBatchJoin, MixtureOfExpertsEachEqualsTheRequestAloneOnCpu) {
  for (const char* name : {"qwen3_moe", "mixtral"}) {
    CausalLM m = load(name, "cpu");
    expect_each_equals_alone(m, "cpu", true);
    expect_each_equals_alone(m, "cpu", true, SlotBatchOptions::DecodeRows::Running);
  }
}

TEST(SlotBatchJoin, RunningRowsOnlyDecodeEachEqualsTheRequestAloneOnXlaCpu) {
  REQUIRE_XLA_CPU();
  CausalLM m = load("llama_gqa", "xla-cpu");
  expect_each_equals_alone(m, "xla-cpu", false, SlotBatchOptions::DecodeRows::Running);
}

TEST(SlotBatchJoin, RowsJoiningAtDifferentTimesEachEqualTheRequestAloneOnXlaCpu) {
  REQUIRE_XLA_CPU();
  CausalLM m = load("llama_gqa", "xla-cpu");
  expect_each_equals_alone(m, "xla-cpu", false);  // sampled in the step: ids only cross back
  expect_each_equals_alone(m, "xla-cpu", true);   // logits back, sampled on the host
}

// Sampled: temperature 1, no top-k or top-p, every token possible, the draws keyed by `seed`.
GenerationConfig seeded(int n, uint64_t seed) {
  GenerationConfig g = greedy(n);
  g.do_sample = true;
  g.temperature = 1.0f;
  g.top_k = 0;
  g.seed = seed;
  return g;
}

// A seeded sampled request gives the same tokens in slot 0 of an empty batch, in slot 2 or 1 joining after
// other sampled and greedy requests have run a few steps, and through generate() as a one-prompt call: its
// draws are keyed by its seed and its own token index, not by its slot or step row. (Keyed by the slot, as
// before, slots 1 and 2 drew other numbers.) A generate() batch of two copies of the prompt with that seed
// gives row 0 the same tokens and row 1 others (sampling::row_seed).
void expect_seeded_request_equal_in_any_slot(const std::string& device, bool host_sampling,
                                             SlotBatchOptions::DecodeRows rows) {
  const std::string what = device + (host_sampling ? " host sampling" : " in-step sampling");
  CausalLM m = load("llama_gqa", device);
  const std::vector<int32_t> p = prompt(6, 7);
  const GenerationConfig g = seeded(9, 7);
  const auto alone = m.generate({p}, {}, g).sequences[0];
  const std::vector<int32_t> want(alone.begin() + 6, alone.end());
  auto run = [&](int slot, bool neighbours) {
    SlotBatch batch(m, 3, 40, {.host_sampling = host_sampling, .decode_rows = rows});
    EXPECT_EQ(batch.device_sampling(), !host_sampling && device != "cpu") << what;
    if (neighbours) {
      for (int s = 0; s < 3; ++s)
        if (s != slot) batch.prefill(s, prompt(4 + s, s), s == 0 ? greedy(16) : seeded(16, 100 + s));
      batch.step();
      batch.step();
    }
    batch.prefill(slot, p, g);
    while (batch.running(slot)) batch.step();
    for (int s = 0; neighbours && s < 3; ++s)
      EXPECT_TRUE(s == slot || batch.running(s)) << what << ": slot " << s;
    return batch.tokens(slot);
  };
  EXPECT_EQ(run(0, false), want) << what << ": slot 0, alone";
  EXPECT_EQ(run(2, true), want) << what << ": slot 2, beside two others";
  EXPECT_EQ(run(1, true), want) << what << ": slot 1, beside two others";
  // It sampled (not its greedy tokens), and another seed draws other tokens.
  const auto greedy_ids = m.generate({p}, {}, greedy(9)).sequences[0];
  EXPECT_NE(std::vector<int32_t>(greedy_ids.begin() + 6, greedy_ids.end()), want) << what;
  const auto other = m.generate({p}, {}, seeded(9, 8)).sequences[0];
  EXPECT_NE(std::vector<int32_t>(other.begin() + 6, other.end()), want) << what;
  const auto pair = m.generate({p, p}, {}, g).sequences;
  EXPECT_EQ(std::vector<int32_t>(pair[0].begin() + 6, pair[0].end()), want) << what << ": generate() row 0";
  EXPECT_NE(pair[1], pair[0]) << what << ": generate() row 1 draws with a seed of its own";
}

TEST(SlotBatchSeeded, ASeededRequestGivesTheSameTokensInAnySlotOnCpu) {
  expect_seeded_request_equal_in_any_slot("cpu", true, SlotBatchOptions::DecodeRows::All);
  expect_seeded_request_equal_in_any_slot("cpu", true, SlotBatchOptions::DecodeRows::Running);
}

TEST(SlotBatchSeeded, ASeededRequestGivesTheSameTokensInAnySlotOnXlaCpu) {
  REQUIRE_XLA_CPU();
  expect_seeded_request_equal_in_any_slot("xla-cpu", false, SlotBatchOptions::DecodeRows::All);
  expect_seeded_request_equal_in_any_slot("xla-cpu", false, SlotBatchOptions::DecodeRows::Running);
  expect_seeded_request_equal_in_any_slot("xla-cpu", true, SlotBatchOptions::DecodeRows::All);
}

// 20 requests of mixed prompt lengths arriving over time: one prefill program per prompt bucket used and one
// decode program, whatever the arrival order.
void expect_buckets_plus_one_decode(const std::string& device, const std::string& buckets) {
  CausalLM m = load("qwen3_tied", device, buckets);
  const std::vector<int> lengths = {3, 60, 17, 5, 31, 64, 33, 9, 12, 47, 16, 2, 40, 20, 63, 8, 29, 50, 1, 36};
  std::vector<Request> reqs;
  for (size_t i = 0; i < lengths.size(); ++i)
    reqs.push_back({static_cast<int>(i) * 2, lengths[i], 3 + static_cast<int>(i % 5), static_cast<int>(i)});
  std::set<int> used;
  for (int len : lengths) used.insert(m.prompt_bucket(len));
  const CompileReport before = m.compile_stats();
  SlotBatch batch(m, 4, 72);
  const std::vector<Served> got = serve(batch, reqs, false);
  const CompileReport after = m.compile_stats();
  for (size_t i = 0; i < reqs.size(); ++i)
    EXPECT_EQ(got[i].tokens.size(), static_cast<size_t>(reqs[i].new_tokens)) << i;
  const int compiled = after.compiles + after.disk_hits - before.compiles - before.disk_hits;
  EXPECT_EQ(compiled, static_cast<int>(used.size()) + 1) << device;
  int prefills = 0, decodes = 0;
  for (size_t k = before.keys.size(); k < after.keys.size(); ++k) {
    prefills += after.keys[k].find("prefill") != std::string::npos;
    decodes += after.keys[k].find("decode") != std::string::npos;
    std::printf("[ compiles ] %s %s\n", device.c_str(), after.keys[k].c_str());
  }
  EXPECT_EQ(prefills, static_cast<int>(used.size()));
  EXPECT_EQ(decodes, 1);
  std::printf("[ compiles ] %s: %zu requests, %d steps, %zu buckets used + 1 decode = %d compiles (%.2f s)\n",
              device.c_str(), reqs.size(), batch.steps(), used.size(), compiled,
              after.compile_seconds - before.compile_seconds);
}

TEST(SlotBatchCompiles, StaggeredMixedWorkloadCompilesBucketsPlusOneDecodeOnCpu) {
  expect_buckets_plus_one_decode("cpu", "16,32,64");
}

// warmup() makes every bucket's prefill and the decode ahead; the staggered workload then compiles nothing,
// and the armed guard (max_recompiles 0) stays quiet. warmup() returns `programs` made ahead (and 0 a second
// time); the workload then compiles nothing under the armed guard (max_recompiles 0), and another shape is
// refused.
void expect_warmup_makes_every_program(SlotBatchOptions::DecodeRows rows, int programs, const char* what) {
  LoadOptions opt;
  opt.dtype = DType::F32;
  opt.buckets = "16,32,64";
  opt.max_recompiles = 0;
  CausalLM m = AutoModelForCausalLM::from_pretrained(golden::model_path("qwen3_tied"), opt);
  SlotBatch batch(m, 4, 72, {.decode_rows = rows});
  EXPECT_EQ(batch.warmup(), programs) << what;
  EXPECT_EQ(batch.warmup(), 0);
  std::vector<Request> reqs;
  for (int i = 0; i < 8; ++i) reqs.push_back({i, 3 + 8 * i, 4, i});
  const CompileReport before = m.compile_stats();
  EXPECT_NO_THROW(serve(batch, reqs, false));
  EXPECT_EQ(m.compile_stats().compiles, before.compiles);
  SlotBatch other(m, 2, 72);
  EXPECT_THROW(other.prefill(0, prompt(5, 1), greedy(3)), Error) << "a new shape after warmup: the guard";
}

TEST(SlotBatchCompiles, WarmupMakesEveryProgramAhead) {
  expect_warmup_makes_every_program(SlotBatchOptions::DecodeRows::All, 4, "3 buckets + decode");
}

TEST(SlotBatchCompiles, RunningRowsOnlyWarmupMakesADecodePerRunningCount) {
  expect_warmup_makes_every_program(SlotBatchOptions::DecodeRows::Running, 7,
                                    "3 buckets + decodes of 1..4 running slots");
}

TEST(SlotBatchCompiles, StaggeredMixedWorkloadCompilesBucketsPlusOneDecodeOnXlaCpu) {
  REQUIRE_XLA_CPU();
  expect_buckets_plus_one_decode("xla-cpu", "auto");
}

// A callback returning false stops its row after that token; the other rows go on. Callbacks returning void
// (a lambda, a std::function, nullptr) still compile and never stop a row.
TEST(StopCallback, GenerateStopsOneRowAndKeepsTheOthers) {
  CausalLM m = load("llama_gqa", "cpu");
  const std::vector<std::vector<int32_t>> ids = {prompt(6, 1), prompt(6, 2)};
  const GenerateOutput full = m.generate(ids, {}, greedy(10));
  int seen0 = 0;
  const GenerateOutput out =
      m.generate(ids, {}, greedy(10), [&](int row, int32_t) { return row != 0 || ++seen0 < 3; });
  EXPECT_EQ(seen0, 3) << "row 0 is not called after it stopped";
  const int32_t pad = *m.generation_config().effective_pad_token_id();
  for (size_t i = 0; i < 16; ++i) {
    const bool kept = i < 6 + 3;
    EXPECT_EQ(out.sequences[0][i], kept ? full.sequences[0][i] : pad) << i;
  }
  EXPECT_EQ(out.sequences[1], full.sequences[1]);
  ASSERT_EQ(out.finish_reasons.size(), 2u);
  EXPECT_EQ(out.finish_reasons[0], FinishReason::Stopped);
  EXPECT_EQ(out.finish_reasons[1], FinishReason::Length);
  EXPECT_EQ(out.new_tokens, 10);

  // Every row stopped: generation ends at once.
  const GenerateOutput none = m.generate(ids, {}, greedy(10), [](int, int32_t) { return false; });
  EXPECT_EQ(none.new_tokens, 1);
  EXPECT_EQ(none.decode_steps, 0);

  // The void forms: no stop.
  int calls = 0;
  std::function<void(int, int32_t)> counter = [&](int, int32_t) { ++calls; };
  EXPECT_EQ(m.generate(ids, {}, greedy(10), counter).sequences, full.sequences);
  EXPECT_EQ(calls, 20);
  EXPECT_EQ(m.generate(ids, {}, greedy(10), [&](int, int32_t) { ++calls; }).sequences, full.sequences);
  EXPECT_EQ(calls, 40);
  EXPECT_EQ(m.generate(ids, {}, greedy(10), nullptr).sequences, full.sequences);
  EXPECT_EQ(m.generate(ids, {}, greedy(10), std::function<void(int, int32_t)>()).sequences, full.sequences);
}

TEST(StopCallback, SlotBatchCallbackStopsItsSlot) {
  CausalLM m = load("llama_gqa", "cpu");
  SlotBatch batch(m, 2, 32);
  std::vector<int32_t> streamed;
  batch.prefill(0, prompt(5, 1), greedy(12), [&](int slot, int32_t tok) {
    EXPECT_EQ(slot, 0);
    streamed.push_back(tok);
    return streamed.size() < 4;
  });
  batch.prefill(1, prompt(5, 2), greedy(6));
  while (batch.running_count() > 0) batch.step();
  EXPECT_EQ(batch.state(0).finish, FinishReason::Stopped);
  EXPECT_EQ(batch.tokens(0), streamed);
  ASSERT_EQ(batch.tokens(0).size(), 4u);
  const auto alone = m.generate({prompt(5, 1)}, {}, greedy(4)).sequences[0];
  EXPECT_EQ(batch.tokens(0), std::vector<int32_t>(alone.begin() + 5, alone.end()));
  EXPECT_EQ(batch.state(1).finish, FinishReason::Length);
  EXPECT_EQ(batch.tokens(1).size(), 6u);
}

TEST(SlotBatchEos, AnEosEndsTheSlot) {
  CausalLM m = load("llama_gqa", "cpu");
  const std::vector<int32_t> p = prompt(7, 3);
  const auto alone = m.generate({p}, {}, greedy(8)).sequences[0];
  GenerationConfig g = greedy(8);
  g.eos_token_id = {alone[7 + 2]};  // the third new token
  SlotBatch batch(m, 1, 32);
  batch.prefill(0, p, g);
  int steps = 0;
  while (batch.running(0)) steps += !batch.step().empty();
  EXPECT_EQ(batch.state(0).finish, FinishReason::Eos);
  EXPECT_EQ(batch.tokens(0), std::vector<int32_t>(alone.begin() + 7, alone.begin() + 10));
  EXPECT_EQ(steps, 2);
  EXPECT_TRUE(batch.step().empty()) << "nothing runs";
}

TEST(SlotBatchErrors, BadInputsGiveClearErrors) {
  CausalLM m = load("qwen3_tied", "cpu", "16,32");
  EXPECT_NE(error_of([&] { SlotBatch(m, 0, 32); }).find("slots must be in 1..4096, got 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { SlotBatch(m, 2, 0); }).find("cache_len must be in 1..256"), std::string::npos);
  EXPECT_NE(error_of([&] { SlotBatch(m, 2, 300); }).find("got 300"), std::string::npos);
  SlotBatch b(m, 2, 40);
  EXPECT_EQ(error_of([&] { b.prefill(2, prompt(3, 1), greedy(4)); }),
            "SlotBatch::prefill: slot 2 is out of range (the batch has 2 slots: 0..1)");
  EXPECT_NE(error_of([&] { b.prefill(-1, prompt(3, 1), greedy(4)); }).find("slot -1 is out of range"),
            std::string::npos);
  b.prefill(0, prompt(3, 1), greedy(4));
  EXPECT_EQ(error_of([&] { b.prefill(0, prompt(3, 1), greedy(4)); }),
            "SlotBatch::prefill: slot 0 is busy (running; release(0) frees it)");
  // Bucket 32 + 12 new tokens need 43 cache positions.
  EXPECT_EQ(
      error_of([&] { b.prefill(1, prompt(20, 1), greedy(12)); }),
      "SlotBatch::prefill: slot 1: a prompt of 20 tokens (prefill bucket 32) and 12 new tokens need 43 cache "
      "positions; the batch has cache_len 40");
  EXPECT_NE(error_of([&] { b.prefill(1, prompt(200, 1), greedy(12)); }).find("need 211 cache positions"),
            std::string::npos)
      << "longer than the largest bucket: its exact length";
  EXPECT_EQ(error_of([&] { b.prefill(1, {}, greedy(4)); }), "SlotBatch::prefill: slot 1: empty prompt");
  EXPECT_EQ(error_of([&] {
              b.prefill(1, {5, 1024}, greedy(4));
            }),
            "SlotBatch::prefill: slot 1: prompt id 1024 (index 1) is out of range for vocab size 1024");
  GenerationConfig bad = greedy(4);
  bad.top_p = 0;
  EXPECT_NE(error_of([&] { b.prefill(1, prompt(3, 1), bad); }).find("top_p"), std::string::npos);
  bad = greedy(4);
  bad.disable_compile = true;
  EXPECT_NE(error_of([&] { b.prefill(1, prompt(3, 1), bad); }).find("disable_compile"), std::string::npos);
  EXPECT_NE(
      error_of([&] { b.prefill(1, prompt(3, 1), greedy(300)); }).find("exceeds max_position_embeddings"),
      std::string::npos);
  EXPECT_FALSE(b.busy(1)) << "a refused prefill leaves the slot free";
  EXPECT_EQ(error_of([&] { b.release(1); }), "SlotBatch::release: slot 1 is not busy (it is free already)");
  b.release(0);  // cancels the running sequence
  EXPECT_EQ(error_of([&] { b.release(0); }), "SlotBatch::release: slot 0 is not busy (it is free already)");
  EXPECT_EQ(error_of([&] { b.release(7); }),
            "SlotBatch::release: slot 7 is out of range (the batch has 2 slots: 0..1)");
  EXPECT_NE(error_of([&] { b.state(5); }).find("slot 5 is out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { b.last_logits(0); }).find("keep_logits"), std::string::npos);
  EXPECT_EQ(error_of([&] { b.follow(); }),
            "SlotBatch::follow: the model is not tensor-parallel over MPI (nothing to follow)");
  b.stop_followers();  // nobody follows: nothing to do
  EXPECT_EQ(b.free_slot(), 0);
  EXPECT_TRUE(b.step().empty());
}

// A long prompt prefilled in chunks (one chunk per step) while another slot decodes: the decoding slot gets a
// token every step, the chunked one its first token in the step of its last chunk, and both equal their
// requests alone. Every chunked prompt, whatever its length, runs the one chunk program.
void expect_chunked_equals_alone(const std::string& device) {
  CausalLM m = load("llama_gqa", device);
  const bool host = device == "cpu";
  SlotBatch batch(m, 3, 80, {.keep_logits = host});
  const std::vector<int32_t> a = prompt(6, 1), c = prompt(45, 2), d = prompt(20, 3);
  batch.prefill(0, a, greedy(20));
  const CompileReport before = m.compile_stats();
  batch.prefill_chunked(1, c, greedy(8), 16);  // 45 tokens: 3 chunks (padded to 48)
  EXPECT_TRUE(batch.state(1).prefilling);
  EXPECT_TRUE(batch.running(1));
  for (int i = 0; i < 3; ++i) {
    const std::vector<SlotToken> t = batch.step();
    ASSERT_FALSE(t.empty());
    EXPECT_EQ(t[0].slot, 0) << "the decoding slot is not stalled by the chunks (step " << i << ")";
    EXPECT_EQ(t.size(), i < 2 ? 1u : 2u) << i;
  }
  EXPECT_FALSE(batch.state(1).prefilling);
  EXPECT_EQ(batch.state(1).prefill_len, 48);
  std::vector<float> chunked_first;
  if (host) chunked_first = batch.last_logits(1);
  while (batch.running(1)) batch.step();
  const CompileReport mid = m.compile_stats();
  batch.prefill_chunked(2, d, greedy(5), 16);  // 20 tokens: 2 chunks of the same program
  while (batch.running_count() > 0) batch.step();
  const CompileReport after = m.compile_stats();
  EXPECT_EQ(after.compiles + after.disk_hits, mid.compiles + mid.disk_hits)
      << "no new program for another length";
  // The chunk program (batch 1, seq 16) and the decode; on a device that pads prompts to pow2 buckets the
  // first prompt's prefill (bucket 16) was that program already.
  EXPECT_EQ(mid.compiles + mid.disk_hits - before.compiles - before.disk_hits,
            m.prompt_bucket(6) == 16 ? 1 : 2)
      << "the chunk program + decode";
  for (const auto& [slot, p, n] : {std::tuple{0, a, 20}, std::tuple{1, c, 8}, std::tuple{2, d, 5}}) {
    const auto alone = m.generate({p}, {}, greedy(n)).sequences[0];
    EXPECT_EQ(batch.tokens(slot),
              std::vector<int32_t>(alone.begin() + static_cast<long>(p.size()), alone.end()))
        << device << " slot " << slot;
  }
  if (!host) return;
  SlotBatch one(m, 1, 80, {.keep_logits = true});
  one.prefill(0, c, greedy(8));
  float worst = 0;
  for (size_t v = 0; v < chunked_first.size(); ++v)
    worst = std::max(worst, std::fabs(chunked_first[v] - one.last_logits(0)[v]));
  EXPECT_LE(worst, 1e-5f) << "the first token's logits: chunked against one prefill";
}

// Prefix reuse: the second turn of a chat (the first turn's prompt and answer, then more) prefills only what
// the slot does not hold, and its tokens equal the request alone.
void expect_prefix_reuse_equals_alone(const std::string& device) {
  CausalLM m = load("llama_gqa", device);
  const bool host = device == "cpu";
  SlotBatch batch(m, 2, 96, {.keep_logits = host, .prefix_reuse = true});
  const std::vector<int32_t> first = prompt(21, 1);
  batch.prefill(0, first, greedy(6));
  batch.prefill(1, prompt(9, 4), greedy(12));  // company in the batch
  while (batch.running(0)) batch.step();
  std::vector<int32_t> second = first;
  second.insert(second.end(), batch.tokens(0).begin(), batch.tokens(0).end());
  const std::vector<int32_t> more = prompt(7, 5);
  second.insert(second.end(), more.begin(), more.end());
  batch.release(0);
  // The slot holds the first prompt and 5 of its 6 new tokens (the last was never fed back).
  EXPECT_EQ(batch.kept_tokens(0), 21 + 5);
  const int reuse = batch.reusable(0, second, greedy(8));
  const int rest = static_cast<int>(second.size()) - (21 + 5);
  EXPECT_EQ(reuse, static_cast<int>(second.size()) - m.prompt_bucket(rest)) << device;
  EXPECT_EQ(batch.reusable(0, prompt(30, 9), greedy(8)), 0) << "another prompt: nothing in common";
  EXPECT_EQ(batch.reusable(1, second, greedy(8)), 0) << "a busy slot holds nothing to reuse";
  batch.prefill(0, second, greedy(8));
  EXPECT_EQ(batch.reused_tokens(), reuse);
  std::vector<float> reused_first;
  if (host) reused_first = batch.last_logits(0);
  while (batch.running_count() > 0) batch.step();
  const auto alone = m.generate({second}, {}, greedy(8)).sequences[0];
  EXPECT_EQ(batch.tokens(0),
            std::vector<int32_t>(alone.begin() + static_cast<long>(second.size()), alone.end()))
      << device;
  // A prompt that parts from the kept tokens midway reuses the common part only (exact lengths on cpu).
  batch.release(0);
  std::vector<int32_t> parted(second.begin(), second.begin() + 15);
  parted.push_back(second[15] == 3 ? 4 : 3);
  parted.insert(parted.end(), more.begin(), more.end());
  if (!host) return;
  EXPECT_EQ(batch.reusable(0, parted, greedy(4)), 15);
  SlotBatch one(m, 1, 96, {.keep_logits = true});
  one.prefill(0, second, greedy(8));
  float worst = 0;
  for (size_t v = 0; v < reused_first.size(); ++v)
    worst = std::max(worst, std::fabs(reused_first[v] - one.last_logits(0)[v]));
  EXPECT_LE(worst, 1e-5f) << "the first token's logits: reused prefix against one prefill";
}

TEST(SlotBatchPrefixReuse, TheNextTurnPrefillsOnlyTheRestAndEqualsAloneOnCpu) {
  expect_prefix_reuse_equals_alone("cpu");
}

TEST(SlotBatchPrefixReuse, TheNextTurnPrefillsOnlyTheRestAndEqualsAloneOnXlaCpu) {
  REQUIRE_XLA_CPU();
  expect_prefix_reuse_equals_alone("xla-cpu");
}

TEST(SlotBatchChunked, ChunkedPromptEqualsAloneAndDoesNotStallTheOthersOnCpu) {
  expect_chunked_equals_alone("cpu");
}

TEST(SlotBatchChunked, ChunkedPromptEqualsAloneAndDoesNotStallTheOthersOnXlaCpu) {
  REQUIRE_XLA_CPU();
  expect_chunked_equals_alone("xla-cpu");
  CausalLM m = load("llama_gqa", "xla-cpu");
  SlotBatch b(m, 2, 64);
  GenerationConfig g = greedy(4);
  g.repetition_penalty = 1.3f;
  EXPECT_NE(error_of([&] {
              b.prefill_chunked(0, prompt(20, 1), g, 16);
            }).find("cannot carry the repetition penalty"),
            std::string::npos);
}

TEST(SlotBatchChunked, BadChunksAreErrors) {
  CausalLM m = load("llama_gqa", "cpu");
  SlotBatch b(m, 2, 40);
  EXPECT_EQ(error_of([&] { b.prefill_chunked(0, prompt(20, 1), greedy(4), 0); }),
            "SlotBatch::prefill_chunked: chunk must be in 1..40 (cache_len), got 0");
  EXPECT_NE(error_of([&] { b.prefill_chunked(0, prompt(20, 1), greedy(4), 41); }).find("got 41"),
            std::string::npos);
  EXPECT_EQ(
      error_of([&] { b.prefill_chunked(0, prompt(30, 1), greedy(10), 16); }),
      "SlotBatch::prefill_chunked: slot 0: a prompt of 30 tokens (in chunks of 16, padded to 32) and 10 new "
      "tokens need 41 cache positions; the batch has cache_len 40");
  b.prefill_chunked(1, prompt(3, 1), greedy(2), 16);
  EXPECT_NE(error_of([&] { b.prefill(1, prompt(3, 1), greedy(2)); }).find("slot 1 is busy"),
            std::string::npos);
}

// A copy of a fixture model with the embedding row of one token id set to NaN (llama_gqa: float16, untied),
// so any sequence that feeds that token gets non-finite logits from then on.
class PoisonedModel {
 public:
  PoisonedModel(const std::string& fixture, int32_t token) {
    dir_ = fs::temp_directory_path() / ("tessera_batch_nan_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::copy(golden::model_path(fixture), dir_, fs::copy_options::recursive);
    std::fstream f(dir_ / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    uint64_t header_len = 0;
    f.read(reinterpret_cast<char*>(&header_len), 8);
    std::string header(header_len, '\0');
    f.read(header.data(), static_cast<std::streamsize>(header_len));
    const auto e = nlohmann::json::parse(header)["model.embed_tokens.weight"];
    EXPECT_EQ(e["dtype"], "F16");
    const uint64_t cols = e["shape"][1], begin = e["data_offsets"][0];
    const uint16_t nan = 0x7e00;
    f.seekp(static_cast<std::streamoff>(8 + header_len + begin + static_cast<uint64_t>(token) * cols * 2));
    for (uint64_t i = 0; i < cols; ++i) f.write(reinterpret_cast<const char*>(&nan), 2);
  }
  ~PoisonedModel() { fs::remove_all(dir_); }
  std::string path() const { return dir_.string(); }

 private:
  fs::path dir_;
};

TEST(SlotBatchErrors, NonFiniteLogitsEndTheSlotAndNameIt) {
  const std::vector<int32_t> p = prompt(4, 7), q = prompt(5, 8);
  std::vector<int32_t> q_alone, p_first;
  {
    CausalLM clean = load("llama_gqa", "cpu");
    p_first = clean.generate({p}, {}, greedy(1)).sequences[0];
    q_alone = clean.generate({q}, {}, greedy(4)).sequences[0];
  }
  const int32_t t = p_first[4];  // p's first new token: poisoned, so the step that feeds it fails
  auto has = [t](const std::vector<int32_t>& v) { return std::find(v.begin(), v.end(), t) != v.end(); };
  ASSERT_FALSE(has(p) || has(q_alone)) << "pick other prompts: " << t;
  PoisonedModel poisoned("llama_gqa", t);
  LoadOptions opt;
  opt.dtype = DType::F32;
  CausalLM m = AutoModelForCausalLM::from_pretrained(poisoned.path(), opt);
  SlotBatch b(m, 2, 32);
  b.prefill(0, q, greedy(4));
  EXPECT_EQ(b.prefill(1, p, greedy(4)), t);
  const std::string e = error_of([&] { b.step(); });
  EXPECT_NE(
      e.find("SlotBatch::step: step 0, slot 1 (its token 1): the model produced a non-finite logit (nan at "
             "vocabulary index 0)"),
      std::string::npos)
      << e;
  EXPECT_EQ(b.state(1).finish, FinishReason::Error);
  EXPECT_FALSE(b.running(1));
  ASSERT_EQ(b.tokens(0).size(), 2u) << "the other slot's token of that step is taken";
  while (b.running(0)) b.step();
  EXPECT_EQ(b.tokens(0), std::vector<int32_t>(q_alone.begin() + 5, q_alone.end()));
  b.release(1);
  const std::string pe = error_of([&] { b.prefill(1, {5, t, 6}, greedy(4)); });
  EXPECT_NE(pe.find("SlotBatch::prefill: slot 1, step 0: the model produced a non-finite logit"),
            std::string::npos)
      << pe;
  EXPECT_FALSE(b.busy(1));
}

}  // namespace
