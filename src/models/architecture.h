// An architecture = how to read its config, which weights it needs, how to build its graph for a ShapeKey,
// and its default tensor-parallel plan. One file per architecture (qwen3.cpp, llama.cpp, glm4.cpp) builds its
// decoder layer from the shared blocks (blocks.h) and is one row of the table in registry.cpp.
#pragma once
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "models/config.h"

namespace tessera::models {

// A weight the architecture needs. Matrices are stored in the model dtype;
// vectors (norm weights, biases) are kept in float32.
struct WeightSpec {
  std::string name;  // HF name
  Shape shape;
  bool is_vector = false;
};

// A module the graph reads (a linear layer, a norm, the embedding) as Hugging Face names it, with its role.
struct ModuleSpec {
  std::string name;  // e.g. "model.layers.0.self_attn.q_proj"
  Role role = Role::kOther;
  int64_t layer = -1;  // its decoder layer; -1 outside them
};

// A tensor-parallel plan as Transformers writes base_model_tp_plan: (module pattern, style), e.g.
// ("layers.*.self_attn.q_proj", "colwise").
using TpPlan = std::vector<std::pair<std::string, std::string>>;

struct Architecture {
  const char* name;  // the value of config.json architectures[0], e.g. "Qwen3ForCausalLM"
  std::function<DecoderConfig(const nlohmann::json& config, const std::string& origin)> parse_config;
  std::function<std::vector<WeightSpec>(const DecoderConfig& c)> weights;
  std::function<graph::Graph(const DecoderConfig& c, const graph::ShapeKey& key)> build_graph;
  // The modules build_graph reads, in graph order, each once with its role. distributed::resolve_tp_plan
  // matches the plan's patterns against these names and resolves the plan per role.
  std::function<std::vector<ModuleSpec>(const DecoderConfig& c)> modules;
  // Tensors a checkpoint may carry that we do not need (e.g. rotary caches), as name suffixes.
  std::vector<std::string> ignorable_suffixes;
  // Tensors it never reads, as name prefixes (Qwen3-Next's multi-token-prediction layers, mtp.*), as
  // Transformers ignores them at load.
  std::vector<std::string> ignorable_prefixes;
  // Default tensor-parallel plan (Transformers' base_model_tp_plan of the architecture, plus lm_head),
  // resolved against the user's rules by distributed::resolve_tp_plan.
  TpPlan tp_plan;
  // Every config.json key Transformers' configuration / modeling file for this architecture reads, and what
  // we do with it (besides common_config_keys()). Kept in the architecture's file; tests/test_config_keys.cpp
  // checks each refused key is refused and that configs saved by Transformers use only known keys.
  std::vector<ConfigKey> config_keys;
  // Why attention cannot be split by heads under tensor parallelism (nullptr: it can). OLMo's q/k norms
  // span every head.
  const char* unsplit_attention = nullptr;
};

// The weights a graph reads (each stored tensor once, in graph order; linear in the number of nodes).
std::vector<WeightSpec> weight_specs_of(const graph::Graph& g);

// The registry. Throws Error listing the supported architectures when `name` is unknown.
const Architecture& find_architecture(const std::string& name, const std::string& origin);
std::vector<std::string> supported_architectures();

}  // namespace tessera::models
