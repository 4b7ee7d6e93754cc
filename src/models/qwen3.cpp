// Qwen3ForCausalLM: the Llama-family decoder plus RMSNorm over each head of q
// and k before RoPE; head_dim is read from the config (Qwen3 sets it apart
// from hidden / heads); tied or untied embeddings; no biases by default.
#include "models/blocks.h"

namespace tessera::models::qwen3 {

Architecture architecture() { return llama_family_architecture("Qwen3ForCausalLM", LayerStyle{.qk_norm = true}); }

}  // namespace tessera::models::qwen3
