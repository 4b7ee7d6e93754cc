#include "tokenizer/bpe.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>
#include <queue>

#include "tessera/error.h"
#include "tokenizer/unicode_util.h"

namespace tessera::tok {

// ---------------------------------------------------------------- PairRankMap

void PairRankMap::reserve(size_t n) {
  const size_t cap = std::bit_ceil(std::max<size_t>(16, n * 2));
  slots_.assign(cap, Entry{kEmpty, 0, 0});
  mask_ = cap - 1;
  shift_ = 64 - std::countr_zero(cap);
  size_ = 0;
}

void PairRankMap::insert_or_assign(int32_t a, int32_t b, int32_t rank, int32_t merged) {
  if ((size_ + 1) * 2 > slots_.size()) {
    std::vector<Entry> old = std::move(slots_);
    reserve(std::max<size_t>(size_ + 1, old.size()));
    for (const Entry& e : old) {
      if (e.key != kEmpty) insert_or_assign(static_cast<int32_t>(e.key >> 32), static_cast<int32_t>(e.key), e.rank,
                                            e.merged);
    }
  }
  const uint64_t key = pack(a, b);
  for (size_t i = slot(key);; i = (i + 1) & mask_) {
    Entry& e = slots_[i];
    if (e.key == key || e.key == kEmpty) {
      if (e.key == kEmpty) ++size_;
      e = Entry{key, rank, merged};
      return;
    }
  }
}

// ------------------------------------------------------------------- BpeModel

BpeModel::BpeModel(StringIdMap vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions opts, const std::string& where)
    : vocab_(std::move(vocab)), opts_(std::move(opts)) {
  int32_t max_id = -1;
  for (const auto& [tok, id] : vocab_) {
    if (id < 0) fail(where, ": vocabulary id ", id, " of token '", tok, "' is negative");
    max_id = std::max(max_id, id);
  }
  // Ids index a dense table; reject absurdly sparse ids instead of allocating gigabytes.
  if (static_cast<size_t>(max_id) > vocab_.size() * 4 + (1u << 20)) {
    fail(where, ": vocabulary id ", max_id, " is far beyond the vocabulary size ", vocab_.size());
  }
  id_to_token_.resize(static_cast<size_t>(max_id + 1));
  has_id_.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [tok, id] : vocab_) {
    id_to_token_[static_cast<size_t>(id)] = tok;
    has_id_[static_cast<size_t>(id)] = 1;
  }
  if (opts_.unk_token) {
    unk_id_ = token_to_id(*opts_.unk_token);
    if (!unk_id_) fail(where, ": unk_token '", *opts_.unk_token, "' is not in the vocabulary");
  }

  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const auto ia = token_to_id(a), ib = token_to_id(b);
    const auto im = token_to_id(a + b);
    if (!ia || !ib || !im) {
      const std::string& missing = !ia ? a : !ib ? b : a + b;
      fail(where, ": merge #", rank, " '", a, " ", b, "' uses token '", missing, "' that is not in the vocabulary");
    }
    // Duplicates: the later rank wins, as in HF's HashMap insert.
    merges_.insert_or_assign(*ia, *ib, static_cast<int32_t>(rank), *im);
  }

  const ByteLevelTable& bl = byte_level_table();
  for (int b = 0; b < 256; ++b) {
    const auto id = token_to_id(bl.byte_to_utf8[static_cast<size_t>(b)]);
    byte_ids_[b] = id ? *id : -1;
  }
  if (opts_.byte_level && opts_.ignore_merges) {
    for (const auto& [tok, id] : vocab_) {
      std::string raw;
      if (byte_level_decode(tok, raw)) raw_vocab_.emplace(std::move(raw), id);
    }
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[static_cast<size_t>(id)]) return nullptr;
  return &id_to_token_[static_cast<size_t>(id)];
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& syms) const {
  bool prev_unk = false;
  auto push = [&](std::optional<int32_t> id) {
    if (id) {
      syms.push_back(*id);
      prev_unk = false;
    } else if (unk_id_) {
      // Unknown symbols become unk (fused when fuse_unk); without unk they are dropped, as in HF.
      if (!(opts_.fuse_unk && prev_unk)) syms.push_back(*unk_id_);
      prev_unk = true;
    }
  };
  if (opts_.byte_level) {
    for (char c : word) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      push(id >= 0 ? std::optional<int32_t>(id) : std::nullopt);
    }
    return;
  }
  for (size_t i = 0; i < word.size();) {
    size_t len = 0;
    utf8_decode_at(word, i, &len);
    push(token_to_id(word.substr(i, len)));
    i += len;
  }
}

// O(n^2) in the word length but allocation-free: ranks[i] is the rank of the
// pair (syms[i], syms[i+1]); merge the lowest rank, leftmost on ties.
void BpeModel::merge_small(std::vector<int32_t>& syms) const {
  constexpr int32_t kNone = INT32_MAX;
  int32_t ranks[64];     // [n-1] rank of each adjacent pair
  int32_t merged[64];    // [n-1] id of the merged pair
  size_t n = syms.size();
  auto fill = [&](size_t i) {
    const PairRankMap::Entry* e = merges_.find(syms[i], syms[i + 1]);
    ranks[i] = e ? e->rank : kNone;
    merged[i] = e ? e->merged : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) fill(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == kNone) break;
    syms[best] = merged[best];
    // Remove symbol best+1 and pair best (re-filled below).
    std::memmove(&syms[best + 1], &syms[best + 2], (n - best - 2) * sizeof(int32_t));
    std::memmove(&ranks[best], &ranks[best + 1], (n - best - 2) * sizeof(int32_t));
    std::memmove(&merged[best], &merged[best + 1], (n - best - 2) * sizeof(int32_t));
    --n;
    if (best + 1 < n) fill(best);
    if (best > 0) fill(best - 1);
  }
  syms.resize(n);
}

// O(n log n) with a priority queue, for long words; same result as merge_small.
void BpeModel::merge_large(std::vector<int32_t>& syms) const {
  struct Cand {
    int32_t rank;
    int32_t pos;
    int32_t merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const int32_t n = static_cast<int32_t>(syms.size());
  std::vector<int32_t> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  std::vector<uint8_t> alive(static_cast<size_t>(n), 1);
  for (int32_t i = 0; i < n; ++i) {
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue;
  auto push_pair = [&](int32_t pos) {
    const int32_t nx = next[static_cast<size_t>(pos)];
    if (nx < 0) return;
    if (const PairRankMap::Entry* e = merges_.find(syms[static_cast<size_t>(pos)], syms[static_cast<size_t>(nx)])) {
      queue.push({e->rank, pos, e->merged});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!queue.empty()) {
    const Cand c = queue.top();
    queue.pop();
    const auto pos = static_cast<size_t>(c.pos);
    if (!alive[pos] || next[pos] < 0) continue;
    const auto nx = static_cast<size_t>(next[pos]);
    const PairRankMap::Entry* e = merges_.find(syms[pos], syms[nx]);
    if (e == nullptr || e->merged != c.merged) continue;  // stale candidate
    syms[pos] = c.merged;
    alive[nx] = 0;
    next[pos] = next[nx];
    if (next[pos] >= 0) prev[static_cast<size_t>(next[pos])] = c.pos;
    if (prev[pos] >= 0) push_pair(prev[pos]);
    push_pair(c.pos);
  }
  size_t w = 0;
  for (size_t i = 0; i < syms.size(); ++i) {
    if (alive[i]) syms[w++] = syms[i];
  }
  syms.resize(w);
}

bool BpeModel::cache_lookup(std::string_view word, std::vector<int32_t>& out) const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  auto it = cache_.find(word);
  if (it == cache_.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void BpeModel::cache_store(std::string_view word, const int32_t* ids, size_t n) const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  // Bounded: start over when full rather than grow without limit.
  if (cache_.size() >= opts_.cache_capacity) cache_.clear();
  cache_.emplace(std::string(word), std::vector<int32_t>(ids, ids + n));
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (opts_.ignore_merges) {
    const StringIdMap& whole = opts_.byte_level ? raw_vocab_ : vocab_;
    if (auto it = whole.find(word); it != whole.end()) {
      out.push_back(it->second);
      return;
    }
  }
  constexpr size_t kMaxCachedWord = 256;
  const bool cacheable = opts_.cache_capacity > 0 && word.size() <= kMaxCachedWord;
  if (cacheable && cache_lookup(word, out)) return;

  thread_local std::vector<int32_t> syms;
  syms.clear();
  initial_symbols(word, syms);
  if (syms.size() <= 64) {
    merge_small(syms);
  } else {
    merge_large(syms);
  }
  out.insert(out.end(), syms.begin(), syms.end());
  if (cacheable) cache_store(word, syms.data(), syms.size());
}

}  // namespace tessera::tok
