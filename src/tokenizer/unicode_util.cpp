#include "tokenizer/unicode_util.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "tessera/error.h"

namespace tessera::tok {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid sequence starting at in[i], or 0 with *subpart set to
// the length of the maximal invalid subpart (>= 1). A truncated but so far
// valid sequence at the end of input sets *truncated.
size_t scan_sequence(std::string_view in, size_t i, size_t* subpart, bool* truncated) {
  const auto b0 = static_cast<uint8_t>(in[i]);
  *truncated = false;
  if (b0 < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    *subpart = 1;
    return 0;
  }
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= in.size()) {
      *subpart = k;
      *truncated = true;
      return 0;
    }
    const auto b = static_cast<uint8_t>(in[i + k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      *subpart = k;
      return 0;
    }
  }
  return need;
}

}  // namespace

void utf8_repair_append(std::string_view in, std::string& out) {
  size_t i = 0, run = 0;  // [run, i) is valid and not yet copied
  while (i < in.size()) {
    if (static_cast<uint8_t>(in[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t subpart = 0;
    bool truncated = false;
    const size_t n = scan_sequence(in, i, &subpart, &truncated);
    if (n > 0) {
      i += n;
      continue;
    }
    out.append(in.substr(run, i - run));
    out.append(kReplacement);
    i += subpart;
    run = i;
  }
  out.append(in.substr(run));
}

size_t utf8_first_invalid(std::string_view in, size_t* subpart) {
  size_t i = 0;
  while (i < in.size()) {
    if (static_cast<uint8_t>(in[i]) < 0x80) {
      ++i;
      continue;
    }
    bool truncated = false;
    const size_t n = scan_sequence(in, i, subpart, &truncated);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

bool utf8_is_valid(std::string_view in) {
  size_t subpart = 0;
  return utf8_first_invalid(in, &subpart) == std::string_view::npos;
}

size_t utf8_incomplete_tail(std::string_view in) {
  size_t i = 0;
  while (i < in.size()) {
    size_t subpart = 0;
    bool truncated = false;
    const size_t n = scan_sequence(in, i, &subpart, &truncated);
    if (truncated) return i;
    i += n > 0 ? n : subpart;
  }
  return in.size();
}

uint32_t utf8_decode_at(std::string_view in, size_t pos, size_t* len) {
  const auto b0 = static_cast<uint8_t>(in[pos]);
  auto cont = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(in[pos + k]) & 0x3F); };
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  if (b0 < 0xE0) {
    *len = 2;
    return (static_cast<uint32_t>(b0 & 0x1F) << 6) | cont(1);
  }
  if (b0 < 0xF0) {
    *len = 3;
    return (static_cast<uint32_t>(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
  }
  *len = 4;
  return (static_cast<uint32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
}

void utf8_append(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string unicode_normalize(std::string_view in, NormForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormForm::kNFC: options |= UTF8PROC_COMPOSE; break;
    case NormForm::kNFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormForm::kNFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormForm::kNFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(in.data()),
                                          static_cast<utf8proc_ssize_t>(in.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> holder(out, &std::free);
  if (n < 0) fail("tokenizer: unicode normalisation failed: ", utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

std::string unicode_lowercase(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size();) {
    size_t len = 0;
    const uint32_t cp = utf8_decode_at(in, i, &len);
    utf8_append(static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))), out);
    i += len;
  }
  return out;
}

const ByteLevelTable& byte_level_table() {
  static const ByteLevelTable table = [] {
    ByteLevelTable t{};
    t.cp_to_byte.fill(-1);
    uint32_t next = 256;  // bytes that are not printable get 256, 257, ... in byte order
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? b : next++;
      t.byte_to_cp[b] = cp;
      utf8_append(cp, t.byte_to_utf8[b]);
      t.cp_to_byte[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return table;
}

std::string byte_level_encode(std::string_view raw) {
  const ByteLevelTable& t = byte_level_table();
  std::string out;
  out.reserve(raw.size() * 2);
  for (char c : raw) out += t.byte_to_utf8[static_cast<uint8_t>(c)];
  return out;
}

bool byte_level_decode(std::string_view token, std::string& out) {
  const ByteLevelTable& t = byte_level_table();
  if (!utf8_is_valid(token)) return false;
  const size_t start = out.size();
  for (size_t i = 0; i < token.size();) {
    size_t len = 0;
    const uint32_t cp = utf8_decode_at(token, i, &len);
    if (cp >= t.cp_to_byte.size() || t.cp_to_byte[cp] < 0) {
      out.resize(start);
      return false;
    }
    out.push_back(static_cast<char>(t.cp_to_byte[cp]));
    i += len;
  }
  return true;
}

}  // namespace tessera::tok
