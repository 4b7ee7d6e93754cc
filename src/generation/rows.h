// The per-row part of decoding that generate() and SlotBatch share: one sequence's sampling settings,
// the ids its repetition penalty counts, its stop conditions, and how a new token is chosen on the host and
// accepted (counted, checked against eos, the budget and the caller's callback).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "generation/constraint_state.h"
#include "sampling/sampling_params.h"
#include "tessera/generation.h"

namespace tessera::generation {

// The sampler (src/sampling: the part of generation the cpu backend's in-step sampling runs too) is seen here
// as generation's own.
using namespace tessera::sampling;  // NOLINT(google-build-using-namespace)

struct RowState {
  SamplingParams params;
  std::vector<int32_t>
      seen;                  // ids the repetition penalty counts: the prompt without its padding, then output
  std::vector<int32_t> eos;  // GenerationConfig::eos_token_id
  int budget = 0;            // new tokens at most
  int produced = 0;          // new tokens so far (the generation step of the next one)
  FinishReason finish = FinishReason::None;
  // GenerationConfig::constraint's matcher for this row (null: unconstrained). A TP follower's rows have
  // none: rank 0 decides where a constrained row ends and broadcasts it as the row's keep flag.
  std::unique_ptr<ConstraintMatcher> constraint;

  bool running() const { return finish == FinishReason::None; }
  // Starts a sequence: `prompt` minus its first `padding` ids counts for the penalty; `seed` keys its draws.
  void start(const GenerationConfig& cfg, uint64_t seed, const std::vector<int32_t>& prompt, size_t padding,
             int new_token_budget);
};

// The row's next token from its logits ([vocab], changed in place): the repetition penalty over row.seen,
// then argmax or the warpers and a draw keyed by (row.params.seed, row.produced): the sequence's seed and its
// own token index, never where it sits in a batch. A NaN or infinite logit gives no token: -1, with `why`
// saying which value and where.
int32_t host_token(const RowState& row, float* logits, int64_t vocab, std::string& why);
// A constrained row advances its constraint past `token`; false when the constraint is now complete (the row
// ends after this token: it goes into the keep flag the callback's answer goes into). True for an
// unconstrained row.
bool constraint_step(RowState& row, int32_t token);
// Whether a token the compiled sampling step chose is one (the step answers -1 for non-finite logits).
bool device_token_ok(int32_t token, int64_t vocab, std::string& why);
// Accepts the row's new token: counts it, then ends the row at an eos id, at its budget, or when `keep_going`
// (the caller's callback) is false: as an eos when the row's constraint is complete (constraint_step), else
// as Stopped.
void accept(RowState& row, int32_t token, bool keep_going);

// In-step sampling: the token masks of a step's rows ([rows.size() * mask_words], all ones for an
// unconstrained row or nullptr); empty when no row is constrained (the step then allows every token).
std::vector<int32_t> step_token_masks(const std::vector<const RowState*>& rows, int64_t vocab);
// Runs `work` while another thread computes the next masks of `matchers` (none: `work` alone).
void overlap_masks(const std::vector<ConstraintMatcher*>& matchers, const std::function<void()>& work);

}  // namespace tessera::generation
