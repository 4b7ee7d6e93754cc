// LlamaForCausalLM: Llama 2/3 (rope_scaling "llama3"), SmolLM2, Mistral-style
// GQA, optional attention/MLP biases and tied embeddings.
#include <nlohmann/json.hpp>

#include "models/blocks.h"

namespace tessera::models::llama {
namespace {

constexpr LayerStyle kStyle{};

DecoderConfig parse(const nlohmann::json& j, const std::string& origin) {
  ConfigReader r(j, origin);
  DecoderConfig c;
  c.architecture = "LlamaForCausalLM";
  parse_common(r, c);
  c.head_dim = r.int_or("head_dim", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  validate(c, origin);
  return c;
}

}  // namespace

Architecture architecture() {
  return Architecture{
      .name = "LlamaForCausalLM",
      .parse_config = parse,
      .weights = [](const DecoderConfig& c) { return causal_lm_weights(c, kStyle); },
      .build_graph = [](const DecoderConfig& c, const graph::ShapeKey& k) { return build_causal_lm(c, k, kStyle); },
      .ignorable_suffixes = {"rotary_emb.inv_freq"},
  };
}

}  // namespace tessera::models::llama
