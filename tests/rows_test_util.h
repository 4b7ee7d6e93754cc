// Shared by the per-row step tests of the native cpu backend (tests/test_cpu_rows.cpp) and of the StableHLO
// lowering on xla-cpu (tests/test_pjrt_rows.cpp): requests and what each gives alone, compared with the rows
// of batched steps (f32 logits within 1e-5, the same greedy ids). Header-only; tests only.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "golden_util.h"
#include "step_test_util.h"

namespace tessera::step_test {

inline constexpr double kRowsTol = 1e-5;

// A request fed teacher-forced: the prompt is tokens[0, prompt); decode step j feeds tokens[prompt + j].
struct Request {
  std::vector<int32_t> tokens;
  int prompt = 0;
  int steps() const { return static_cast<int>(tokens.size()) - prompt; }  // decode steps after the prefill
  std::span<const int32_t> prompt_ids() const { return {tokens.data(), static_cast<size_t>(prompt)}; }
};

inline Request random_request(std::mt19937& rng, int64_t vocab, int prompt, int steps) {
  std::uniform_int_distribution<int32_t> id(1, static_cast<int32_t>(vocab) - 1);
  Request r;
  r.prompt = prompt;
  for (int i = 0; i < prompt + steps; ++i) r.tokens.push_back(id(rng));
  return r;
}

// `r` alone in a 1-row cache from slot 0, with its exact prompt length: logits [0] after the prefill, [j + 1]
// after decode step j.
template <class B>
std::vector<std::vector<float>> alone(StepModel<B>& m, const Request& r, int len) {
  auto cache = m.cache(1, len);
  std::vector<std::vector<float>> out(1);
  StepInputs in = prefill_inputs(r.prompt_ids());
  m.exe(step_key(Phase::Prefill, 1, r.prompt, len)).run(in, *cache, out[0]);
  for (int j = 0; j < r.steps(); ++j) {
    in.ids = {r.tokens[static_cast<size_t>(r.prompt + j)]};
    in.positions = {r.prompt + j};
    in.slots = {r.prompt + j};
    out.emplace_back();
    m.exe(step_key(Phase::Decode, 1, 1, len)).run(in, *cache, out.back());
  }
  return out;
}

// Tokens of `prompt` alone with in-step sampling by `p` (program kind `kind`): [0] from the prefill, then one
// per decode step, `new_tokens` in all. In a `rows`-row cache at cache row `row` (row-mapped steps) or, rows
// == 1, a plain 1-row cache.
template <class B>
std::vector<int32_t> sampled_alone(StepModel<B>& m, std::span<const int32_t> prompt, int new_tokens,
                                   const SamplingParams& p, Sampling kind, int len, int rows = 1,
                                   int row = 0) {
  auto cache = m.cache(rows, len);
  const int mapped = rows > 1 ? rows : 0;
  const int n = static_cast<int>(prompt.size());
  StepInputs in = sampled_prefill_inputs(prompt, p);
  if (mapped) in.cache_rows = {row};
  std::vector<int32_t> out, tok;
  m.exe(step_key(Phase::Prefill, 1, n, len, mapped, kind)).run_tokens(in, *cache, tok);
  out.push_back(tok.at(0));
  in.seen_from.clear();
  for (int j = 1; j < new_tokens; ++j) {
    in.ids = {out.back()};
    in.positions = {n + j - 1};
    in.slots = {n + j - 1};
    in.sample_params.clear();
    p.append_encoded(j, in.sample_params);
    m.exe(step_key(Phase::Decode, 1, 1, len, mapped, kind)).run_tokens(in, *cache, tok);
    out.push_back(tok.at(0));
  }
  return out;
}

// Row `b` of [batch, vocab] logits.
inline std::span<const float> row(const std::vector<float>& logits, int64_t b, int64_t vocab) {
  return {logits.data() + b * vocab, static_cast<size_t>(vocab)};
}

inline int64_t argmax(std::span<const float> x) { return std::max_element(x.begin(), x.end()) - x.begin(); }

inline void expect_close(std::span<const float> got, std::span<const float> want, const std::string& what) {
  const auto d = golden::max_abs_diff(got, want);
  EXPECT_LE(d.max_abs, kRowsTol) << what << ": logit " << d.index;
  EXPECT_EQ(argmax(got), argmax(want)) << what;
}

// One batched prefill over rows whose prompts (of the lengths in `prompts`) are left-padded to `seq` columns,
// row b's sequence starting at cache slot offsets[b] (per-row slots), then `steps` decode steps over the same
// rows: every row's logits equal its request alone. `pad_position`: the position fed at pad columns (masked).
struct PerRowSlots {
  int len = 0, seq = 0, steps = 0;
  unsigned seed = 0;
  std::vector<int> prompts, offsets;
  int pad_position = 0;
};

template <class B>
void expect_per_row_slots_equal_alone(StepModel<B>& m, const PerRowSlots& c) {
  std::mt19937 rng(c.seed);
  const int rows = static_cast<int>(c.prompts.size());
  std::vector<Request> reqs;
  std::vector<std::vector<std::vector<float>>> want;
  for (int p : c.prompts) {
    reqs.push_back(random_request(rng, m.vocab(), p, c.steps));
    want.push_back(alone(m, reqs.back(), c.len));
  }
  auto cache = m.cache(rows, c.len);
  StepInputs in;
  for (int b = 0; b < rows; ++b)
    append_prefill_row(in, reqs[static_cast<size_t>(b)].prompt_ids(), c.seq,
                       c.offsets[static_cast<size_t>(b)], c.pad_position);
  std::vector<float> logits;
  m.exe(step_key(Phase::Prefill, rows, c.seq, c.len)).run(in, *cache, logits);
  for (int b = 0; b < rows; ++b)
    expect_close(row(logits, b, m.vocab()), want[static_cast<size_t>(b)][0],
                 "prefill row " + std::to_string(b));
  for (int j = 0; j < c.steps; ++j) {
    in = {};
    for (int b = 0; b < rows; ++b) {
      const Request& r = reqs[static_cast<size_t>(b)];
      const int offset = c.offsets[static_cast<size_t>(b)];
      append_decode_row(in, r.tokens[static_cast<size_t>(r.prompt + j)], r.prompt + j, offset + c.seq + j,
                        offset + c.seq - r.prompt);
    }
    m.exe(step_key(Phase::Decode, rows, 1, c.len)).run(in, *cache, logits);
    for (int b = 0; b < rows; ++b)
      expect_close(row(logits, b, m.vocab()), want[static_cast<size_t>(b)][static_cast<size_t>(j + 1)],
                   "decode step " + std::to_string(j) + " row " + std::to_string(b));
  }
}

}  // namespace tessera::step_test
