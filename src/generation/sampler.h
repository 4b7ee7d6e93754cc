// Logits processors and sampling with Transformers' order and semantics:
// repetition penalty, then (sampling only) temperature, top-k, top-p, min-p,
// softmax and a draw from a counter-based RNG keyed by (seed, step, row), so a
// seeded run repeats exactly and does not depend on batch composition order.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "generation/sampling_params.h"
#include "tessera/generation.h"

namespace tessera::generation {

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

// The token of one row whose logits already carry the repetition penalty (the caller applies it, from a list
// of ids or a seen mask): argmax when !p.do_sample, else the warpers (in place) and a draw keyed by
// (p.seed, step, row). Every host path and the cpu backend's Op::Sample choose tokens through this.
int32_t choose_token(float* logits, int64_t vocab, const SamplingParams& p, uint32_t step, uint32_t row);

// The counter-based RNG: a 32-bit hash of (seed, step, row) built from 32-bit integer ops only, so the
// compiled sampling step (PJRT) draws exactly the same numbers.
uint32_t counter_hash(uint64_t seed, uint32_t step, uint32_t row);
// A uniform in [0, 1) with 24 bits (exact in float32) that depends only on (seed, step, row).
double counter_uniform(uint64_t seed, uint64_t step, uint64_t row);

// The repetition penalty for the ids marked in `seen` ([vocab], non-zero = seen); same result as
// apply_repetition_penalty over the list of those ids.
void apply_repetition_penalty_mask(float* logits, int64_t vocab, const float* seen, float penalty);

// Draws from softmax(logits) with the uniform `u`.
int32_t sample_from_logits(const float* logits, int64_t vocab, double u);

}  // namespace tessera::generation
