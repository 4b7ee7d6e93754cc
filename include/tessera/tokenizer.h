// Byte-level BPE tokenizer that reproduces Hugging Face `tokenizers` exactly
// (Qwen2/Qwen3, Llama 3, GPT-2, SmolLM2 family).
//
// Sources: a tokenizer.json (+ tokenizer_config.json beside it) or the
// tokenizer.ggml.* metadata of a GGUF file.
//
// Invalid UTF-8 in the text given to encode() is not an error: each maximal
// invalid subpart is replaced by U+FFFD first, exactly like Python's
// bytes.decode("utf-8", errors="replace"), and the result is encoded.
// decode() never returns invalid UTF-8 (bytes that do not form a character
// become U+FFFD, as HF does).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// What a GGUF file carries (tokenizer.ggml.*).
struct GgufTokenizerData {
  std::string model;                 // tokenizer.ggml.model, e.g. "gpt2"
  std::string pre;                   // tokenizer.ggml.pre, e.g. "smollm", "qwen2", "llama-bpe"
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<std::string> merges;   // tokenizer.ggml.merges ("a b")
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type (1 normal, 3 control, 4 user-defined, ...)
  std::optional<int32_t> bos_id, eos_id, pad_id, unk_id;
  std::optional<bool> add_bos, add_eos;
  std::string chat_template;  // tokenizer.chat_template
  std::string source;         // the GGUF file's path, for error messages ("" when unknown)
};

class Tokenizer {
 public:
  // Reads tokenizer_config.json (and chat_template.jinja) beside the file when present. Only regular
  // files are read, each size-capped (see io/json_util.h). Throws Error naming the file.
  static Tokenizer from_json_file(const std::string& tokenizer_json);
  // `dir`/tokenizer.json (+ tokenizer_config.json). Throws Error.
  static Tokenizer from_dir(const std::string& dir);
  // Builds the tokenizer HF's GGUF converter would build. Throws Error.
  static Tokenizer from_gguf(const GgufTokenizerData& data);
  // Parses tokenizer.json text (and optionally tokenizer_config.json text);
  // `name` appears in error messages. Throws Error.
  static Tokenizer from_json_string(std::string_view tokenizer_json, std::string_view config_json = {},
                                    const std::string& name = "tokenizer.json");
  // The same with the name tokenizer_config.json errors carry (usually its path).
  static Tokenizer from_json_strings(std::string_view tokenizer_json, std::string_view config_json,
                                     const std::string& name, const std::string& config_name);

  // Ids of `text`. add_special_tokens applies the post-processor (e.g. Llama 3's BOS).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Text of `ids`; unknown ids are skipped, as HF does.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  int32_t vocab_size() const;  // including added tokens
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // "" if unknown
  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;
  std::optional<int32_t> pad_token_id() const;
  std::string bos_token() const;             // "" if none
  std::string eos_token() const;             // "" if none
  const std::string& chat_template() const;  // "" if none
  bool is_special(int32_t id) const;
  // Ids of all special added tokens (e.g. to stop generation on any of them).
  std::vector<int32_t> special_token_ids() const;

  // Raw bytes that `id` contributes to decoded text (before UTF-8 repair);
  // empty for unknown ids, and for special ids when skip_special_tokens.
  std::string token_bytes(int32_t id, bool skip_special_tokens) const;
  // Whether decoded text is the concatenation of each id's token_bytes (a byte-level decoder), so that a
  // token's bytes are known on their own (constrained decoding needs that).
  bool decodes_bytes() const;

  struct Impl;

 private:
  friend class StreamDecoder;
  explicit Tokenizer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// Incremental detokenisation for streaming: never emits a broken UTF-8
// sequence; the concatenation of all push() results and flush() equals
// decode() of all pushed ids.
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tok, bool skip_special_tokens);
  std::string push(int32_t id);  // newly completed text (may be "")
  std::string flush();           // whatever is pending at the end (invalid bytes -> U+FFFD)

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  bool first_ = true;    // for decoders that join tokens with a separator
  std::string pending_;  // bytes of an incomplete UTF-8 sequence
};

}  // namespace tessera
