// The stages around the BPE model, configured from tokenizer.json:
// normalizer, added-token matcher, pre-tokenizer and post-processor.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/unicode_util.h"

namespace tessera::tok {

// ------------------------------------------------------------- normalizer
struct Normalizer {
  enum class Kind { kNFC, kNFD, kNFKC, kNFKD, kLowercase };
  std::vector<Kind> steps;  // applied in order; empty = none
  // Returns true and fills `out` when the text changes; false leaves `out` untouched.
  bool apply(std::string_view in, std::string& out) const;
};

// ------------------------------------------------------------ added tokens
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
  std::string surface;  // what id_to_token/decode give: HF normalizes the content of normalized tokens
};

// A piece of input: either an added token (id >= 0) or text [begin, end).
struct Segment {
  size_t begin, end;
  int32_t id;
};

// Leftmost-longest matching of added tokens (HF: aho-corasick LeftmostLongest),
// then HF's single_word / lstrip / rstrip rules.
class AddedMatcher {
 public:
  void add(const AddedToken& tok, const std::string& pattern);
  bool empty() const { return nodes_.size() <= 1; }
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  // A radix trie: each edge is labelled by a slice of a stored pattern, so memory grows with the
  // number of tokens plus their bytes stored once (a per-byte trie cost ~100 bytes per byte of a
  // long token: 1.6 GB for one 16 MB added token).
  struct Edge {
    uint32_t pattern;  // index into patterns_
    uint32_t offset;   // label = patterns_[pattern].substr(offset, length)
    uint32_t length;
    uint32_t child;  // index into nodes_
  };
  struct Node {
    int32_t token = -1;       // index into tokens_ when a pattern ends here
    std::vector<Edge> edges;  // first label bytes are distinct
  };
  bool longest_at(std::string_view text, size_t pos, size_t* end, int32_t* token) const;
  std::vector<Node> nodes_{Node{}};
  std::vector<AddedToken> tokens_;  // flags and id only (content lives in patterns_)
  std::vector<std::string> patterns_;
  bool first_byte_[256] = {};
};

// ----------------------------------------------------------- pre-tokenizer
enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokStep {
  enum class Kind { kSplit, kByteLevel };
  Kind kind = Kind::kSplit;
  std::shared_ptr<const Regex> regex;  // Split pattern, or GPT-2's for ByteLevel with use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
};

// Scratch buffers reused across the words of one encode() call.
struct PreTokScratch {
  std::string buf, alt;
  std::vector<Span> pieces, next, matches;
  std::vector<std::pair<Span, bool>> parts;
};

struct PreTokenizer {
  std::vector<PreTokStep> steps;
  bool byte_level = false;  // a ByteLevel step ran: words are raw bytes to map
  // Splits `text` into words: spans of st.buf.
  void apply(std::string_view text, PreTokScratch& st) const;
};

// The GPT-2 split regex ByteLevel uses when use_regex is true.
const char* gpt2_split_regex();

// ---------------------------------------------------------- post-processor
// One flattened single-sequence template: ids before and after the sequence.
struct PostProcessor {
  std::vector<int32_t> prefix, suffix;
};

}  // namespace tessera::tok
