#include "tessera/auto_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "io/gguf.h"
#include "io/hf_cache.h"
#include "io/io_util.h"
#include "tessera/chat_template.h"
#include "tessera/error.h"
#include "tokenizer/gguf_vocab.h"

namespace tessera {

namespace fs = std::filesystem;

Tokenizer AutoTokenizer::from_pretrained(const std::string& path) {
  const std::string p = io::resolve_model(path);
  if (io::is_directory(p)) {
    if (io::path_exists(io::path_join(p, "tokenizer.json"))) return Tokenizer::from_dir(p);
    // A GGUF-only directory: the same single .gguf file open_checkpoint would pick.
    std::vector<std::string> ggufs;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(p, ec))
      if (e.path().extension() == ".gguf" && io::is_regular_file(e.path().string()))
        ggufs.push_back(e.path().string());
    std::sort(ggufs.begin(), ggufs.end());
    if (ggufs.size() == 1) return from_pretrained(ggufs[0]);
    if (ggufs.size() > 1) fail(p, ": holds several GGUF files; pass one of them as the model");
    fail(p, ": no tokenizer.json (or .gguf) in this directory; give token ids instead of text");
  }
  // The format is decided by the content: a GGUF file whatever its name, else a tokenizer.json
  // (read_regular_file refuses FIFOs and devices, and a .gguf name without the magic gets a clear error).
  if (io::has_gguf_magic(p)) return Tokenizer::from_gguf(gguf_tokenizer_data(*io::GgufFile::open(p)));
  if (fs::path(p).extension() == ".gguf" && io::is_regular_file(p))
    fail(p, ": named .gguf but does not start with the GGUF magic bytes; not a GGUF file (or damaged)");
  return Tokenizer::from_json_file(p);
}

std::string apply_chat_template(const Tokenizer& tok, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const nlohmann::ordered_json& extra) {
  if (tok.chat_template().empty())
    fail("this tokenizer has no chat template (tokenizer_config.json chat_template)");
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
