// An architecture = how to read its config, which weights it needs, and how
// to build its graph for a ShapeKey. One file per architecture registers one
// entry in the table in registry.cpp.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

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
  // ("layers.*.self_attn.q_proj", "colwise"). Resolved against the user's rules by dist::resolve_tp_plan.
  std::vector<std::pair<std::string, std::string>> tp_plan;
};

// The registry. Throws Error listing the supported architectures when `name` is unknown.
const Architecture& find_architecture(const std::string& name, const std::string& origin);
std::vector<std::string> supported_architectures();

}  // namespace tessera::models
