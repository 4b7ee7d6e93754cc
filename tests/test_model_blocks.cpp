// The shared model blocks and role-driven tensor-parallel plans: every module the graph reads has a role, the
// default plans match modules, TpLayout splits per role, and an architecture assembled from GraphBuilder
// primitives with module names of its own is split by the roles of its linears, with no name assumptions.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "distributed/tp_plan.h"
#include "error_util.h"
#include "golden_util.h"
#include "models/architecture.h"
#include "models/blocks.h"
#include "tessera/error.h"

using namespace tessera;
using models::Role;

namespace {

using tessera::testing::error_of;

struct Parsed {
  const models::Architecture* arch;
  models::DecoderConfig config;
};

Parsed parse_fixture(const std::string& dir) {
  std::ifstream f(std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/" + dir + "/config.json");
  std::stringstream text;
  text << f.rdbuf();
  const auto j = models::parse_config_json(text.str(), dir);
  const auto& arch = models::find_architecture(models::architecture_name(j, dir), dir);
  return {&arch, arch.parse_config(j, dir)};
}

const char* const kFixtures[] = {"models/qwen3_tied", "models/qwen3_untied", "models/llama_bias",
                                 "models/llama_gqa",  "models/glm4",         "variants/qwen3_sliding"};

TEST(ModelBlocks, EveryWeightBelongsToARecordedModuleWithItsRole) {
  for (const char* fixture : kFixtures) {
    const Parsed p = parse_fixture(fixture);
    const auto modules = p.arch->modules(p.config);
    std::map<std::string, const models::ModuleSpec*> by_name;
    for (const auto& m : modules) EXPECT_TRUE(by_name.emplace(m.name, &m).second) << m.name << " twice";
    // The modules in the order of the weights that belong to them.
    std::vector<std::string> from_weights;
    std::set<std::string> seen;
    for (const auto& w : p.arch->weights(p.config)) {
      const std::string m = w.name.substr(0, w.name.rfind('.'));
      ASSERT_TRUE(by_name.count(m)) << fixture << ": " << w.name << " has no module";
      if (seen.insert(m).second) from_weights.push_back(m);
    }
    std::vector<std::string> names;
    for (const auto& m : modules) names.push_back(m.name);
    EXPECT_EQ(names, from_weights) << fixture;

    auto role = [&](const std::string& m) { return by_name.count(m) ? by_name[m]->role : Role::kOther; };
    EXPECT_EQ(role("model.embed_tokens"), Role::kEmbed) << fixture;  // also when tied (the LM head reads it)
    EXPECT_EQ(role("model.norm"), Role::kOther);
    EXPECT_EQ(role("lm_head"), p.config.tie_word_embeddings ? Role::kOther : Role::kLmHead) << fixture;
    for (int64_t l = 0; l < p.config.num_layers; ++l) {
      const std::string a = "model.layers." + std::to_string(l) + ".self_attn.",
                        m = "model.layers." + std::to_string(l) + ".mlp.";
      EXPECT_EQ(role(a + "q_proj"), Role::kAttnQ);
      EXPECT_EQ(role(a + "k_proj"), Role::kAttnK);
      EXPECT_EQ(role(a + "v_proj"), Role::kAttnV);
      EXPECT_EQ(role(a + "o_proj"), Role::kAttnO);
      EXPECT_EQ(by_name[a + "o_proj"]->layer, l);
      EXPECT_EQ(role("model.layers." + std::to_string(l) + ".input_layernorm"), Role::kOther);
      if (p.config.architecture == "Glm4ForCausalLM") {
        EXPECT_EQ(role(m + "gate_up_proj"), Role::kMlpGateUp);
      } else {
        EXPECT_EQ(role(m + "gate_proj"), Role::kMlpGate);
        EXPECT_EQ(role(m + "up_proj"), Role::kMlpUp);
      }
      EXPECT_EQ(role(m + "down_proj"), Role::kMlpDown);
      EXPECT_EQ(by_name[m + "down_proj"]->layer, l);
    }
  }
}

TEST(ModelBlocks, EveryDefaultPlanRuleMatchesAModule) {
  for (const char* fixture : kFixtures) {
    const Parsed p = parse_fixture(fixture);
    std::vector<std::string> modules{"lm_head"};
    for (const auto& m : p.arch->modules(p.config)) modules.push_back(m.name);
    for (const auto& [pattern, style] : p.arch->tp_plan) {
      bool any = false;
      for (const auto& m : modules) any = any || distributed::module_matches(pattern, m);
      EXPECT_TRUE(any) << fixture << ": default rule " << pattern << " matches nothing";
      EXPECT_TRUE(distributed::parse_style(style)) << style;
    }
  }
}

TEST(ModelBlocks, LayoutSplitsPerRole) {
  models::TpLayout t;
  t.size = 2;
  t.attn_split = true;
  t.mlp_split = {1, 0};
  t.lm_head_split = true;
  using models::TpSplit;
  EXPECT_EQ(t.split(Role::kAttnQ, 1), TpSplit::kCol);
  EXPECT_EQ(t.split(Role::kAttnV, 0), TpSplit::kCol);
  EXPECT_EQ(t.split(Role::kAttnO, 0), TpSplit::kRow);
  EXPECT_EQ(t.split(Role::kMlpGate, 0), TpSplit::kCol);
  EXPECT_EQ(t.split(Role::kMlpGateUp, 0), TpSplit::kCol);
  EXPECT_EQ(t.split(Role::kMlpDown, 0), TpSplit::kRow);
  EXPECT_EQ(t.split(Role::kMlpUp, 1), TpSplit::kNone);  // layer 1's MLP is replicated
  EXPECT_EQ(t.split(Role::kMlpDown, 1), TpSplit::kNone);
  EXPECT_EQ(t.split(Role::kLmHead, -1), TpSplit::kColGather);
  EXPECT_EQ(t.split(Role::kEmbed, -1), TpSplit::kNone);
  EXPECT_EQ(t.split(Role::kOther, 0), TpSplit::kNone);
  t.size = 1;  // one rank: nothing is split, whatever the flags say
  EXPECT_EQ(t.split(Role::kAttnQ, 0), TpSplit::kNone);
}

// An architecture of its own names ("attention.wq", "feed_forward.w1", "output", as Meta's Llama code names
// them), built from GraphBuilder primitives: the plan's patterns name its modules, and the layout follows
// the roles of its linears.
int toy_layer(models::GraphBuilder& b, const models::StepNodes& in, int x, int l) {
  const models::DecoderConfig& c = b.config();
  const std::string m = "model.layers." + std::to_string(l) + ".", n = "t" + std::to_string(l) + ".";
  const int64_t H = c.hidden_size, I = c.intermediate_size, q = c.num_heads * c.head_dim,
                kv = c.num_kv_heads * c.head_dim;
  int h = b.norm(x, m + "attention_norm", H, n + "norm");
  int wq = b.linear(h, {m + "attention.wq", Role::kAttnQ, l, q, H}, n + "q");
  int wk = b.linear(h, {m + "attention.wk", Role::kAttnK, l, kv, H}, n + "k");
  int wv = b.linear(h, {m + "attention.wv", Role::kAttnV, l, kv, H}, n + "v");
  wq = b.rope(wq, in.positions, c.local_heads(), n + "q_rope");
  wk = b.rope(wk, in.positions, c.local_kv_heads(), n + "k_rope");
  int kc = b.cache_update(b.cache_state(l, 0), wk, in.slots, n + "kc");
  int vc = b.cache_update(b.cache_state(l, 1), wv, in.slots, n + "vc");
  int a = b.attention(wq, kc, vc, in.slots, in.kv_begin, 0, n + "attn");
  x = b.add(x, b.linear(a, {m + "attention.wo", Role::kAttnO, l, H, q}, n + "o"), n + "res1");
  h = b.norm(x, m + "ffn_norm", H, n + "ffn_norm");
  int g = b.linear(h, {m + "feed_forward.w1", Role::kMlpGate, l, I, H}, n + "w1");
  int u = b.linear(h, {m + "feed_forward.w3", Role::kMlpUp, l, I, H}, n + "w3");
  int d = b.linear(b.gated_act(g, u, graph::Activation::Silu, n + "act"),
                   {m + "feed_forward.w2", Role::kMlpDown, l, H, I}, n + "w2");
  return b.add(x, d, n + "res2");
}

models::Architecture toy_architecture() {
  return models::causal_lm_architecture({.name = "ToyForCausalLM",
                                         .layer = toy_layer,
                                         .parse = {},
                                         .config_keys = {},
                                         .tp_plan = {{"layers.*.attention.wq", "colwise"},
                                                     {"layers.*.attention.wk", "colwise"},
                                                     {"layers.*.attention.wv", "colwise"},
                                                     {"layers.*.attention.wo", "rowwise"},
                                                     {"layers.*.feed_forward.w1", "colwise"},
                                                     {"layers.*.feed_forward.w3", "colwise"},
                                                     {"layers.*.feed_forward.w2", "rowwise"},
                                                     {"lm_head", "colwise_gather_output"}}});
}

models::TpLayout resolve(const models::Architecture& a, const models::DecoderConfig& c, int tp,
                         std::vector<TpPlanRule> rules = {}) {
  DistributedConfig d;
  d.tp_size = tp;
  d.tp_plan = std::move(rules);
  return distributed::resolve_tp_plan(a, c, d, 0, "toy", nullptr);
}

TEST(ModelBlocks, AnArchitectureWithItsOwnModuleNamesIsSplitByRole) {
  const models::Architecture toy = toy_architecture();
  models::DecoderConfig c = parse_fixture("models/llama_tp4").config;  // 8 heads, 4 KV heads, untied
  models::TpLayout t = resolve(toy, c, 2);
  EXPECT_TRUE(t.attn_split);
  EXPECT_TRUE(t.lm_head_split);
  EXPECT_TRUE(t.mlp_split_at(0) && t.mlp_split_at(1));

  c.tp = t;
  graph::ShapeKey key;
  key.phase = graph::Phase::Decode;
  key.cache_len = 8;
  key.tp_size = 2;
  const graph::Graph g = toy.build_graph(c, key);
  int reduces = 0, gathers = 0;
  std::map<std::string, graph::WeightView> views;
  for (const auto& n : g.nodes) {
    reduces += n.op == graph::Op::AllReduce;
    gathers += n.op == graph::Op::AllGather;
    if (n.op == graph::Op::Weight) views[n.name] = n.view;
  }
  EXPECT_EQ(reduces, 2 * c.num_layers);  // after wo and w2
  EXPECT_EQ(gathers, 1);
  EXPECT_EQ(views["model.layers.0.attention.wq.weight"].split_dim, 0);
  EXPECT_EQ(views["model.layers.1.feed_forward.w3.weight"].split_dim, 0);
  EXPECT_EQ(views["model.layers.1.attention.wo.weight"].split_dim, 1);
  EXPECT_EQ(views["model.layers.0.feed_forward.w2.weight"].split_dim, 1);
  EXPECT_EQ(views["model.layers.0.attention_norm.weight"].split_dim, -1);
  EXPECT_EQ(views["lm_head.weight"].split_dim, 0);

  // The user's rules name its modules; the checks read its names in their messages.
  t = resolve(toy, parse_fixture("models/llama_tp4").config, 2,
              {{"layers.1.feed_forward.*", "replicated", "t"}});
  EXPECT_TRUE(t.mlp_split_at(0));
  EXPECT_FALSE(t.mlp_split_at(1));
  const models::DecoderConfig pc = parse_fixture("models/llama_tp4").config;
  std::string e = error_of([&] { resolve(toy, pc, 2, {{"layers.*.attention.wk", "replicated", "t"}}); });
  EXPECT_NE(e.find("layers.0.attention has wq=colwise, wk=replicated, wv=colwise, wo=rowwise"),
            std::string::npos)
      << e;
  e = error_of([&] { resolve(toy, pc, 2, {{"layers.*.feed_forward.w2", "colwise", "t"}}); });
  EXPECT_NE(e.find("layers.0.feed_forward has w1=colwise, w3=colwise, w2=colwise"), std::string::npos) << e;
  e = error_of([&] { resolve(toy, pc, 2, {{"layers.*.ffn_norm", "colwise", "t"}}); });
  EXPECT_NE(e.find("module 'layers.0.ffn_norm' is colwise"), std::string::npos) << e;
  e = error_of([&] { resolve(toy, pc, 2, {{"layers.*.self_attn.q_proj", "colwise", "t"}}); });
  EXPECT_NE(e.find("matches no module of ToyForCausalLM (modules: embed_tokens, layers.*.attention_norm, "
                   "layers.*.attention.wq"),
            std::string::npos)
      << e;
  e = error_of([&] { resolve(toy, pc, 3); });  // 4 KV heads: the rules suggested are the toy's
  EXPECT_NE(e.find("--tp-rule layers.*.attention.wq=replicated_with_grad_allreduce --tp-rule "
                   "layers.*.attention.wk=replicated_with_grad_allreduce"),
            std::string::npos)
      << e;
}

}  // namespace
