// Logits processors and sampling with Transformers' order and semantics:
// repetition penalty, then (sampling only) temperature, top-k, top-p, min-p,
// softmax and a draw from a counter-based RNG keyed by (seed, step) only: the step is the sequence's own
// token index (0: the token chosen from the prefill), never its row or slot, so a seeded sequence draws the
// same numbers alone, in any slot of a SlotBatch, beside any other sequences, on the host and in the compiled
// step. generate() gives the rows of one call distinct draws by giving row b the seed row_seed(seed, b).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampling_params.h"
#include "tessera/generation.h"

namespace tessera::sampling {

// Transformers' RepetitionPenaltyLogitsProcessor over every id in `seen` (prompt and output; the caller
// leaves out a row's left padding, as Transformers 5 does).
void apply_repetition_penalty(float* logits, int64_t vocab, std::span<const int32_t> seen, float penalty);

// Index of the first NaN or infinite value in `logits[0, n)`, or -1 when every value is finite.
int64_t first_non_finite(const float* logits, int64_t n);

// Index of the largest logit (first on ties, like torch.argmax).
int32_t argmax(const float* logits, int64_t vocab);

// Temperature, top-k, top-p and min-p warpers in place (filtered entries become -inf).
void apply_warpers(float* logits, int64_t vocab, const SamplingParams& p);
void apply_warpers(float* logits, int64_t vocab, const GenerationConfig& cfg);

// The token of one sequence whose logits already carry the repetition penalty (the caller applies it, from a
// list of ids or a seen mask): argmax when !p.do_sample, else the warpers (in place) and a draw keyed by
// (p.seed, step), `step` being the sequence's token index. Every host path chooses tokens through this.
int32_t choose_token(float* logits, int64_t vocab, const SamplingParams& p, uint32_t step);

// The counter-based RNG: a 32-bit hash of (seed, step) built from 32-bit integer ops only, so the compiled
// sampling step (PJRT) draws exactly the same numbers.
uint32_t counter_hash(uint64_t seed, uint32_t step);
// A uniform in [0, 1) with 24 bits (exact in float32) that depends only on (seed, step).
double counter_uniform(uint64_t seed, uint64_t step);
// The seed of row `row` of one generate() call seeded `seed`: the seed itself for row 0 (so a one-prompt
// call equals the same request in a SlotBatch), a different one (a Weyl step of 64-bit golden ratio) for each
// other row, so identical prompts in one batch are sampled independently.
uint64_t row_seed(uint64_t seed, uint32_t row);

// The repetition penalty for the ids marked in `seen` ([vocab], non-zero = seen); same result as
// apply_repetition_penalty over the list of those ids.
void apply_repetition_penalty_mask(float* logits, int64_t vocab, const float* seen, float penalty);

// Draws from softmax(logits) with the uniform `u`.
int32_t sample_from_logits(const float* logits, int64_t vocab, double u);

}  // namespace tessera::sampling
