#include "tokenizer/pipeline.h"

#include <utf8proc.h>

#include "tessera/error.h"

namespace tessera::tok {

// ------------------------------------------------------------- normalizer

namespace {
// Every code point below U+0300 is NFC-stable and never composes with what
// precedes it, so text without a byte >= 0xCC needs no NFC pass.
bool nfc_trivially(std::string_view s) {
  for (char c : s) {
    if (static_cast<uint8_t>(c) >= 0xCC) return false;
  }
  return true;
}
}  // namespace

bool Normalizer::apply(std::string_view in, std::string& out) const {
  if (steps.empty()) return false;
  std::string cur(in);
  for (Kind k : steps) {
    switch (k) {
      case Kind::kNFC:
        if (!nfc_trivially(cur)) cur = unicode_normalize(cur, NormForm::kNFC);
        break;
      case Kind::kNFD:
        cur = unicode_normalize(cur, NormForm::kNFD);
        break;
      case Kind::kNFKC:
        cur = unicode_normalize(cur, NormForm::kNFKC);
        break;
      case Kind::kNFKD:
        cur = unicode_normalize(cur, NormForm::kNFKD);
        break;
      case Kind::kLowercase:
        cur = unicode_lowercase(cur);
        break;
    }
  }
  if (cur == in) return false;
  out = std::move(cur);
  return true;
}

// ----------------------------------------------------------- added tokens

namespace {

// Rust regex \s (Unicode White_Space).
bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// Rust regex \w: alphabetic, marks, decimal digits, connector punctuation.
bool is_word(uint32_t cp) {
  if (cp < 0x80) return std::isalnum(static_cast<int>(cp)) || cp == '_';
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

uint32_t last_cp(std::string_view s, size_t* start) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  size_t len = 0;
  *start = i;
  return utf8_decode_at(s, i, &len);
}

// Start of the whitespace run that ends `s` (s.size() when none).
size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = 0;
    if (!is_space(last_cp(s.substr(0, end), &start))) break;
    end = start;
  }
  return end;
}

// Length of the whitespace run that starts `s`.
size_t leading_space_len(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    if (!is_space(utf8_decode_at(s, i, &len))) break;
    i += len;
  }
  return i;
}

}  // namespace

void AddedMatcher::add(const AddedToken& tok, const std::string& pattern) {
  if (pattern.empty()) return;
  if (pattern.size() >= UINT32_MAX || patterns_.size() >= UINT32_MAX)
    fail("added token ", tok.id, " is too long (", pattern.size(), " bytes)");
  const auto pat = static_cast<uint32_t>(patterns_.size());
  patterns_.push_back(pattern);  // no other push_back below: `p` and labels stay valid
  const std::string& p = patterns_.back();
  bool referenced = false;  // an edge label points into patterns_[pat]
  uint32_t node = 0;
  size_t i = 0;
  while (i < p.size()) {
    size_t ei = nodes_[node].edges.size();
    for (size_t k = 0; k < nodes_[node].edges.size(); ++k) {
      const Edge& cand = nodes_[node].edges[k];
      if (patterns_[cand.pattern][cand.offset] == p[i]) ei = k;
    }
    if (ei == nodes_[node].edges.size()) {  // a new leaf holds the rest of the pattern
      const auto leaf = static_cast<uint32_t>(nodes_.size());
      nodes_[node].edges.push_back(
          Edge{pat, static_cast<uint32_t>(i), static_cast<uint32_t>(p.size() - i), leaf});
      nodes_.emplace_back();
      referenced = true;
      node = leaf;
      break;
    }
    const Edge e = nodes_[node].edges[ei];
    const std::string_view label = std::string_view(patterns_[e.pattern]).substr(e.offset, e.length);
    uint32_t k = 0;
    while (k < label.size() && i + k < p.size() && label[k] == p[i + k]) ++k;
    uint32_t next = e.child;
    if (k < label.size()) {  // split the edge after the common prefix
      next = static_cast<uint32_t>(nodes_.size());
      Node mid;
      mid.edges.push_back(Edge{e.pattern, e.offset + k, e.length - k, e.child});
      nodes_.push_back(std::move(mid));
      nodes_[node].edges[ei].length = k;
      nodes_[node].edges[ei].child = next;
    }
    node = next;
    i += k;
  }
  if (!referenced) patterns_.pop_back();
  // The first pattern registered for a string wins.
  if (nodes_[node].token < 0) {
    nodes_[node].token = static_cast<int32_t>(tokens_.size());
    AddedToken flags = tok;
    flags.content.clear();
    flags.surface.clear();
    tokens_.push_back(std::move(flags));
  }
  first_byte_[static_cast<uint8_t>(pattern[0])] = true;
}

bool AddedMatcher::longest_at(std::string_view text, size_t pos, size_t* end, int32_t* token) const {
  uint32_t node = 0;
  bool found = false;
  size_t i = pos;
  while (i < text.size()) {
    const Edge* e = nullptr;
    for (const Edge& cand : nodes_[node].edges)
      if (patterns_[cand.pattern][cand.offset] == text[i]) e = &cand;
    if (e == nullptr) break;
    const std::string_view label = std::string_view(patterns_[e->pattern]).substr(e->offset, e->length);
    if (text.compare(i, label.size(), label) != 0) break;
    i += label.size();
    node = e->child;
    if (nodes_[node].token >= 0) {
      *end = i;
      *token = nodes_[node].token;
      found = true;
    }
  }
  return found;
}

void AddedMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  size_t emitted = 0;  // text before this is already in `out`
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t mend = 0;
    int32_t ti = -1;
    if (!longest_at(text, pos, &mend, &ti)) {
      ++pos;
      continue;
    }
    const AddedToken& tok = tokens_[static_cast<size_t>(ti)];
    size_t start = pos, stop = mend;
    pos = mend;  // the match iterator resumes after the raw match
    if (tok.single_word) {
      size_t tmp = 0;
      const bool start_ok = start == 0 || !is_word(last_cp(text.substr(0, start), &tmp));
      size_t len = 0;
      const bool stop_ok = stop == text.size() || !is_word(utf8_decode_at(text, stop, &len));
      if (!start_ok || !stop_ok) continue;
    }
    if (tok.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), emitted);
    if (tok.rstrip) stop += leading_space_len(text.substr(stop));
    if (emitted < start) out.push_back({emitted, start, -1});
    out.push_back({start, stop, tok.id});
    emitted = stop;
  }
  if (emitted < text.size()) out.push_back({emitted, text.size(), -1});
}

// ----------------------------------------------------------- pre-tokenizer

const char* gpt2_split_regex() {
  return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
}

namespace {

// HF NormalizedString::split: turns the matches inside one piece into the
// kept sub-pieces according to `behavior`.
void split_piece(const Span piece, const std::vector<Span>& matches, SplitBehavior behavior, bool invert,
                 std::vector<std::pair<Span, bool>>& parts, std::vector<Span>& out) {
  parts.clear();
  const size_t len = piece.end - piece.begin;
  size_t prev = 0;
  for (const Span& m : matches) {
    if (prev != m.begin) parts.push_back({{prev, m.begin}, invert});
    parts.push_back({m, !invert});
    prev = m.end;
  }
  if (prev != len) parts.push_back({{prev, len}, invert});

  // Folds of HF's Contiguous / MergedWithPrevious / MergedWithNext.
  std::vector<std::pair<Span, bool>>& kept = parts;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (auto& p : kept) p.second = false;
      break;
    case SplitBehavior::kRemoved:
      break;
    case SplitBehavior::kContiguous: {
      size_t w = 0;
      bool prev_match = false;
      for (size_t i = 0; i < parts.size(); ++i) {
        const bool is_match = parts[i].second;
        if (is_match == prev_match && w > 0) {
          kept[w - 1].first.end = parts[i].first.end;
        } else {
          kept[w++] = {parts[i].first, false};
        }
        prev_match = is_match;
      }
      kept.resize(w);
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      size_t w = 0;
      bool prev_match = false;
      for (size_t i = 0; i < parts.size(); ++i) {
        const bool is_match = parts[i].second;
        if (is_match && !prev_match && w > 0) {
          kept[w - 1].first.end = parts[i].first.end;
        } else {
          kept[w++] = {parts[i].first, false};
        }
        prev_match = is_match;
      }
      kept.resize(w);
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      // Walk backwards, merging a match into the piece after it.
      std::vector<std::pair<Span, bool>> rev;
      bool prev_match = false;
      for (size_t i = parts.size(); i-- > 0;) {
        const bool is_match = parts[i].second;
        if (is_match && !prev_match && !rev.empty()) {
          rev.back().first.begin = parts[i].first.begin;
        } else {
          rev.push_back({parts[i].first, false});
        }
        prev_match = is_match;
      }
      kept.assign(rev.rbegin(), rev.rend());
      break;
    }
  }
  for (const auto& [span, removed] : kept) {
    if (!removed && span.end > span.begin) out.push_back({piece.begin + span.begin, piece.begin + span.end});
  }
}

}  // namespace

void PreTokenizer::apply(std::string_view text, PreTokScratch& st) const {
  st.buf.assign(text);
  st.pieces.clear();
  if (!text.empty()) st.pieces.push_back({0, text.size()});
  for (const PreTokStep& step : steps) {
    if (step.kind == PreTokStep::Kind::kByteLevel && step.add_prefix_space) {
      // Every piece gets a leading space unless it has one (HF applies it per split).
      st.alt.clear();
      st.next.clear();
      for (const Span& p : st.pieces) {
        const size_t b = st.alt.size();
        if (st.buf[p.begin] != ' ') st.alt.push_back(' ');
        st.alt.append(st.buf, p.begin, p.end - p.begin);
        st.next.push_back({b, st.alt.size()});
      }
      std::swap(st.buf, st.alt);
      std::swap(st.pieces, st.next);
    }
    if (!step.regex) continue;
    st.next.clear();
    for (const Span& p : st.pieces) {
      st.matches.clear();
      step.regex->find_all(std::string_view(st.buf).substr(p.begin, p.end - p.begin), st.matches);
      split_piece(p, st.matches, step.behavior, step.invert, st.parts, st.next);
    }
    std::swap(st.pieces, st.next);
  }
}

}  // namespace tessera::tok
