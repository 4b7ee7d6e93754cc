#include "sampling/sampling_params.h"

#include <bit>
#include <random>

namespace tessera::sampling {

SamplingParams SamplingParams::from_config(const GenerationConfig& cfg, uint64_t seed) {
  SamplingParams p;
  p.temperature = cfg.temperature;
  p.top_k = cfg.top_k;
  p.top_p = cfg.top_p;
  p.min_p = cfg.min_p;
  p.repetition_penalty = cfg.repetition_penalty;
  p.seed = seed;
  p.do_sample = cfg.do_sample;
  return p;
}

void SamplingParams::encode(int32_t step, int32_t* r) const {
  r[graph::kTemperature] = std::bit_cast<int32_t>(temperature);
  r[graph::kTopP] = std::bit_cast<int32_t>(top_p);
  r[graph::kMinP] = std::bit_cast<int32_t>(min_p);
  r[graph::kRepetitionPenalty] = std::bit_cast<int32_t>(repetition_penalty);
  r[graph::kTopK] = top_k;
  r[graph::kSeedLo] = static_cast<int32_t>(static_cast<uint32_t>(seed));
  r[graph::kSeedHi] = static_cast<int32_t>(static_cast<uint32_t>(seed >> 32));
  r[graph::kStep] = step;
  r[graph::kDoSample] = do_sample ? 1 : 0;
}

void SamplingParams::append_encoded(int32_t step, std::vector<int32_t>& out) const {
  const size_t at = out.size();
  out.resize(at + graph::kSampleParams);
  encode(step, out.data() + at);
}

SamplingParams SamplingParams::decode(const int32_t* r) {
  SamplingParams p;
  p.temperature = std::bit_cast<float>(r[graph::kTemperature]);
  p.top_p = std::bit_cast<float>(r[graph::kTopP]);
  p.min_p = std::bit_cast<float>(r[graph::kMinP]);
  p.repetition_penalty = std::bit_cast<float>(r[graph::kRepetitionPenalty]);
  p.top_k = r[graph::kTopK];
  p.seed = static_cast<uint32_t>(r[graph::kSeedLo]) | uint64_t{static_cast<uint32_t>(r[graph::kSeedHi])}
                                                          << 32;
  p.do_sample = r[graph::kDoSample] != 0;
  return p;
}

uint64_t fresh_seed() {
  std::random_device rd;
  return rd() ^ (uint64_t{rd()} << 32);
}

}  // namespace tessera::sampling
