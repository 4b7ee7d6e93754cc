// UTF-8 helpers shared by the tokenizer: repair of invalid input, streaming
// boundaries, NFC/NFD/NFKC/NFKD via utf8proc, and GPT-2's byte<->unicode table.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::tok {

// Appends `in` to `out`, replacing each maximal invalid subpart with U+FFFD
// (Unicode "substitution of maximal subparts": what Python's
// bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy do).
void utf8_repair_append(std::string_view in, std::string& out);
bool utf8_is_valid(std::string_view in);
// Offset of the first maximal invalid subpart of `in` (the unit utf8_repair_append replaces), with its length
// in *subpart; npos when `in` is valid UTF-8.
size_t utf8_first_invalid(std::string_view in, size_t* subpart);

// Start of a trailing sequence that is a valid but truncated UTF-8 prefix
// (could still be completed by more bytes); in.size() when there is none.
size_t utf8_incomplete_tail(std::string_view in);

// Decodes the code point at in[pos] (input must be valid UTF-8); sets *len.
uint32_t utf8_decode_at(std::string_view in, size_t pos, size_t* len);
void utf8_append(uint32_t cp, std::string& out);

// Unicode normalisation forms (input must be valid UTF-8).
enum class NormForm { kNFC, kNFD, kNFKC, kNFKD };
std::string unicode_normalize(std::string_view in, NormForm form);
// Lower-cases every code point (full Unicode simple lowercase mapping).
std::string unicode_lowercase(std::string_view in);

// GPT-2 byte-level alphabet: every byte maps to one printable code point.
struct ByteLevelTable {
  std::array<uint32_t, 256> byte_to_cp;
  std::array<std::string, 256> byte_to_utf8;  // the code point as UTF-8 (1 or 2 bytes)
  std::array<int16_t, 512> cp_to_byte;        // -1 when the code point is not in the alphabet
};
const ByteLevelTable& byte_level_table();

// Maps raw bytes to their byte-level string (e.g. " hi" -> "Ġhi").
std::string byte_level_encode(std::string_view raw);
// Inverse for one token; false when some code point is not in the alphabet.
bool byte_level_decode(std::string_view token, std::string& out);

}  // namespace tessera::tok
