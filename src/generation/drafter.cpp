#include "generation/drafter.h"

#include <algorithm>
#include <cmath>

#include "runtime/model_core.h"
#include "tessera/error.h"

namespace tessera::generation {

using graph::Phase;
using graph::ShapeKey;

Drafter::Drafter(runtime::ModelCore& draft, int rows, int cache_len)
    : m_(draft),
      rows_(rows),
      cache_len_(static_cast<int>(std::min<int64_t>(cache_len, draft.config.context_limit()))),
      fed_(static_cast<size_t>(rows), 0) {
  if (draft.caps.prefers_buckets || draft.device_sampling)
    fail(
        "draft model: it must run on the cpu device (it runs prompts at their exact length and samples on "
        "the host)");
  if (draft.comm && draft.comm->size() > 1) fail("draft model: not with tensor parallelism over MPI");
  cache_ = m_.make_cache(rows_, cache_len_);
}

void Drafter::reset(int row) { fed_[static_cast<size_t>(row)] = 0; }

void Drafter::run(const ShapeKey& key) {
  std::unique_ptr<backends::Executable> scratch;
  m_.executable(key, false, scratch).run(in_, *cache_, logits_);
}

std::vector<std::vector<int32_t>> Drafter::propose(const std::vector<Ask>& asks) {
  std::vector<std::vector<int32_t>> out(asks.size());
  const bool mapped = rows_ > 1;
  const int64_t vocab = m_.config.vocab_size;
  // Asks that draft: the sequence's last token must fit the cache, and `want` shrinks to the positions left.
  std::vector<size_t> live;
  std::vector<int> want(asks.size(), 0);
  for (size_t i = 0; i < asks.size(); ++i) {
    const int len = static_cast<int>(asks[i].seq->size());
    want[i] = std::min(asks[i].want, cache_len_ - len + 1);
    if (want[i] > 0 && len > 0) live.push_back(i);
  }
  // Uncached tokens but the last: a prompt program per row.
  for (size_t i : live) {
    const Ask& a = asks[i];
    int& fed = fed_[static_cast<size_t>(a.row)];
    const int len = static_cast<int>(a.seq->size());
    if (fed > len - 1) fed = len - 1;  // defensive: never past the sequence
    if (fed == len - 1) continue;
    in_ = backends::StepInputs{};
    for (int p = fed; p < len - 1; ++p) {
      in_.ids.push_back((*a.seq)[static_cast<size_t>(p)]);
      in_.positions.push_back(p);
      in_.slots.push_back(p);
    }
    in_.kv_begin = {0};
    if (mapped) in_.cache_rows = {a.row};
    run({.phase = Phase::Prefill,
         .batch = 1,
         .seq = len - 1 - fed,
         .cache_len = cache_len_,
         .dtype = m_.info.dtype,
         .cache_rows = mapped ? rows_ : 0});
    fed = len - 1;
  }
  // One decode program per draft position: the last token, then each draft token, of the rows still going.
  for (int j = 0; !live.empty(); ++j) {
    in_ = backends::StepInputs{};
    for (size_t i : live) {
      const Ask& a = asks[i];
      const int len = static_cast<int>(a.seq->size());
      in_.ids.push_back(j == 0 ? a.seq->back() : out[i].back());
      in_.positions.push_back(len - 1 + j);
      in_.slots.push_back(len - 1 + j);
      in_.kv_begin.push_back(0);
      in_.cache_rows.push_back(a.row);
    }
    const int batch = static_cast<int>(live.size());
    if (!mapped) in_.cache_rows.clear();
    run({.phase = Phase::Decode,
         .batch = batch,
         .seq = 1,
         .cache_len = cache_len_,
         .dtype = m_.info.dtype,
         .cache_rows = mapped ? rows_ : 0});
    std::vector<size_t> next;
    for (int b = 0; b < batch; ++b) {
      const size_t i = live[static_cast<size_t>(b)];
      if (j == 0) fed_[static_cast<size_t>(asks[i].row)] = static_cast<int>(asks[i].seq->size());
      const float* row = logits_.data() + static_cast<int64_t>(b) * vocab;
      int64_t best = 0;
      for (int64_t t = 1; t < vocab; ++t)
        if (row[t] > row[best]) best = t;
      if (!std::isfinite(row[best])) continue;  // no draft from here
      out[i].push_back(static_cast<int32_t>(best));
      if (static_cast<int>(out[i].size()) < want[i]) next.push_back(i);
    }
    live = std::move(next);
  }
  return out;
}

void Drafter::confirmed(int row, int len, int drafted, int accepted) {
  if (drafted <= 0) return;
  // Draft tokens 1..drafted-1 were fed at positions len..; the confirmed ones among them stay valid.
  fed_[static_cast<size_t>(row)] =
      std::min(fed_[static_cast<size_t>(row)], len) + std::min(accepted, drafted - 1);
}

}  // namespace tessera::generation
