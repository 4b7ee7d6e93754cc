// Tensor-parallel plans in Transformers' form: rules "module pattern -> style" over the architecture's
// default plan, resolved for one model and tp_size into a models::TpLayout, with every check done before any
// weight is read.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "models/architecture.h"
#include "tessera/model.h"

namespace tessera::distributed {

enum class TpStyle : uint8_t {
  Colwise,                      // rows of W (output features) split
  Rowwise,                      // columns of W (input features) split, outputs all-reduced
  ColwiseGatherOutput,          // colwise, outputs all-gathered
  RowwiseSplitInput,            // rowwise on a replicated input (we split it locally: same as rowwise)
  ReplicatedWithGradAllreduce,  // replicated (the gradient all-reduce is a training matter)
  Replicated,
  PackedColwise,  // colwise on a packed tensor (a fused gate/up: each part split alike; stacked experts)
};
std::optional<TpStyle> parse_style(const std::string& s);
const char* style_name(TpStyle s);
std::string valid_styles();  // "colwise, rowwise, ..."

// '*' matches one dotted component ("layers.*.mlp.up_proj" matches "layers.12.mlp.up_proj"); a leading
// "model." on either side is ignored.
bool module_matches(const std::string& pattern, const std::string& module);

// "PATTERN=STYLE" as given to --tp-rule.
TpPlanRule parse_rule(const std::string& text, const std::string& origin);
// A JSON object {"PATTERN": "STYLE", ...} (Transformers' tp_plan), rules in file order.
std::vector<TpPlanRule> read_plan_file(const std::string& path);

// This rank's layout for `c` under the architecture's default plan overridden by `d.tp_plan` (later rules
// win). The patterns are matched once against the architecture's modules (Architecture::modules); from there
// the plan is checked and laid out per module role (models::Role), never by module name, and
// GraphBuilder::linear applies it per role (TpLayout::split). Throws Error for an unknown style, a rule that
// matches no module, inconsistent styles inside an attention or MLP block, or a split that does not divide
// (unless d.tp_plan_auto, which replicates what cannot be split and appends a sentence per change to
// `notes`).
models::TpLayout resolve_tp_plan(const models::Architecture& arch, const models::DecoderConfig& c,
                                 const DistributedConfig& d, int rank, const std::string& origin,
                                 std::vector<std::string>* notes);

}  // namespace tessera::distributed
