// CausalLM::generate: the host loop over one left-padded batch (see generate.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/model_core.h"
#include "tessera/generation.h"

namespace tessera::generation {

GenerateOutput generate(runtime::ModelCore& m, const std::vector<std::vector<int32_t>>& input_ids,
                        const std::vector<std::vector<int32_t>>& attention_mask, const GenerationConfig& cfg,
                        const TokenCallback& on_token);

// Dynamic cache: grows by this many slots.
constexpr int kDynamicChunk = 64;

}  // namespace tessera::generation
