// Tokenizer data carried by GGUF files, and where to find the SmolLM2 GGUF.
#pragma once
#include <optional>
#include <string>

#include "tessera/tokenizer.h"

namespace tessera::io {
class GgufFile;
}

namespace tessera {

// Reads tokenizer.ggml.* and tokenizer.chat_template from an open GGUF file.
// Throws Error naming the file when a key has the wrong type.
GgufTokenizerData gguf_tokenizer_data(const io::GgufFile& file);

namespace tok {
// The split regex transformers' GGUF converter uses for tokenizer.ggml.pre;
// "" when it keeps GPT-2's ByteLevel regex (e.g. "smollm", "gpt2", "default").
std::string gguf_pre_tokenizer_regex(const std::string& pre);
}  // namespace tok

}  // namespace tessera
