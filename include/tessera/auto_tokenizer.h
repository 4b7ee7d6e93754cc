// Loading the tokenizer that belongs to a model, and applying its chat template,
// as Transformers' AutoTokenizer / apply_chat_template do.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/tokenizer.h"

namespace tessera {

struct AutoTokenizer {
  // `path`: a model directory (tokenizer.json [+ tokenizer_config.json]), a tokenizer.json file, a .gguf
  // file, or a repo id in the Hugging Face cache (set_hf_hub_dirs, tessera/model.h). Throws Error saying what
  // was looked for when there is none.
  static Tokenizer from_pretrained(const std::string& path);
};

// Renders the tokenizer's chat template with `messages` ([{role, content}, ...]) and the usual variables
// (bos_token, eos_token, add_generation_prompt); `extra` (an object) adds or overrides variables such as
// enable_thinking or tools. Throws Error when the tokenizer has no chat template.
std::string apply_chat_template(const Tokenizer& tok, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const nlohmann::ordered_json& extra = {});

}  // namespace tessera
