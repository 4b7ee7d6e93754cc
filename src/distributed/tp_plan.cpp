#include "distributed/tp_plan.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "io/json_util.h"
#include "tessera/error.h"

namespace tessera::distributed {

namespace {

constexpr std::pair<TpStyle, const char*> kStyles[] = {
    {TpStyle::Colwise, "colwise"},
    {TpStyle::Rowwise, "rowwise"},
    {TpStyle::ColwiseGatherOutput, "colwise_gather_output"},
    {TpStyle::RowwiseSplitInput, "rowwise_split_input"},
    {TpStyle::ReplicatedWithGradAllreduce, "replicated_with_grad_allreduce"},
    {TpStyle::Replicated, "replicated"},
    {TpStyle::PackedColwise, "packed_colwise"},
};

std::string strip_model(const std::string& s) { return s.rfind("model.", 0) == 0 ? s.substr(6) : s; }

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    if (ch == '.') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(cur);
  return out;
}

// "layers.3.mlp.up_proj" -> "layers.*.mlp.up_proj" (for listing the modules compactly).
std::string wildcard_layers(const std::string& m) {
  auto parts = split_dots(m);
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    bool digits = !parts[i].empty() && parts[i].find_first_not_of("0123456789") == std::string::npos;
    out += (i ? "." : "") + (digits ? std::string("*") : parts[i]);
  }
  return out;
}

bool replicated(TpStyle s) { return s == TpStyle::Replicated || s == TpStyle::ReplicatedWithGradAllreduce; }
bool column(TpStyle s) {
  return s == TpStyle::Colwise || s == TpStyle::ColwiseGatherOutput || s == TpStyle::PackedColwise;
}
bool row(TpStyle s) { return s == TpStyle::Rowwise || s == TpStyle::RowwiseSplitInput; }

// A module of the model, as Transformers names it relative to the base model, with its role.
struct Module {
  std::string name;
  models::Role role;
  int64_t layer;
};

// The model's modules in graph order (plus lm_head: tied, the embedding serves as the LM head).
std::vector<Module> modules_of(const models::Architecture& arch, const models::DecoderConfig& c) {
  std::vector<Module> out;
  std::set<std::string> seen;
  for (const auto& m : arch.modules(c)) {
    std::string name = strip_model(m.name);
    if (seen.insert(name).second) out.push_back({std::move(name), m.role, m.layer});
  }
  if (seen.insert("lm_head").second) out.push_back({"lm_head", models::Role::kLmHead, -1});
  return out;
}

// "layers.3.self_attn.q_proj" -> "q_proj" (leaf) and "layers.3.self_attn" (parent).
std::string leaf(const std::string& m) { return m.substr(m.rfind('.') + 1); }
std::string parent(const std::string& m) {
  const size_t dot = m.rfind('.');
  return dot == std::string::npos ? m : m.substr(0, dot);
}

}  // namespace

std::optional<TpStyle> parse_style(const std::string& s) {
  for (const auto& [style, name] : kStyles)
    if (s == name) return style;
  return std::nullopt;
}

const char* style_name(TpStyle s) {
  for (const auto& [style, name] : kStyles)
    if (s == style) return name;
  return "?";
}

std::string valid_styles() {
  std::string out;
  for (const auto& [style, name] : kStyles) out += std::string(out.empty() ? "" : ", ") + name;
  return out;
}

bool module_matches(const std::string& pattern, const std::string& module) {
  const auto p = split_dots(strip_model(pattern)), m = split_dots(strip_model(module));
  if (p.size() != m.size()) return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != "*" && p[i] != m[i]) return false;
  return true;
}

TpPlanRule parse_rule(const std::string& text, const std::string& origin) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    fail(origin, " '", text,
         "': expected PATTERN=STYLE, e.g. layers.*.self_attn.q_proj=replicated_with_grad_allreduce");
  return TpPlanRule{text.substr(0, eq), text.substr(eq + 1), origin};
}

std::vector<TpPlanRule> read_plan_file(const std::string& path) {
  // A regular file of bounded size, depth-bounded JSON (a FIFO or a directory is refused, never read).
  const nlohmann::ordered_json j =
      io::parse_ordered_json(io::read_regular_file(path, io::kMaxConfigFileBytes), path);
  if (!j.is_object()) fail(path, ": a tensor-parallel plan is a JSON object {\"PATTERN\": \"STYLE\", ...}");
  std::vector<TpPlanRule> out;
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string()) fail(path, ": rule '", k, "' must map to a style name (", valid_styles(), ")");
    out.push_back(TpPlanRule{k, v.get<std::string>(), path});
  }
  return out;
}

models::TpLayout resolve_tp_plan(const models::Architecture& arch, const models::DecoderConfig& c,
                                 const DistributedConfig& d, int rank, const std::string& origin,
                                 std::vector<std::string>* notes) {
  using models::Role;
  const int tp = d.tp_size;
  if (tp < 1) fail("tp_size must be at least 1, got ", tp);
  if (rank < 0 || rank >= tp) fail("rank ", rank, " is outside tp_size ", tp);
  const std::vector<Module> modules = modules_of(arch, c);

  // Default rules, then the user's, each checked; the last matching rule decides a module's style.
  struct Rule {
    std::string pattern;
    TpStyle style;
  };
  std::vector<Rule> rules;
  for (const auto& [p, s] : arch.tp_plan) rules.push_back({p, *parse_style(s)});
  for (const auto& r : d.tp_plan) {
    auto style = parse_style(r.style);
    if (!style)
      fail(r.origin, ": tp_plan rule '", r.pattern, "': unknown style '", r.style,
           "' (valid: ", valid_styles(), ")");
    bool any = false;
    for (const auto& m : modules) any = any || module_matches(r.pattern, m.name);
    if (!any) {
      std::vector<std::string> listed;
      std::set<std::string> seen;
      for (const auto& m : modules)
        if (seen.insert(wildcard_layers(m.name)).second) listed.push_back(wildcard_layers(m.name));
      std::string all;
      for (const auto& m : listed) all += (all.empty() ? "" : ", ") + m;
      fail(r.origin, ": tp_plan rule '", r.pattern, "' matches no module of ", arch.name, " (modules: ", all,
           ")");
    }
    rules.push_back({r.pattern, *style});
  }
  auto style_of = [&](const std::string& m) {
    TpStyle s = TpStyle::Replicated;
    for (const auto& r : rules)
      if (module_matches(r.pattern, m)) s = r.style;
    return s;
  };

  models::TpLayout t;
  t.rank = rank;
  t.size = tp;
  if (tp == 1) return t;

  auto say = [&](const std::string& s) {
    if (notes) notes->push_back(s);
  };
  const std::string model = origin + " (" + arch.name + ")";
  // From here on the plan is per role: each module's style is found once from the patterns above.
  struct Styled {
    const Module* module;
    TpStyle style;
  };
  std::map<std::string, Styled> styles;  // by name (sorted, so the first error below names the same module)
  for (const auto& m : modules) styles.emplace(m.name, Styled{&m, style_of(m.name)});
  // Modules that are not linear layers (the embedding, norms) must be replicated.
  for (const auto& [m, s] : styles)
    if (!models::is_linear(s.module->role) && !replicated(s.style))
      fail(model, ": module '", m, "' is ", style_name(s.style),
           ", but only linear layers (*_proj, lm_head) can be split; ", "use replicated");
  // Linear-attention projections run whole on every rank: replicated, or gathered (Transformers' plan for
  // them, colwise_gather_output: the same numbers).
  for (const auto& [m, s] : styles)
    if (s.module->role == Role::kLinearMixer && !replicated(s.style) &&
        s.style != TpStyle::ColwiseGatherOutput)
      fail(model, ": module '", m, "' is ", style_name(s.style),
           ", but linear-attention projections run whole on every rank; use replicated or "
           "colwise_gather_output");
  // The linear layers by (layer, role); a role a layer lacks counts as replicated.
  std::map<std::pair<int64_t, Role>, Styled> by_role;
  for (const auto& [m, s] : styles)
    if (models::is_linear(s.module->role))
      by_role.emplace(std::make_pair(s.module->layer, s.module->role), s);
  struct Part {
    std::string name;   // the module's leaf name, e.g. "q_proj"
    std::string block;  // its parent, e.g. "layers.0.self_attn"
    TpStyle style;
  };
  auto part = [&](int64_t layer, Role role, const char* absent, const std::string& block) {
    auto it = by_role.find({layer, role});
    if (it == by_role.end()) return Part{absent, block, TpStyle::Replicated};
    return Part{leaf(it->second.module->name), parent(it->second.module->name), it->second.style};
  };

  // Attention: split by heads (q/k/v colwise, o_proj rowwise) or replicated, the same in every layer.
  std::optional<bool> attn;
  t.mlp_split.assign(static_cast<size_t>(c.num_layers), 0);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string a = "layers." + std::to_string(l) + ".self_attn";
    const Part o = part(l, Role::kAttnO, "o_proj", a);
    bool split;
    if (by_role.count({l, Role::kAttnQkv})) {
      // A fused qkv_proj (Phi-3): Transformers' plan has it colwise_gather_output with o_proj
      // rowwise_split_input (it slices q/k/v after a gather); we split its q, k and v blocks by heads and
      // keep them split into o_proj: the same numbers with one all-reduce and no gather.
      const Part qkv = part(l, Role::kAttnQkv, "qkv_proj", a);
      if (column(qkv.style) && row(o.style))
        split = true;
      else if (replicated(qkv.style) && replicated(o.style))
        split = false;
      else
        fail(model, ": ", qkv.block, " has ", qkv.name, "=", style_name(qkv.style), ", ", o.name, "=",
             style_name(o.style),
             "; attention is split by heads only with qkv_proj colwise and o_proj rowwise, otherwise "
             "both must be replicated");
    } else {
      const Part q = part(l, Role::kAttnQ, "q_proj", a);
      Part k = part(l, Role::kAttnK, "k_proj", a), v = part(l, Role::kAttnV, "v_proj", a);
      // A layer without its own keys (Gemma 4's layers sharing an earlier layer's) or values (its values
      // are the keys' projection) splits as its queries (keys) do.
      if (by_role.count({l, Role::kAttnQ}) && !by_role.count({l, Role::kAttnK})) k.style = q.style;
      if (by_role.count({l, Role::kAttnQ}) && !by_role.count({l, Role::kAttnV})) v.style = k.style;
      const auto gathered = [](TpStyle s) { return s == TpStyle::ColwiseGatherOutput; };
      if (q.style == TpStyle::Colwise && k.style == TpStyle::Colwise && v.style == TpStyle::Colwise &&
          row(o.style))
        split = true;
      else if (replicated(q.style) && replicated(k.style) && replicated(v.style) && replicated(o.style))
        split = false;
      else if (gathered(q.style) && gathered(k.style) && gathered(v.style) &&
               (o.style == TpStyle::RowwiseSplitInput || replicated(o.style)))
        // q/k/v gathered whole on every rank (OLMo's plan): attention runs whole on each, as replicated,
        // o_proj included (the same numbers as its split input summed by an all-reduce, without the gather).
        split = false;
      else
        fail(model, ": ", q.block, " has ", q.name, "=", style_name(q.style), ", ", k.name, "=",
             style_name(k.style), ", ", v.name, "=", style_name(v.style), ", ", o.name, "=",
             style_name(o.style),
             "; attention is split by heads only with q/k/v colwise and o_proj rowwise, otherwise all four "
             "must be "
             "replicated");
    }
    if (split && arch.unsplit_attention)
      fail(model, ": attention cannot be split by heads (", "layers." + std::to_string(l) + ".self_attn",
           "): ", arch.name, " ", arch.unsplit_attention,
           "; replicate q/k/v/o_proj (or gather them: colwise_gather_output, "
           "rowwise_split_input, its default plan)");
    if (attn && *attn != split)
      fail(model, ": attention is split in some layers and replicated in others (layer ", l,
           "); the KV cache needs one layout, so use the same rules for every layer (layers.*.self_attn...)");
    attn = split;

    // MLP: its input projections (gate and up, or the fused gate_up) colwise and down rowwise, or replicated.
    const std::string p = "layers." + std::to_string(l) + ".mlp";
    // A sparse layer's experts (mlp.experts.gate_up_proj packed_colwise, mlp.experts.down_proj rowwise) are
    // its MLP: each rank a slice of every expert's intermediate dimension.
    const bool sparse = by_role.count({l, Role::kExpertsDown}) > 0;
    const Part down = sparse ? part(l, Role::kExpertsDown, "experts.down_proj", p)
                             : part(l, Role::kMlpDown, "down_proj", p);
    bool cols = true, reps = replicated(down.style), rows = row(down.style);
    std::string desc;
    for (Role r : {Role::kMlpGate, Role::kMlpUp, Role::kMlpGateUp, Role::kExpertsGateUp}) {
      if (!by_role.count({l, r})) continue;
      const Part in = part(l, r, "", p);
      cols = cols && column(in.style);
      reps = reps && replicated(in.style);
      desc += in.name + "=" + style_name(in.style) + ", ";
    }
    // A sparse layer's shared expert (mlp.shared_expert.*, the MLP's roles) splits with its experts.
    if (sparse && by_role.count({l, Role::kMlpDown})) {
      const Part shared_down = part(l, Role::kMlpDown, "", p);
      rows = rows && row(shared_down.style);
      reps = reps && replicated(shared_down.style);
      desc += "shared_expert." + shared_down.name + "=" + style_name(shared_down.style) + ", ";
    }
    if (cols && rows)
      t.mlp_split[static_cast<size_t>(l)] = 1;
    else if (!reps)
      fail(model, ": ", down.block, " has ", desc, down.name, "=", style_name(down.style),
           "; the MLP is split only with its input projections colwise and down_proj rowwise, otherwise all "
           "must be "
           "replicated");
  }
  t.attn_split = attn.value_or(false);

  const Part head = part(-1, Role::kLmHead, "lm_head", "");
  if (row(head.style))
    fail(model, ": ", head.name, "=", style_name(head.style),
         " is not supported (use colwise_gather_output or replicated)");
  t.lm_head_split = column(head.style);

  // Divisibility, checked before any weight is read.
  // The key-value heads of some layer that tp_size does not divide (Gemma 4's full layers may have fewer).
  int64_t odd_kv = c.num_kv_heads % tp != 0 ? c.num_kv_heads : 0;
  for (int64_t l = 0; l < c.num_layers && odd_kv == 0; ++l)
    if (c.layer_has_cache(l) && c.kv_heads_of(l) % tp != 0) odd_kv = c.kv_heads_of(l);
  if (t.attn_split && (odd_kv != 0 || c.num_heads % tp != 0)) {
    const bool kv = odd_kv != 0;
    const int64_t heads = kv ? odd_kv : c.num_heads;
    const char* what = kv ? "key-value heads" : "attention heads";
    if (!d.tp_plan_auto) {
      // The rules that replicate the attention projections, named as this model names them.
      std::string replicate;
      for (Role r : {Role::kAttnQ, Role::kAttnK, Role::kAttnV, Role::kAttnQkv, Role::kAttnO})
        if (auto it = by_role.find({0, r}); it != by_role.end())
          replicate += std::string(replicate.empty() ? "" : " ") + "--tp-rule " +
                       wildcard_layers(it->second.module->name) + "=replicated_with_grad_allreduce";
      fail(model, " has ", heads, " ", what, ", which tp_size ", tp,
           " does not divide, so attention cannot be split "
           "by heads; replicate the attention projections on every rank with ",
           replicate, " (or the same rules in --tp-plan FILE.json), or pass --tp-plan auto");
    }
    t.attn_split = false;
    std::ostringstream os;
    os << "--tp-plan auto: " << arch.name << " has " << heads << " " << what << ", which tp_size " << tp
       << " does not divide; attention (q/k/v/o_proj) is replicated on every rank";
    say(os.str());
  }
  int64_t mlp_changed = 0;
  std::string mlp_why;
  for (size_t l = 0; l < t.mlp_split.size(); ++l) {
    const bool sparse = c.layer_is_sparse(static_cast<int64_t>(l));
    const int64_t inter = sparse ? c.moe_intermediate_size : c.intermediate_size;
    const char* key = sparse ? "moe_intermediate_size" : "intermediate_size";
    // Beside a sparse layer's experts: its shared expert, or (Gemma 4) its dense MLP, split with them.
    const int64_t shared =
        sparse ? (c.moe_beside_mlp ? c.intermediate_size : c.shared_expert_intermediate_size) : 0;
    if (!t.mlp_split[l] || (inter % tp == 0 && shared % tp == 0)) continue;
    // The size that does not divide: the experts' (or the MLP's), else the shared expert's.
    const bool shared_fails = inter % tp == 0;
    const char* what =
        shared_fails ? (c.moe_beside_mlp ? "intermediate_size" : "shared_expert_intermediate_size") : key;
    const int64_t size = shared_fails ? shared : inter;
    if (!d.tp_plan_auto)
      fail(model, ": ", what, " ", size, " does not divide by tp_size ", tp,
           shared_fails
               ? "; replicate the sparse blocks with --tp-rule layers.*.mlp.experts.gate_up_proj=replicated, "
                 "--tp-rule layers.*.mlp.experts.down_proj=replicated and the same for "
                 "layers.*.mlp.shared_expert.<proj>, or pass --tp-plan auto"
           : sparse
               ? "; replicate the experts with --tp-rule layers.*.mlp.experts.gate_up_proj=replicated and "
                 "--tp-rule layers.*.mlp.experts.down_proj=replicated, or pass --tp-plan auto"
               : "; replicate the MLP with --tp-rule layers.*.mlp.<proj>=replicated for each projection, or "
                 "pass --tp-plan auto");
    t.mlp_split[l] = 0;
    ++mlp_changed;
    mlp_why = std::string(what) + " " + std::to_string(size);
  }
  if (mlp_changed == static_cast<int64_t>(t.mlp_split.size()))
    say("--tp-plan auto: " + mlp_why + " does not divide by tp_size " + std::to_string(tp) +
        "; the MLP is replicated on every rank");
  else if (mlp_changed)
    say("--tp-plan auto: " + mlp_why + " does not divide by tp_size " + std::to_string(tp) + "; the MLP of " +
        std::to_string(mlp_changed) + " layer" + (mlp_changed == 1 ? "" : "s") +
        " is replicated on every rank");
  if (t.lm_head_split && c.vocab_size % tp != 0) {
    if (!d.tp_plan_auto)
      fail(model, ": vocab_size ", c.vocab_size, " does not divide by tp_size ", tp,
           "; use --tp-rule lm_head=replicated or --tp-plan auto");
    t.lm_head_split = false;
    say("--tp-plan auto: vocab_size " + std::to_string(c.vocab_size) + " does not divide by tp_size " +
        std::to_string(tp) + "; lm_head is replicated on every rank");
  }
  return t;
}

}  // namespace tessera::distributed
