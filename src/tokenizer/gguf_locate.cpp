// GGUF pre-tokenizer names -> split regexes.
#include <map>

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

}  // namespace tessera
