// Speculative decoding by prompt lookup (GenerationConfig::prompt_lookup_num_tokens): where a row's draft
// tokens come from, and how many it proposes. The verification is the step loop's (SlotBatch): a draft token
// is kept only while it equals the token chosen from its position's logits, so the output is that of plain
// decoding; what a rejected draft costs is the extra rows of the step that verified it.
#pragma once
#include <cstdint>
#include <vector>

namespace tessera::generation {

// Up to `k` tokens that followed the earlier place whose preceding tokens agree longest with the sequence's
// end (up to 64 compared; the suffix itself excluded), the latest on ties; no more tokens than that
// agreement is long. Empty when not even the last token occurred before. `seq` is the whole sequence so far
// (prompt, then output). This is what matching the longest n-gram first and telling its occurrences apart by
// their context gives for any n, so `max_ngram` (Transformers' max_matching_ngram_size, default 2) does not
// change the draft: it is accepted, range-checked and otherwise unused.
std::vector<int32_t> ngram_draft(const std::vector<int32_t>& seq, int max_ngram, int k);

// How far one row drafts, from how its drafts fared: the length grows by one after a draft accepted whole
// and shrinks to what was accepted plus one otherwise; a draft of any length accepted not at all pauses
// drafting for a number of steps that doubles with each such miss in a row (up to 64) and resets after an
// accepted token, so a row whose text does not repeat itself soon stops paying for drafts.
class DraftControl {
 public:
  DraftControl() = default;
  explicit DraftControl(int max_tokens) : max_(max_tokens), len_(max_tokens) {}
  bool enabled() const { return max_ > 0; }
  // Draft tokens to propose at this step (0: none now). Counts a paused step.
  int length();
  // The outcome of a proposed draft of `drafted` tokens of which the first `accepted` matched.
  void record(int drafted, int accepted);

 private:
  int max_ = 0, len_ = 0;
  int pause_ = 0, backoff_ = 0;
};

}  // namespace tessera::generation
