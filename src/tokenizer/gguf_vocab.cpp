// GGUF metadata (tokenizer.ggml.*) -> GgufTokenizerData.
#include "tokenizer/gguf_vocab.h"

#include <climits>

#include "io/gguf.h"
#include "tessera/error.h"

namespace tessera {

GgufTokenizerData gguf_tokenizer_data(const io::GgufFile& f) {
  GgufTokenizerData d;
  d.source = f.path();
  d.model = f.get_string("tokenizer.ggml.model").value_or("");
  d.pre = f.get_string("tokenizer.ggml.pre").value_or("default");
  if (auto t = f.get_string_array("tokenizer.ggml.tokens")) d.tokens = std::move(*t);
  if (auto m = f.get_string_array("tokenizer.ggml.merges")) d.merges = std::move(*m);
  if (auto types = f.get_int_array("tokenizer.ggml.token_type")) {
    d.token_types.reserve(types->size());
    for (int64_t t : *types) {
      if (t < INT32_MIN || t > INT32_MAX)
        fail(f.path(), ": tokenizer.ggml.token_type value ", t, " does not fit a 32-bit token type");
      d.token_types.push_back(static_cast<int32_t>(t));
    }
  }
  auto id = [&](const char* key) -> std::optional<int32_t> {
    const auto v = f.get_int(key);
    if (!v) return std::nullopt;
    if (*v < 0 || *v > INT32_MAX) fail(f.path(), ": ", key, " = ", *v, " is not a valid token id");
    return static_cast<int32_t>(*v);
  };
  d.bos_id = id("tokenizer.ggml.bos_token_id");
  d.eos_id = id("tokenizer.ggml.eos_token_id");
  d.pad_id = id("tokenizer.ggml.padding_token_id");
  d.unk_id = id("tokenizer.ggml.unknown_token_id");
  d.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  d.add_eos = f.get_bool("tokenizer.ggml.add_eos_token");
  d.chat_template = f.get_string("tokenizer.chat_template").value_or("");
  if (d.model.empty()) fail(f.path(), ": tokenizer.ggml.model is missing");
  return d;
}

}  // namespace tessera
