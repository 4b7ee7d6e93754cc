// libFuzzer target: arbitrary bytes as tokenizer_config.json beside a small
// real tokenizer.json (added_tokens_decoder, special tokens, chat_template),
// and the same bytes as tokenizer.json beside a real tokenizer_config.json.
// Every failure must be a one-line tessera::Error naming the file, never a raw
// library message, a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "tessera/error.h"
#include "tessera/tokenizer.h"

namespace {

constexpr const char* kTokenizerJson = R"JSON({
 "added_tokens": [
  {"id": 9, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
  {"id": 10, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
 "normalizer": {"type": "NFC"},
 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
 "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
   "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [9], "tokens": ["<s>"]}}},
 "decoder": {"type": "ByteLevel"},
 "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "Ġa": 5, "x": 6, "1": 7, "2": 8},
  "merges": ["a b", "Ġ a"]}
})JSON";

constexpr const char* kConfigJson = R"JSON({
 "bos_token": "<s>", "eos_token": {"content": "</s>", "special": true}, "pad_token": null,
 "added_tokens_decoder": {"11": {"content": "<pad>", "special": true}},
 "chat_template": [{"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"}]
})JSON";

void check(bool ok) {
  if (!ok) __builtin_trap();
}

// A one-line message that names the file and carries no library text (unless the input holds that text
// itself: a parse error quotes the last token read).
void check_message(const tessera::Error& e, const char* file, const std::string& input) {
  const std::string m = e.what();
  check(m.find('\n') == std::string::npos);
  check(m.find(file) != std::string::npos);
  check(m.find("[json.exception.") == std::string::npos || input.find("json.exception") != std::string::npos);
}

void exercise(const tessera::Tokenizer& t) {
  (void)t.decode(t.encode("ab x12 <s></s><pad>", true));
  (void)t.bos_token();
  (void)t.eos_token();
  (void)t.special_token_ids();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    exercise(tessera::Tokenizer::from_json_strings(kTokenizerJson, text, "fz/tokenizer.json",
                                                   "fz/tokenizer_config.json"));
  } catch (const tessera::Error& e) {
    // An empty config is "no config"; anything else that fails must blame the config file.
    check_message(e, "fz/tokenizer_config.json", text);
  }
  try {
    exercise(tessera::Tokenizer::from_json_strings(text, kConfigJson, "fz/tokenizer.json",
                                                   "fz/tokenizer_config.json"));
  } catch (const tessera::Error& e) {
    check_message(e, "fz/tokenizer", text);
  }
  return 0;
}
