#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tessera::sampling {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// lowbias32 (Chris Wellons' 32-bit mixer): only 32-bit xor, shift and wrapping multiply, so the compiled
// step computes the same bits (src/backends/pjrt/stablehlo_emitter.cpp, sample()).
uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
// softmax into `probs` (float32, as torch does for float32 scores).
void softmax(const float* logits, int64_t n, std::vector<float>& probs) {
  probs.resize(static_cast<size_t>(n));
  float mx = kNegInf;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    float e = logits[i] == kNegInf ? 0.f : std::exp(logits[i] - mx);
    probs[static_cast<size_t>(i)] = e;
    sum += e;
  }
  for (auto& p : probs) p = static_cast<float>(p / sum);
}
}  // namespace

void apply_repetition_penalty(float* logits, int64_t vocab, std::span<const int32_t> seen, float penalty) {
  if (penalty == 1.0f) return;
  // Gather first then scatter, so repeated ids are penalised once (as torch.gather/scatter do).
  std::vector<int32_t> ids;
  ids.reserve(seen.size());
  for (int32_t id : seen)
    if (id >= 0 && id < vocab) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (int32_t id : ids) {
    float& s = logits[id];
    s = s < 0 ? s * penalty : s / penalty;
  }
}

int64_t first_non_finite(const float* logits, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(logits[i])) return i;
  return -1;
}

int32_t argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

void apply_warpers(float* logits, int64_t vocab, const GenerationConfig& cfg) {
  apply_warpers(logits, vocab, SamplingParams::from_config(cfg, 0));
}

int32_t choose_token(float* logits, int64_t vocab, const SamplingParams& p, uint32_t step) {
  if (!p.do_sample) return argmax(logits, vocab);
  apply_warpers(logits, vocab, p);
  return sample_from_logits(logits, vocab, counter_uniform(p.seed, step));
}

void apply_warpers(float* logits, int64_t vocab, const SamplingParams& cfg) {
  if (cfg.temperature != 1.0f)
    for (int64_t i = 0; i < vocab; ++i) logits[i] /= cfg.temperature;

  if (cfg.top_k > 0 && cfg.top_k < vocab) {
    // Keep every logit >= the k-th largest (ties at the threshold survive, as in Transformers).
    std::vector<float> tmp(logits, logits + vocab);
    std::nth_element(tmp.begin(), tmp.begin() + (cfg.top_k - 1), tmp.end(), std::greater<float>());
    float kth = tmp[static_cast<size_t>(cfg.top_k - 1)];
    for (int64_t i = 0; i < vocab; ++i)
      if (logits[i] < kth) logits[i] = kNegInf;
  }

  if (cfg.top_p < 1.0f) {
    // Sort ascending; drop the low tail whose cumulative probability is <= 1 - top_p; keep at least one.
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] < logits[b]; });
    std::vector<float> sorted(static_cast<size_t>(vocab)), probs;
    for (int64_t i = 0; i < vocab; ++i)
      sorted[static_cast<size_t>(i)] = logits[order[static_cast<size_t>(i)]];
    softmax(sorted.data(), vocab, probs);
    float cum = 0;
    for (int64_t i = 0; i < vocab - 1; ++i) {  // the last (largest) is always kept
      cum += probs[static_cast<size_t>(i)];
      if (cum <= 1.0f - cfg.top_p) logits[order[static_cast<size_t>(i)]] = kNegInf;
    }
  }

  if (cfg.min_p > 0.0f) {
    std::vector<float> probs;
    softmax(logits, vocab, probs);
    float top = *std::max_element(probs.begin(), probs.end());
    float threshold = cfg.min_p * top;
    for (int64_t i = 0; i < vocab; ++i)
      if (probs[static_cast<size_t>(i)] < threshold) logits[i] = kNegInf;
  }
}

uint32_t counter_hash(uint64_t seed, uint32_t step) {
  // The first round mixes a constant: what the earlier (seed, step, row) keying mixed for row 0, so a
  // sequence that was row 0 or slot 0 draws what it drew before.
  uint32_t h = mix32(0x9e3779b9u);
  h = mix32(h ^ step);
  h = mix32(h ^ static_cast<uint32_t>(seed));
  return mix32(h ^ static_cast<uint32_t>(seed >> 32));
}

double counter_uniform(uint64_t seed, uint64_t step) {
  // 24 bits: exactly representable in float32, so the device draws the same u.
  return static_cast<double>(counter_hash(seed, static_cast<uint32_t>(step)) >> 8) * 0x1.0p-24;
}

uint64_t row_seed(uint64_t seed, uint32_t row) { return seed + uint64_t{row} * 0x9e3779b97f4a7c15ull; }

void apply_repetition_penalty_mask(float* logits, int64_t vocab, const float* seen, float penalty) {
  if (penalty == 1.0f) return;
  for (int64_t i = 0; i < vocab; ++i) {
    if (seen[i] == 0.0f) continue;
    float& s = logits[i];
    s = s < 0 ? s * penalty : s / penalty;
  }
}

int32_t sample_from_logits(const float* logits, int64_t vocab, double u) {
  std::vector<float> probs;
  softmax(logits, vocab, probs);
  double cum = 0;
  int32_t last_nonzero = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (probs[static_cast<size_t>(i)] <= 0) continue;
    last_nonzero = static_cast<int32_t>(i);
    cum += probs[static_cast<size_t>(i)];
    if (u < cum) return static_cast<int32_t>(i);
  }
  return last_nonzero;  // rounding left u just above the total
}

}  // namespace tessera::sampling
