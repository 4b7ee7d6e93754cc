#include "generation/speculation.h"

#include <algorithm>

namespace tessera::generation {

namespace {
constexpr int kContext = 64;  // the most context compared when telling occurrences apart
}  // namespace

std::vector<int32_t> ngram_draft(const std::vector<int32_t>& seq, int max_ngram, int k) {
  const int len = static_cast<int>(seq.size());
  if (k <= 0 || len < 2) return {};
  // How far seq[.., end) agrees with the sequence's end, backwards, up to `cap`.
  auto agree = [&](int end, int cap) {
    int m = 0;
    while (m < cap && end - 1 - m >= 0 &&
           seq[static_cast<size_t>(end - 1 - m)] == seq[static_cast<size_t>(len - 1 - m)])
      ++m;
    return m;
  };
  for (int n = std::min(max_ngram, len - 1); n >= 1; --n) {
    // Occurrences of the last n tokens ending at `end` < len (so a token follows them); the one whose context
    // agrees longest with the sequence's wins (a copied text repeats its short n-grams: the longer context
    // tells the places apart), the latest on ties.
    int best_end = -1, best = 0;
    for (int end = len - 1; end >= n; --end) {
      if (agree(end, n) < n) continue;
      const int m = agree(end, kContext);
      if (m > best) {
        best = m;
        best_end = end;
        if (m == kContext) break;
      }
    }
    if (best_end >= 0) {
      // No longer than the agreement: a short one is as likely to part from the text as to follow it.
      const int to = std::min({len, best_end + k, best_end + best});
      return {seq.begin() + best_end, seq.begin() + to};
    }
  }
  return {};
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
