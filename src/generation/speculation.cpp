#include "generation/speculation.h"

#include <algorithm>

namespace tessera::generation {

std::vector<int32_t> ngram_draft(const std::vector<int32_t>& seq, int max_ngram, int k) {
  const int len = static_cast<int>(seq.size());
  if (k <= 0 || len < 2) return {};
  for (int n = std::min(max_ngram, len - 1); n >= 1; --n) {
    const int32_t* suffix = seq.data() + (len - n);
    // The latest start i < len - n with seq[i, i + n) == suffix and a token after it.
    for (int i = len - n - 1; i >= 0; --i) {
      if (!std::equal(suffix, suffix + n, seq.data() + i)) continue;
      const int from = i + n, to = std::min(len, from + k);
      return {seq.begin() + from, seq.begin() + to};
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
