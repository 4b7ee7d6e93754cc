#include "tessera/auto_tokenizer.h"

#include <filesystem>

#include "io/gguf.h"
#include "io/hf_cache.h"
#include "tessera/chat_template.h"
#include "tessera/error.h"
#include "tokenizer/gguf_vocab.h"

namespace tessera {

namespace fs = std::filesystem;

Tokenizer AutoTokenizer::from_pretrained(const std::string& path) {
  std::string p = io::resolve_model(path);
  if (fs::is_directory(p)) {
    if (fs::exists(fs::path(p) / "tokenizer.json")) return Tokenizer::from_dir(p);
    for (const auto& e : fs::directory_iterator(p))
      if (e.path().extension() == ".gguf") return from_pretrained(e.path().string());
    fail(p, ": no tokenizer.json (or .gguf) in this directory; pass token ids with --input-ids instead");
  }
  if (fs::path(p).extension() == ".gguf") return Tokenizer::from_gguf(gguf_tokenizer_data(*io::GgufFile::open(p)));
  return Tokenizer::from_json_file(p);
}

std::string apply_chat_template(const Tokenizer& tok, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const nlohmann::ordered_json& extra) {
  if (tok.chat_template().empty()) fail("this tokenizer has no chat template (tokenizer_config.json chat_template)");
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  vars["messages"] = messages;
  vars["add_generation_prompt"] = add_generation_prompt;
  vars["bos_token"] = tok.bos_token();
  vars["eos_token"] = tok.eos_token();
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) vars[it.key()] = it.value();
  return ChatTemplate::parse(tok.chat_template()).render(vars);
}

}  // namespace tessera
