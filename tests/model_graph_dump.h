// Everything the model code makes for one fixture config, as text: the weight list, tensor-parallel plans
// (layouts, notes and errors) and the graphs of a set of ShapeKeys (prefill/decode, tp 1/2/4, sampling on and
// off, row-mapped steps), each graph with every node attribute. tests/test_model_graphs.cpp compares this
// with tests/fixtures/graph_dumps/<fixture>.txt; how those were made is written there. Uses only what the
// public model interface offered at commit d1eefc3 (Architecture::parse_config / weights / build_graph,
// distributed::resolve_tp_plan, graph::append_sampling), so the same code can be compiled against older
// sources.
#pragma once
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "distributed/tp_plan.h"
#include "graph/graph.h"
#include "models/architecture.h"
#include "models/config.h"
#include "tessera/error.h"

namespace tessera::graph_dump {

// Fixture directories under tests/fixtures with a config.json each.
inline std::vector<std::string> fixtures() {
  return {"models/glm4",
          "models/glm4_v4",
          "models/llama3_v4",
          "models/llama_bias",
          "models/llama_gqa",
          "models/llama_tp4",
          "models/qwen3_tied",
          "models/qwen3_tp4",
          "models/qwen3_untied",
          "variants/llama_gelu",
          "variants/llama_gelu_tanh",
          "variants/llama_relu",
          "variants/qwen3_gelu_new",
          "variants/qwen3_sliding",
          "variants/qwen3_sliding_long"};
}

inline std::string hex_float(float f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%a", static_cast<double>(f));
  return buf;
}

inline std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

// Graph::dump() plus, under each node, every attribute that differs from a default Node, the rope tables
// (exact floats) and the outputs.
inline std::string full_dump(const graph::Graph& g) {
  std::ostringstream os;
  const std::string lines = g.dump();
  std::istringstream in(lines);
  std::string line;
  std::getline(in, line);
  os << line << "\n";  // "graph <key>"
  const graph::Node d{};
  for (size_t i = 0; i < g.nodes.size() && std::getline(in, line); ++i) {
    const graph::Node& n = g.nodes[i];
    os << line;
    std::ostringstream a;
    if (n.op == graph::Op::Input) a << " input_kind=" << static_cast<int>(n.input_kind);
    if (n.layer != d.layer) a << " layer=" << n.layer;
    if (n.which != d.which) a << " which=" << n.which;
    if (n.dim != d.dim) a << " dim=" << n.dim;
    if (n.eps != d.eps) a << " eps=" << hex_float(n.eps);
    if (n.heads != d.heads) a << " heads=" << n.heads;
    if (n.kv_heads != d.kv_heads) a << " kv_heads=" << n.kv_heads;
    if (n.head_dim != d.head_dim) a << " head_dim=" << n.head_dim;
    if (n.rot_dim != d.rot_dim) a << " rot_dim=" << n.rot_dim;
    if (n.scale != d.scale) a << " scale=" << hex_float(n.scale);
    if (n.window != d.window) a << " window=" << n.window;
    if (n.act != d.act) a << " act=" << static_cast<int>(n.act);
    if (n.rope_table != d.rope_table) a << " rope_table=" << n.rope_table;
    const graph::WeightView& v = n.view;
    if (!(v == d.view))
      a << " view{" << shape_text(v.stored) << " rows " << v.row_begin << "+" << v.rows << " split "
        << v.split_dim << "/" << v.shards << " rank0 " << v.rank0_only << " rope " << v.rope_head << "/"
        << v.rope_rot << "}";
    if (!a.str().empty()) os << "  |" << a.str();
    os << "\n";
  }
  while (std::getline(in, line)) os << line << "\n";  // "outputs: ..."
  for (size_t t = 0; t < g.rope_tables.size(); ++t) {
    os << "rope_table " << t << ":";
    const graph::RopeTable& r = g.rope_tables[t];
    for (float f : r.inv_freq) os << " " << hex_float(f);
    if (r.varies()) {  // longrope / dynamic: past switch_len
      os << " | past " << r.switch_len << ":";
      if (r.dynamic) os << " dynamic theta " << r.theta << " factor " << r.factor << " dim " << r.dim;
      for (float f : r.long_inv_freq) os << " " << hex_float(f);
    }
    os << "\n";
  }
  return os.str();
}

struct PlanCase {
  const char* name;
  int tp;
  std::vector<TpPlanRule> rules;
  bool autop;
  std::vector<int> ranks;  // the ranks whose graphs are dumped (decode with sampling; rank 0 also prefill)
};

inline std::vector<PlanCase> plan_cases() {
  auto rule = [](const char* p, const char* s) { return TpPlanRule{p, s, "case"}; };
  std::vector<TpPlanRule> rep_attn;
  for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"})
    rep_attn.push_back(
        rule((std::string("layers.*.self_attn.") + p).c_str(), "replicated_with_grad_allreduce"));
  return {
      {"tp1", 1, {}, false, {0}},
      {"tp2 default", 2, {}, false, {0, 1}},
      {"tp2 attention replicated", 2, rep_attn, false, {1}},
      {"tp2 layer-1 mlp and lm_head replicated",
       2,
       {rule("layers.1.mlp.*", "replicated"), rule("lm_head", "replicated")},
       false,
       {1}},
      {"tp4 auto", 4, {}, true, {3}},
      {"tp3 auto", 3, {}, true, {2}},
      {"tp2 bad style", 2, {rule("layers.*.self_attn.q_proj", "colwize")}, false, {}},
      {"tp2 no module", 2, {rule("layers.*.attn.q_proj", "colwise")}, false, {}},
      {"tp2 half attention", 2, {rule("layers.*.self_attn.k_proj", "replicated")}, false, {}},
      {"tp2 attention split in one layer", 2, {rule("layers.1.self_attn.*", "replicated")}, false, {}},
      {"tp2 mlp down colwise", 2, {rule("layers.*.mlp.down_proj", "colwise")}, false, {}},
      {"tp2 lm_head rowwise", 2, {rule("lm_head", "rowwise")}, false, {}},
      {"tp2 norm split", 2, {rule("layers.*.input_layernorm", "colwise")}, false, {}},
      {"tp2 embed split", 2, {rule("embed_tokens", "rowwise")}, false, {}},
      {"tp2 q_norm split", 2, {rule("layers.*.self_attn.q_norm", "colwise")}, false, {}},
      {"tp2 up_proj replicated", 2, {rule("layers.*.mlp.up_proj", "replicated")}, false, {}},
      {"tp2 gate_up_proj replicated", 2, {rule("layers.*.mlp.gate_up_proj", "replicated")}, false, {}},
      {"tp4", 4, {}, false, {}},
      {"tp3", 3, {}, false, {}},
      {"tp3 attention replicated", 3, rep_attn, false, {}},
  };
}

// The keys dumped with one rank: `more` for the models/ fixtures (the variants differ in activation and
// sliding window only).
inline std::vector<graph::ShapeKey> keys(bool more) {
  using graph::Phase;
  using graph::Sampling;
  std::vector<graph::ShapeKey> k;
  auto key = [&](Phase ph, int batch, int seq, int cache, DType dt, bool all, Sampling s, int rows) {
    graph::ShapeKey x;
    x.phase = ph;
    x.batch = batch;
    x.seq = seq;
    x.cache_len = cache;
    x.dtype = dt;
    x.all_logits = all;
    x.sampling = s;
    x.cache_rows = rows;
    k.push_back(x);
  };
  key(Phase::Prefill, 2, 5, 16, DType::F32, false, Sampling::Off, 0);
  key(Phase::Decode, 3, 1, 24, DType::BF16, false, Sampling::Sample, 0);
  key(Phase::Prefill, 1, 4, 16, DType::F32, false, Sampling::Sample, 4);  // row-mapped
  key(Phase::Decode, 2, 1, 16, DType::BF16, false, Sampling::Greedy, 4);  // row-mapped
  if (more) {
    key(Phase::Prefill, 1, 3, 8, DType::BF16, true, Sampling::Off, 0);
    key(Phase::Decode, 4, 1, 16, DType::F32, false, Sampling::Off, 4);  // every row of the cache
  }
  return k;
}

// The whole text for one fixture; `dir` is tests/fixtures/<fixture>.
inline std::string dump_fixture(const std::string& dir, const std::string& fixture) {
  std::ifstream f(dir + "/config.json");
  std::stringstream text;
  text << f.rdbuf();
  const nlohmann::json j = models::parse_config_json(text.str(), fixture);
  const models::Architecture& arch =
      models::find_architecture(models::architecture_name(j, fixture), fixture);
  const models::DecoderConfig c = arch.parse_config(j, fixture);
  std::ostringstream os;
  os << "fixture " << fixture << " (" << arch.name << ")\n";
  os << "default plan:";
  for (const auto& [p, s] : arch.tp_plan) os << " " << p << "=" << s;
  os << "\nignorable:";
  for (const auto& s : arch.ignorable_suffixes) os << " " << s;
  os << "\nweights:\n";
  for (const auto& w : arch.weights(c))
    os << "  " << w.name << " " << shape_text(w.shape) << (w.is_vector ? " vector" : "") << "\n";
  auto dump_graph = [&](const graph::ShapeKey& k, const models::TpLayout& t) {
    models::DecoderConfig rc = c;
    rc.tp = t;
    graph::Graph g = arch.build_graph(rc, k);
    graph::append_sampling(g, rc.vocab_size);
    os << "-- rank " << k.tp_rank << "\n" << full_dump(g);
  };
  for (const PlanCase& pc : plan_cases()) {
    os << "== plan " << pc.name << "\n";
    DistributedConfig d;
    d.tp_size = pc.tp;
    d.tp_plan = pc.rules;
    d.tp_plan_auto = pc.autop;
    std::vector<models::TpLayout> layouts;
    try {
      std::vector<std::string> notes;
      for (int r = 0; r < pc.tp; ++r)
        layouts.push_back(distributed::resolve_tp_plan(arch, c, d, r, fixture, r == 0 ? &notes : nullptr));
      for (const auto& n : notes) os << "note: " << n << "\n";
      const models::TpLayout& t = layouts[0];
      os << "layout: size=" << t.size << " attn_split=" << t.attn_split
         << " lm_head_split=" << t.lm_head_split << " mlp_split=";
      for (auto m : t.mlp_split) os << static_cast<int>(m);
      os << "\n";
    } catch (const Error& e) {
      os << "error: " << e.what() << "\n";
      continue;
    }
    if (pc.tp == 1) {
      for (const graph::ShapeKey& k : keys(fixture.rfind("models/", 0) == 0)) dump_graph(k, layouts[0]);
      continue;
    }
    if (fixture.rfind("models/", 0) != 0) continue;  // the variants' tp graphs are the Llama / Qwen3 ones
    for (int r : pc.ranks) {
      graph::ShapeKey k = keys(false)[1];  // decode, sampling
      k.tp_rank = r;
      k.tp_size = pc.tp;
      if (r == 0) {
        graph::ShapeKey p = keys(false)[0];  // prefill
        p.tp_rank = r;
        p.tp_size = pc.tp;
        dump_graph(p, layouts[0]);
      }
      dump_graph(k, layouts[static_cast<size_t>(r)]);
    }
  }
  return os.str();
}

// tests/fixtures/graph_dumps/<file name>.txt for a fixture "models/glm4" -> "models_glm4".
inline std::string dump_file_name(std::string fixture) {
  for (char& ch : fixture)
    if (ch == '/') ch = '_';
  return fixture + ".txt";
}

}  // namespace tessera::graph_dump
