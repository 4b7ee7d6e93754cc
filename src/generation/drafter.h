// Speculative decoding with a draft model (SlotBatchOptions::draft_model): a smaller model with the target's
// vocabulary proposes each speculating row's next tokens greedily, from its own KV cache of the row's
// sequence. The verification is the step loop's (SlotBatch): a draft token is kept only while it equals the
// token chosen from its position's logits, so the output is that of plain decoding whatever the drafts are.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/backend.h"

namespace tessera::runtime {
struct ModelCore;
}

namespace tessera::generation {

class Drafter {
 public:
  // `rows` sequences of at most `cache_len` positions (the target batch's slots and cache_len; positions
  // past the draft model's context limit are never drafted from).
  Drafter(runtime::ModelCore& draft, int rows, int cache_len);
  // Row `row` holds a new sequence (or one whose cache was taken back): nothing of it is cached.
  void reset(int row);
  struct Ask {
    int row = 0;
    const std::vector<int32_t>* seq = nullptr;  // the sequence so far: prompt, then output
    int want = 0;                               // draft tokens wanted (0: none)
  };
  // For each ask, up to `want` greedy tokens continuing its sequence (fewer near the end of the cache, or
  // where the draft model's logits are not finite). The rows' uncached tokens run first (one prompt program
  // per row), then one decode program per draft position over the rows still drafting.
  std::vector<std::vector<int32_t>> propose(const std::vector<Ask>& asks);
  // The outcome of the draft proposed for `row` at sequence length `len`: `drafted` tokens, the first
  // `accepted` confirmed (their keys and values, written while drafting, stay cached).
  void confirmed(int row, int len, int drafted, int accepted);

 private:
  runtime::ModelCore& m_;
  int rows_ = 0, cache_len_ = 0;
  std::unique_ptr<backends::DeviceCache> cache_;
  std::vector<int> fed_;  // per row: leading tokens of its sequence whose keys and values are cached
  backends::StepInputs in_;
  std::vector<float> logits_;
  void run(const graph::ShapeKey& key);
};

}  // namespace tessera::generation
