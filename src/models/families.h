// What the architectures of one family share beyond blocks.h: the config keys and defaults Gemma 2 and
// Gemma 3 read alike (gemma2.cpp), Qwen2Config's defaults that Qwen3Config shares (qwen2.cpp), and the
// q/k-norm entries of the tensor-parallel plans of Qwen3 and Gemma 3 (qwen3.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "models/architecture.h"
#include "models/config.h"

namespace tessera::models {

// Gemma 2 / Gemma 3: the rows of their key tables that both read alike, and the defaults Gemma2Config and
// Gemma3TextConfig share.
std::vector<ConfigKey> gemma_config_keys();
ConfigDefaults gemma_defaults(const char* model_type, int64_t max_position_embeddings);

// Qwen2Config's defaults, which Qwen3Config shares but for head_dim.
ConfigDefaults qwen_defaults(const char* model_type);

// Mixtures of experts (qwen3_moe.cpp): the keys every MoE config reads alike (own_intermediate: and
// moe_intermediate_size), and their parser into c.num_experts (num_local_experts or num_experts, the same
// setting under two names), c.num_experts_per_tok and c.moe_intermediate_size (intermediate 0: the config's
// intermediate_size, as Mixtral's experts use).
struct MoeDefaults {
  int64_t experts = 0, per_token = 0, intermediate = 0;
};
std::vector<ConfigKey> moe_config_keys(bool own_intermediate);
void parse_moe_experts(const ConfigReader& r, DecoderConfig& c, const MoeDefaults& d);
// Qwen2/Qwen3-MoE's and Qwen3-Next's sparse layers into c.layer_sparse: layer l is sparse when (l + 1) is a
// multiple of decoder_sparse_step (absent: 1) and mlp_only_layers (absent or null: none) does not list it.
void parse_sparse_layers(const ConfigReader& r, DecoderConfig& c);

// self_attn.{q,k}_norm replicated_with_grad_allreduce (Qwen3's and Gemma 3's base_model_tp_plan).
TpPlan qk_norm_tp_plan();

}  // namespace tessera::models
