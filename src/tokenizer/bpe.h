// BPE model: vocabulary, merge ranks in a flat open-addressing table keyed by
// the packed (left id, right id) pair, and a bounded cache of word -> ids.
#pragma once
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessera::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// (left id, right id) -> (rank, merged id), open addressing with linear probing.
class PairRankMap {
 public:
  struct Entry {
    uint64_t key;
    int32_t rank;
    int32_t merged;
  };
  void reserve(size_t n);
  void insert_or_assign(int32_t a, int32_t b, int32_t rank, int32_t merged);
  const Entry* find(int32_t a, int32_t b) const {
    const uint64_t key = pack(a, b);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t pack(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool ignore_merges = false;
  bool byte_level = false;  // words arrive as raw bytes; symbols are GPT-2 byte characters
  size_t cache_capacity = 1 << 16;
};

class BpeModel {
 public:
  // `vocab`: token -> id; `merges`: pairs in rank order. Throws Error (naming
  // `where`) when a merge refers to a token that is not in the vocabulary.
  BpeModel(StringIdMap vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opts,
           const std::string& where);

  // Appends the ids of one pre-tokenised word.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;  // nullptr if unknown
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }
  size_t size() const { return vocab_.size(); }

 private:
  void initial_symbols(std::string_view word, std::vector<int32_t>& syms) const;
  void merge_small(std::vector<int32_t>& syms) const;
  void merge_large(std::vector<int32_t>& syms) const;
  bool cache_lookup(std::string_view word, std::vector<int32_t>& out) const;
  void cache_store(std::string_view word, const int32_t* ids, size_t n) const;

  StringIdMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> has_id_;
  PairRankMap merges_;
  BpeOptions opts_;
  std::optional<int32_t> unk_id_;
  int32_t byte_ids_[256];     // byte-level: id of each byte's character, -1 if absent
  StringIdMap raw_vocab_;     // byte-level + ignore_merges: raw bytes -> id

  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace tessera::tok
