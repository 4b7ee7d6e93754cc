#include "generation/speculation.h"

#include <algorithm>

namespace tessera::generation {

namespace {
constexpr int kContext = 64;  // the most context compared when telling occurrences apart
}  // namespace

std::vector<int32_t> ngram_draft(const std::vector<int32_t>& seq, int max_ngram, int k) {
  (void)max_ngram;  // see speculation.h: the longest agreeing context subsumes the n-gram size
  const int len = static_cast<int>(seq.size());
  if (k <= 0 || len < 2) return {};
  // Every earlier place `end` (< len, so a token follows it) scored by how far seq[.., end) agrees with the
  // sequence's end, backwards, up to kContext tokens; the best agreement wins (a copied text repeats its
  // short n-grams: the longer context tells the places apart), the latest on ties. This is the longest
  // n-gram's best occurrence for any n: the longest matching suffix is the best agreement.
  int best_end = -1, best = 0;
  for (int end = len - 1; end >= 1 && best < kContext; --end) {
    int m = 0;
    while (m < kContext && end - 1 - m >= 0 &&
           seq[static_cast<size_t>(end - 1 - m)] == seq[static_cast<size_t>(len - 1 - m)])
      ++m;
    if (m > best) {
      best = m;
      best_end = end;
    }
  }
  if (best_end < 0) return {};
  // No longer than the agreement: a short one is as likely to part from the text as to follow it.
  const int to = std::min({len, best_end + k, best_end + best});
  return {seq.begin() + best_end, seq.begin() + to};
}

int DraftControl::length() {
  if (max_ <= 0) return 0;
  if (pause_ > 0) {
    --pause_;
    return 0;
  }
  return len_;
}

void DraftControl::record(int drafted, int accepted) {
  if (drafted <= 0) return;
  if (accepted >= drafted) {
    len_ = std::min(max_, len_ + 1);
  } else {
    len_ = std::max(1, accepted + 1);
  }
  if (accepted > 0) {
    backoff_ = 0;
  } else {
    backoff_ = backoff_ == 0 ? 1 : std::min(64, backoff_ * 2);
    pause_ = backoff_;
  }
}

}  // namespace tessera::generation
