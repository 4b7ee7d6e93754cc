// An architecture = how to read its config, which weights it needs, and how
// to build its graph for a ShapeKey. One file per architecture registers one
// entry in the table in registry.cpp.
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

struct Architecture {
  const char* name;  // the value of config.json architectures[0], e.g. "Qwen3ForCausalLM"
  std::function<DecoderConfig(const nlohmann::json& config, const std::string& origin)> parse_config;
  std::function<std::vector<WeightSpec>(const DecoderConfig& c)> weights;
  std::function<graph::Graph(const DecoderConfig& c, const graph::ShapeKey& key)> build_graph;
  // Tensors a checkpoint may carry that we do not need (e.g. rotary caches), as name suffixes.
  std::vector<std::string> ignorable_suffixes;
  // Default tensor-parallel plan, as Transformers writes it: (module pattern, style), e.g.
  // ("layers.*.self_attn.q_proj", "colwise"). Resolved against the user's rules by distributed::resolve_tp_plan.
  std::vector<std::pair<std::string, std::string>> tp_plan;
  // Every config.json key Transformers' configuration / modeling file for this architecture reads, and what
  // we do with it (besides common_config_keys()). Kept in the architecture's file; tests/test_config_keys.cpp
  // checks each refused key is refused and that configs saved by Transformers use only known keys.
  std::vector<ConfigKey> config_keys;
};

// The weights a graph reads (each stored tensor once, in graph order; linear in the number of nodes).
std::vector<WeightSpec> weight_specs_of(const graph::Graph& g);

struct LayerStyle;
// A Llama-family architecture (blocks.h) with its own config parser and key table; the weight list is
// derived from the graph with weight_specs_of.
Architecture llama_family_with(const char* name, const LayerStyle& style,
                               std::function<DecoderConfig(const nlohmann::json&, const std::string&)> parse,
                               std::vector<ConfigKey> keys);

// The registry. Throws Error listing the supported architectures when `name` is unknown.
const Architecture& find_architecture(const std::string& name, const std::string& origin);
std::vector<std::string> supported_architectures();

}  // namespace tessera::models
