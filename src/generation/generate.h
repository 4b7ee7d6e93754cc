// CausalLM::generate: the host loop over one left-padded batch (see generate.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/model_core.h"
#include "tessera/generation.h"

namespace tessera::generation {

// Per-row count of leading padding of a 0s-then-1s attention mask (errors name the row).
std::vector<int32_t> left_padding(const std::vector<std::vector<int32_t>>& mask, size_t len);

// generate()'s inputs checked: every row's left padding, the padded length and the new-token budget
// (Transformers' max_length rules); errors name the row or the lengths.
struct Prompts {
  std::vector<int32_t> pads;
  int seq = 0, max_new = 0;
};
Prompts check_prompts(const runtime::ModelCore& m, const std::vector<std::vector<int32_t>>& input_ids,
                      const std::vector<std::vector<int32_t>>& attention_mask, const GenerationConfig& cfg);

GenerateOutput generate(runtime::ModelCore& m, const std::vector<std::vector<int32_t>>& input_ids,
                        const std::vector<std::vector<int32_t>>& attention_mask, const GenerationConfig& cfg,
                        const TokenCallback& on_token);

// Whether generate() with `cfg` verifies prompt-lookup drafts (GenerationConfig::prompt_lookup_num_tokens):
// then CausalLM::generate runs it as generate_speculative; otherwise it decodes one token per step.
bool speculative_generate_applies(const runtime::ModelCore& m, const GenerationConfig& cfg);
// Whether generate() runs over a SlotBatch (generate_speculative) for Phi-3 longrope: some row of a batch
// of several prompts, or a left-padded one, decodes across the switch, where each row is computed again
// whole as it would be alone (SlotBatch does that per row; generate()'s own loop only for one unpadded
// prompt). Where SlotBatch cannot run it (disable_compile, a dynamic cache, in-step sampling, tensor
// parallelism over MPI) generate() refuses the request by name.
bool longrope_batch_applies(const runtime::ModelCore& m, const std::vector<std::vector<int32_t>>& input_ids,
                            const std::vector<std::vector<int32_t>>& attention_mask,
                            const GenerationConfig& cfg);
// generate() over a SlotBatch (a slot per prompt row, its padding removed, row b seeded with row_seed(seed,
// b) and the budget of the padded prompt): the same sequences, finish reasons and callbacks as generate().
GenerateOutput generate_speculative(CausalLM& model, runtime::ModelCore& m,
                                    const std::vector<std::vector<int32_t>>& input_ids,
                                    const std::vector<std::vector<int32_t>>& attention_mask,
                                    const GenerationConfig& cfg, const TokenCallback& on_token,
                                    CausalLM* assistant = nullptr);

// Dynamic cache: grows by this many slots.
constexpr int kDynamicChunk = 64;

}  // namespace tessera::generation
