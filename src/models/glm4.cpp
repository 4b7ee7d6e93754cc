// Glm4ForCausalLM (GLM-4-0414): the Llama-family decoder with an RMSNorm on each sublayer's output before its
// residual add (post_self_attn_layernorm, post_mlp_layernorm), a fused mlp.gate_up_proj (gate rows first),
// q/k/v biases but none on o_proj, and rotary embedding on the first half of each head
// (partial_rotary_factor, default 0.5) in the interleaved-pair convention. The interleaving is undone when
// the q/k rows are loaded (graph::WeightView), so the shared Rope op applies.
#include "models/blocks.h"

namespace tessera::models::glm4 {

Architecture architecture() {
  return llama_family_architecture("Glm4ForCausalLM", LayerStyle{.sandwich_norms = true,
                                                                 .fused_gate_up = true,
                                                                 .rope_interleaved = true,
                                                                 .o_proj_bias = false,
                                                                 .default_partial_rotary = 0.5,
                                                                 .default_attention_bias = true});
}

}  // namespace tessera::models::glm4
