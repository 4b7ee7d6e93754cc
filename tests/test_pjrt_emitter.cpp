// The StableHLO emitter, without a plugin: the fixture a reader can open
// (tests/fixtures/stablehlo/qwen3_tied_decode.mlir) must be exactly what the emitter produces today, and
// the signature must follow the documented order (weights, step inputs, donated caches).
// TESSERA_UPDATE_FIXTURES=1 rewrites the fixture instead of comparing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backends/pjrt/stablehlo_emitter.h"
#include "golden_util.h"
#include "models/architecture.h"

using namespace tessera;
namespace golden = tessera::golden;
using graph::Phase;
using graph::ShapeKey;

namespace {

graph::Graph tiny_graph(const std::string& model, const ShapeKey& key) {
  auto cj = golden::load_json(golden::model_path(model + "/config.json"));
  const auto& arch = models::find_architecture(cj["architectures"][0].get<std::string>(), model);
  return arch.build_graph(arch.parse_config(cj, model), key);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

const ShapeKey kDecode16{.phase = Phase::Decode, .batch = 1, .seq = 1, .cache_len = 16, .dtype = DType::F32};

TEST(PjrtEmitter, FixtureMatchesEmitter) {
  const std::string path =
      std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/stablehlo/qwen3_tied_decode.mlir";
  const std::string text = pjrt::emit_stablehlo(tiny_graph("qwen3_tied", kDecode16));
  const char* update = std::getenv("TESSERA_UPDATE_FIXTURES");
  if (update && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << text;
    GTEST_SKIP() << "rewrote " << path;
  }
  const std::string fixture = read_file(path);
  ASSERT_FALSE(fixture.empty()) << path << " is missing (run with TESSERA_UPDATE_FIXTURES=1)";
  if (fixture != text) {
    std::istringstream a(fixture), b(text);
    std::string la, lb;
    int line = 1;
    while (std::getline(a, la) && std::getline(b, lb) && la == lb) ++line;
    FAIL() << path << " differs from the emitter at line " << line << ":\n  fixture: " << la
           << "\n  emitted: " << lb
           << "\n(if the change is intended, rerun with TESSERA_UPDATE_FIXTURES=1 and review the diff)";
  }
}

TEST(PjrtEmitter, SignatureIsWeightsThenInputsThenDonatedCaches) {
  auto g = tiny_graph("qwen3_tied", kDecode16);
  pjrt::StablehloProgram p = pjrt::lower_to_stablehlo(g);
  // qwen3_tied: 2 layers x 11 weights + embedding (tied: no lm_head) + final norm; 4 step inputs; 2 x 2
  // caches.
  ASSERT_EQ(p.args.size(), 24u + 4u + 4u);
  size_t i = 0;
  while (i < p.args.size() && p.args[i].kind == pjrt::StablehloArg::Weight) ++i;
  EXPECT_EQ(i, 24u);
  EXPECT_EQ(p.args[0].name, "model.embed_tokens.weight");
  for (auto kind : {graph::InputKind::TokenIds, graph::InputKind::Positions, graph::InputKind::Slots,
                    graph::InputKind::KvBegin}) {
    ASSERT_EQ(p.args[i].kind, pjrt::StablehloArg::Input);
    EXPECT_EQ(p.args[i++].input, kind);
  }
  for (int layer = 0; layer < 2; ++layer)
    for (int which = 0; which < 2; ++which) {
      ASSERT_EQ(p.args[i].kind, pjrt::StablehloArg::Cache);
      EXPECT_EQ(p.args[i].layer, layer);
      EXPECT_EQ(p.args[i++].which, which);
    }
  EXPECT_EQ(p.num_results, 5);
  EXPECT_EQ(p.logits_shape, (Shape{1, 1024}));
  for (int r = 1; r <= 4; ++r)
    EXPECT_EQ(count(p.text, "{tf.aliasing_output = " + std::to_string(r) + " : i32}"), 1u) << "result " << r;
  EXPECT_EQ(count(p.text, "\"stablehlo.dynamic_update_slice\""), 4u);
  // Float32 weights need no conversion; positions are converted once and the rope angles shared by all
  // layers.
  EXPECT_EQ(count(p.text, "\"stablehlo.convert\"(%arg"), 1u);
  EXPECT_EQ(count(p.text, "\"stablehlo.convert\"(%arg25)"), 1u);
  EXPECT_EQ(count(p.text, "\"stablehlo.cosine\""), 1u);
}

TEST(PjrtEmitter, HalfPrecisionWeightsAreConvertedOncePerUse) {
  ShapeKey key = kDecode16;
  key.dtype = DType::BF16;
  pjrt::StablehloProgram p = pjrt::lower_to_stablehlo(tiny_graph("qwen3_tied", key));
  EXPECT_EQ(p.args[0].dtype, DType::BF16);
  EXPECT_NE(p.text.find("%arg0: tensor<1024x64xbf16>"), std::string::npos);
  // The tied embedding is read twice (gather, LM head): its gathered rows and the matrix are converted,
  // every other matrix once; vectors (norms) stay float32.
  EXPECT_EQ(count(p.text, "\"stablehlo.convert\"(%arg0)"), 1u);
  EXPECT_EQ(count(p.text, "xbf16>) -> tensor<1x64xf32>"), 1u) << "gathered embedding rows converted to f32";
}

TEST(PjrtEmitter, BatchedPrefillMasksWithKvBeginAndSlots) {
  pjrt::StablehloProgram p = pjrt::lower_to_stablehlo(tiny_graph(
      "llama_gqa", {.phase = Phase::Prefill, .batch = 3, .seq = 13, .cache_len = 29, .dtype = DType::F32}));
  EXPECT_EQ(p.logits_shape, (Shape{3, 1024}));
  EXPECT_EQ(count(p.text, "comparison_direction GE"), 2u);  // kv_begin <= j, once per layer
  EXPECT_EQ(count(p.text, "comparison_direction LE"), 2u);  // j <= slots[s]
  EXPECT_NE(p.text.find("tensor<3x2x29x16xf32> {tf.aliasing_output = 1 : i32}"), std::string::npos);
}

// qwen3_tied's config with the MLP activation and sliding window set directly (as config.json's hidden_act
// and use_sliding_window / sliding_window / layer_types set them).
graph::Graph variant_graph(models::Activation act, int64_t window, std::vector<uint8_t> sliding,
                           const ShapeKey& key) {
  auto cj = golden::load_json(golden::model_path("qwen3_tied/config.json"));
  const auto& arch = models::find_architecture(cj["architectures"][0].get<std::string>(), "qwen3_tied");
  models::DecoderConfig c = arch.parse_config(cj, "qwen3_tied");
  c.hidden_act = act;
  c.sliding_window = window;
  c.layer_sliding = std::move(sliding);
  return arch.build_graph(c, key);
}

TEST(PjrtEmitter, GateActivationsLowerToTheirOps) {
  auto text = [](models::Activation a) { return pjrt::emit_stablehlo(variant_graph(a, 0, {}, kDecode16)); };
  const std::string silu = text(models::Activation::kSilu), gelu = text(models::Activation::kGelu),
                    tanh = text(models::Activation::kGeluTanh), relu = text(models::Activation::kRelu);
  EXPECT_EQ(count(silu, "\"chlo.erf\""), 0u);
  EXPECT_EQ(count(gelu, "\"chlo.erf\""), 2u);  // one per layer
  EXPECT_EQ(count(gelu, "\"stablehlo.tanh\""), 0u);
  EXPECT_EQ(count(tanh, "\"stablehlo.tanh\""), 2u);
  EXPECT_EQ(count(tanh, "\"chlo.erf\""), 0u);
  // relu is a maximum against zero: two more maximum ops than silu (which has none in its MLP).
  EXPECT_EQ(count(relu, "\"stablehlo.maximum\""), count(silu, "\"stablehlo.maximum\"") + 2u);
  EXPECT_NE(gelu.find("layers.0.geglu: gelu(gate) * up"), std::string::npos);
  EXPECT_NE(relu.find("layers.1.reglu: relu(gate) * up"), std::string::npos);
  // The default (silu) emission is unchanged: the fixture test above pins it byte for byte.
  EXPECT_EQ(silu, pjrt::emit_stablehlo(tiny_graph("qwen3_tied", kDecode16)));
}

TEST(PjrtEmitter, SlidingLayersMaskKeysBeforeTheWindow) {
  const ShapeKey prefill{
      .phase = Phase::Prefill, .batch = 2, .seq = 24, .cache_len = 40, .dtype = DType::F32};
  // Layer 1 slides (window 8), layer 0 attends to the whole prefix.
  const std::string text = pjrt::emit_stablehlo(variant_graph(models::Activation::kSilu, 8, {0, 1}, prefill));
  EXPECT_EQ(count(text, "comparison_direction GT"), 1u);  // j > slots[s] - window, in layer 1 only
  EXPECT_EQ(count(text, "dense<8> : tensor<24xi32>"), 1u);
  EXPECT_EQ(count(pjrt::emit_stablehlo(variant_graph(models::Activation::kSilu, 8, {}, prefill)),
                  "comparison_direction GT"),
            0u);
  // The graph records the window on the sliding layer's attention node only.
  auto g = variant_graph(models::Activation::kSilu, 8, {0, 1}, prefill);
  std::vector<int64_t> windows;
  for (const auto& n : g.nodes)
    if (n.op == graph::Op::Attention) windows.push_back(n.window);
  EXPECT_EQ(windows, (std::vector<int64_t>{0, 8}));
}

// Gemma 2's op options: the scaled embedding, the (1 + weight) norms (a load-time view), soft-capped
// attention scores in every layer and the soft-capped logits (graph::Op::SoftCap), each lowered to StableHLO.
TEST(PjrtEmitter, Gemma2ScalesEmbeddingsAndSoftCaps) {
  const graph::Graph g = tiny_graph("gemma2", kDecode16);
  int embed = 0, caps = 0, attn = 0, plus_one = 0;
  for (const auto& n : g.nodes) {
    if (n.op == graph::Op::Embedding && n.scale == 8.0f) ++embed;  // sqrt(64)
    if (n.op == graph::Op::SoftCap && n.softcap == 30.0f) ++caps;
    if (n.op == graph::Op::Attention && n.softcap == 50.0f &&
        n.scale == static_cast<float>(std::pow(24.0, -0.5)))
      ++attn;
    if (n.op == graph::Op::Weight && n.view.offset == 1.0f) ++plus_one;
  }
  EXPECT_EQ(embed, 1);
  EXPECT_EQ(caps, 1);
  EXPECT_EQ(attn, 2);
  EXPECT_EQ(plus_one, 2 * 4 + 1);  // four norms a layer and the final norm
  EXPECT_EQ(g.at(g.outputs[0]).op, graph::Op::SoftCap);
  const std::string text = pjrt::emit_stablehlo(g);
  EXPECT_EQ(count(text, "\"stablehlo.tanh\""), 5u);  // 2 GeGLU, 2 attention soft-caps, the logits
  EXPECT_EQ(count(text, "logits_softcap: soft_cap"), 1u);
}

// Mixtures of experts: the router's top-k, then the experts gathered per (row, choice) when rows × top_k are
// fewer than the experts (decode) and dense otherwise (a prompt, a full batch); both are checked against
// Transformers through the families tests on xla-cpu.
TEST(PjrtEmitter, ExpertsGatheredForFewRowsDenseForMany) {
  // qwen3_moe: 8 experts, top 3, layers 0 and 2 sparse.
  const std::string decode = pjrt::emit_stablehlo(tiny_graph("qwen3_moe", kDecode16));
  EXPECT_EQ(count(decode, "moe_route (softmax_topk_norm, top 3)"), 2u);
  EXPECT_EQ(count(decode, "moe_experts (gathered: top 3 of 8 experts per row)"), 2u);
  EXPECT_EQ(count(decode, "moe_experts (dense"), 0u);
  ShapeKey batch = kDecode16;
  batch.batch = 3;  // 9 (row, choice) pairs for 8 experts
  const std::string dense = pjrt::emit_stablehlo(tiny_graph("qwen3_moe", batch));
  EXPECT_EQ(count(dense, "moe_experts (dense over 8 experts)"), 2u);
  EXPECT_EQ(count(dense, "gathered"), 0u);
}

}  // namespace
