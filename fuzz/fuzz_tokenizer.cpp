// libFuzzer target: arbitrary bytes through encode/decode/streaming of a small
// byte-level tokenizer, and arbitrary bytes parsed as tokenizer.json. Must
// never crash; tessera::Error is the only acceptable failure.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/error.h"
#include "tessera/tokenizer.h"
#include "tokenizer/unicode_util.h"

namespace {

// Llama-3-like pipeline with every added-token flag, small enough to build at start-up.
constexpr const char* kTinyJson = R"JSON({
 "added_tokens": [
  {"id": 20, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
  {"id": 21, "content": "<m>", "single_word": false, "lstrip": true, "rstrip": true, "normalized": false, "special": true},
  {"id": 22, "content": "ab", "single_word": true, "lstrip": false, "rstrip": false, "normalized": true, "special": false}],
 "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}]},
 "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
  {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
  {"type": "Split", "pattern": {"String": "x"}, "behavior": "MergedWithNext", "invert": false},
  {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": false}]},
 "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
   "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [20], "tokens": ["<s>"]}}},
 "decoder": {"type": "ByteLevel"},
 "model": {"type": "BPE", "ignore_merges": true,
  "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "Ġa": 5, "Ġab": 6, "abc": 7, "x": 8, "1": 9, "12": 10, "Ã": 11, "©": 12, "Ã©": 13, "Ċ": 14, "2": 15},
  "merges": ["a b", ["Ġ", "a"], "Ġa b", "ab c", "1 2", "Ã ©"]}
})JSON";

const tessera::Tokenizer& tiny() {
  static const tessera::Tokenizer tok = tessera::Tokenizer::from_json_string(kTinyJson, "", "fuzz-tiny");
  return tok;
}

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const tessera::Tokenizer& tok = tiny();
  for (bool special : {false, true}) {
    const std::vector<int32_t> ids = tok.encode(text, special);
    for (bool skip : {false, true}) {
      const std::string full = tok.decode(ids, skip);
      check(tessera::tok::utf8_is_valid(full));
      tessera::StreamDecoder sd(tok, skip);
      std::string streamed;
      for (int32_t id : ids) streamed += sd.push(id);
      streamed += sd.flush();
      check(streamed == full);
    }
  }
  // Arbitrary ids (including unknown and negative) must decode to valid UTF-8.
  std::vector<int32_t> raw_ids;
  for (size_t i = 0; i + 4 <= size && raw_ids.size() < 64; i += 4) {
    raw_ids.push_back(static_cast<int32_t>(data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)) % 40);
  }
  check(tessera::tok::utf8_is_valid(tok.decode(raw_ids)));

  // The same bytes as a tokenizer.json: either a tokenizer or an Error.
  try {
    const tessera::Tokenizer t = tessera::Tokenizer::from_json_string(text, "", "fuzz.json");
    (void)t.decode(t.encode("Hello wörld 123 <s>", true));
  } catch (const tessera::Error&) {
  }
  return 0;
}
