// Qwen3ForCausalLM: Llama-style decoder with RMSNorm on each head of q and k,
// head_dim read from the config (not hidden / heads), optional tied embeddings.
#include <nlohmann/json.hpp>

#include "models/blocks.h"

namespace tessera::models::qwen3 {
namespace {

constexpr LayerStyle kStyle{.qk_norm = true};

DecoderConfig parse(const nlohmann::json& j, const std::string& origin) {
  ConfigReader r(j, origin);
  DecoderConfig c;
  c.architecture = "Qwen3ForCausalLM";
  parse_common(r, c);
  c.head_dim = r.int_or("head_dim", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.qk_norm = true;
  validate(c, origin);
  return c;
}

}  // namespace

Architecture architecture() {
  return Architecture{
      .name = "Qwen3ForCausalLM",
      .parse_config = parse,
      .weights = [](const DecoderConfig& c) { return causal_lm_weights(c, kStyle); },
      .build_graph = [](const DecoderConfig& c, const graph::ShapeKey& k) { return build_causal_lm(c, k, kStyle); },
      .ignorable_suffixes = {"rotary_emb.inv_freq"},
  };
}

}  // namespace tessera::models::qwen3
