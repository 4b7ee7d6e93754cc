// LlamaForCausalLM: Llama 2/3 (rope_scaling "llama3" or "linear"), SmolLM2,
// GQA, optional attention/MLP biases (attention_bias, mlp_bias) and tied
// embeddings — all read by the shared Llama-family config parser.
#include "models/blocks.h"

namespace tessera::models::llama {

Architecture architecture() { return llama_family_architecture("LlamaForCausalLM", LayerStyle{}); }

}  // namespace tessera::models::llama
