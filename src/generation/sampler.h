// Logits processors and sampling with Transformers' order and semantics:
// repetition penalty, then (sampling only) temperature, top-k, top-p, min-p,
// softmax and a draw from a counter-based RNG keyed by (seed, step, row), so a
// seeded run repeats exactly and does not depend on batch composition order.
#pragma once
#include <cstdint>
#include <vector>

#include "tessera/generation.h"

namespace tessera::generation {

// Transformers' RepetitionPenaltyLogitsProcessor over every id in `seen` (prompt and output, padding included).
void apply_repetition_penalty(float* logits, int64_t vocab, const std::vector<int32_t>& seen, float penalty);

// Index of the largest logit (first on ties, like torch.argmax).
int32_t argmax(const float* logits, int64_t vocab);

// Temperature, top-k, top-p and min-p warpers in place (filtered entries become -inf).
void apply_warpers(float* logits, int64_t vocab, const GenerationConfig& cfg);

// A uniform in [0, 1) that depends only on (seed, step, row).
double counter_uniform(uint64_t seed, uint64_t step, uint64_t row);

// Draws from softmax(logits) with the uniform `u`.
int32_t sample_from_logits(const float* logits, int64_t vocab, double u);

}  // namespace tessera::generation
