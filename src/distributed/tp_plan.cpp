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
bool column(TpStyle s) { return s == TpStyle::Colwise || s == TpStyle::ColwiseGatherOutput; }
bool row(TpStyle s) { return s == TpStyle::Rowwise || s == TpStyle::RowwiseSplitInput; }

// The model's modules, as Transformers names them relative to the base model (plus lm_head).
std::vector<std::string> modules_of(const models::Architecture& arch, const models::DecoderConfig& c) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& w : arch.weights(c)) {
    std::string m = strip_model(w.name);
    for (const char* suffix : {".weight", ".bias"}) {
      const std::string s = suffix;
      if (m.size() > s.size() && m.compare(m.size() - s.size(), s.size(), s) == 0)
        m.resize(m.size() - s.size());
    }
    if (seen.insert(m).second) out.push_back(m);
  }
  if (seen.insert("lm_head").second) out.push_back("lm_head");  // tied: the embedding serves as the LM head
  return out;
}

std::string rules_to_replicate_attention() {
  std::string out;
  for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"})
    out += std::string(out.empty() ? "" : " ") + "--tp-rule layers.*.self_attn." + p +
           "=replicated_with_grad_allreduce";
  return out;
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
  const int tp = d.tp_size;
  if (tp < 1) fail("tp_size must be at least 1, got ", tp);
  if (rank < 0 || rank >= tp) fail("rank ", rank, " is outside tp_size ", tp);
  const std::vector<std::string> modules = modules_of(arch, c);

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
    for (const auto& m : modules) any = any || module_matches(r.pattern, m);
    if (!any) {
      std::vector<std::string> listed;
      std::set<std::string> seen;
      for (const auto& m : modules)
        if (seen.insert(wildcard_layers(m)).second) listed.push_back(wildcard_layers(m));
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
  // Modules that are not linear layers of a block: embeddings and norms must be replicated.
  std::map<std::string, TpStyle> styles;
  for (const auto& m : modules) styles[m] = style_of(m);
  for (const auto& [m, s] : styles) {
    const bool linear = m == "lm_head" || m.find("_proj") != std::string::npos;
    if (!linear && !replicated(s))
      fail(model, ": module '", m, "' is ", style_name(s),
           ", but only linear layers (*_proj, lm_head) can be split; ", "use replicated");
  }

  // Attention: split by heads (q/k/v colwise, o_proj rowwise) or replicated, the same in every layer.
  std::optional<bool> attn;
  t.mlp_split.assign(static_cast<size_t>(c.num_layers), 0);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string a = "layers." + std::to_string(l) + ".self_attn.";
    const TpStyle q = styles[a + "q_proj"], k = styles[a + "k_proj"], v = styles[a + "v_proj"],
                  o = styles[a + "o_proj"];
    bool split;
    if (q == TpStyle::Colwise && k == TpStyle::Colwise && v == TpStyle::Colwise && row(o))
      split = true;
    else if (replicated(q) && replicated(k) && replicated(v) && replicated(o))
      split = false;
    else
      fail(model, ": layers.", l, ".self_attn has q_proj=", style_name(q), ", k_proj=", style_name(k),
           ", v_proj=", style_name(v), ", o_proj=", style_name(o),
           "; attention is split by heads only with q/k/v colwise and o_proj rowwise, otherwise all four "
           "must be "
           "replicated");
    if (attn && *attn != split)
      fail(model, ": attention is split in some layers and replicated in others (layer ", l,
           "); the KV cache needs one layout, so use the same rules for every layer (layers.*.self_attn...)");
    attn = split;

    const std::string p = "layers." + std::to_string(l) + ".mlp.";
    std::vector<std::pair<std::string, TpStyle>> in_proj;
    for (const char* name : {"gate_proj", "up_proj", "gate_up_proj"})
      if (styles.count(p + name)) in_proj.emplace_back(name, styles[p + name]);
    const TpStyle down = styles[p + "down_proj"];
    bool cols = true, reps = replicated(down);
    std::string desc;
    for (const auto& [name, s] : in_proj) {
      cols = cols && column(s);
      reps = reps && replicated(s);
      desc += name + "=" + style_name(s) + ", ";
    }
    if (cols && row(down))
      t.mlp_split[static_cast<size_t>(l)] = 1;
    else if (!reps)
      fail(model, ": layers.", l, ".mlp has ", desc, "down_proj=", style_name(down),
           "; the MLP is split only with its input projections colwise and down_proj rowwise, otherwise all "
           "must be "
           "replicated");
  }
  t.attn_split = attn.value_or(false);

  const TpStyle head = styles["lm_head"];
  if (row(head))
    fail(model, ": lm_head=", style_name(head),
         " is not supported (use colwise_gather_output or replicated)");
  t.lm_head_split = column(head);

  // Divisibility, checked before any weight is read.
  if (t.attn_split && (c.num_kv_heads % tp != 0 || c.num_heads % tp != 0)) {
    const bool kv = c.num_kv_heads % tp != 0;
    const int64_t heads = kv ? c.num_kv_heads : c.num_heads;
    const char* what = kv ? "key-value heads" : "attention heads";
    if (!d.tp_plan_auto)
      fail(model, " has ", heads, " ", what, ", which tp_size ", tp,
           " does not divide, so attention cannot be split "
           "by heads; replicate the attention projections on every rank with ",
           rules_to_replicate_attention(),
           " (or the same rules in --tp-plan FILE.json), or pass --tp-plan auto");
    t.attn_split = false;
    std::ostringstream os;
    os << "--tp-plan auto: " << arch.name << " has " << heads << " " << what << ", which tp_size " << tp
       << " does not divide; attention (q/k/v/o_proj) is replicated on every rank";
    say(os.str());
  }
  int64_t mlp_changed = 0;
  for (auto& m : t.mlp_split)
    if (m && c.intermediate_size % tp != 0) {
      if (!d.tp_plan_auto)
        fail(model, ": intermediate_size ", c.intermediate_size, " does not divide by tp_size ", tp,
             "; replicate the MLP with --tp-rule layers.*.mlp.<proj>=replicated for each projection, or pass "
             "--tp-plan auto");
      m = 0;
      ++mlp_changed;
    }
  if (mlp_changed)
    say("--tp-plan auto: intermediate_size " + std::to_string(c.intermediate_size) +
        " does not divide by tp_size " + std::to_string(tp) + "; the MLP is replicated on every rank");
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
