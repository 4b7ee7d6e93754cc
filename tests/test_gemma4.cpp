// Gemma 4 (Gemma4ForCausalLM) beyond the family goldens of tests/test_model_families.cpp: its config layouts
// (Transformers 5.24's per_layer_config and the released files' global_* keys), its refusals, the cache
// holding only the layers that compute keys and values, the hub's multimodal files, and tensor parallelism.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "distributed/tp_plan.h"
#include "error_util.h"
#include "golden_util.h"
#include "models/architecture.h"
#include "pjrt_test_util.h"
#include "tessera/model.h"
#include "tp_cli_util.h"

using namespace tessera;
namespace golden = tessera::golden;
using nlohmann::json;

namespace {

const models::Architecture& arch() { return models::find_architecture("Gemma4ForCausalLM", "test"); }
json fixture(const char* name) {
  return golden::load_json(golden::model_path(std::string(name) + "/config.json"));
}
models::DecoderConfig parse(const json& j) { return arch().parse_config(j, "config.json"); }

}  // namespace

// The E-model fixture: sliding layers of 2 kv heads of 16, full layers of 32; the last three layers read the
// keys and values of layers 1 (sliding) and 2 (full) and have a double-wide MLP; the full layers' rope is
// proportional (a quarter of the pairs turn).
TEST(Gemma4, ConfigAsTransformersReadsIt) {
  const models::DecoderConfig c = parse(fixture("gemma4"));
  EXPECT_EQ(c.layer_head_dim, (std::vector<int64_t>{16, 16, 32, 16, 16, 32}));
  EXPECT_EQ(c.layer_kv_heads, (std::vector<int64_t>{2, 2, 2, 2, 2, 2}));
  EXPECT_EQ(c.layer_kv_source, (std::vector<int32_t>{0, 1, 2, 1, 1, 2}));
  EXPECT_EQ(c.per_layer_input_size, 8);
  EXPECT_TRUE(c.double_wide_shared_mlp);
  EXPECT_EQ(c.rope.type, "proportional");
  EXPECT_EQ(c.rot_dim_of(c.rope), 32);
  const std::vector<float> f = models::rope_inv_freq(c, c.rope);
  ASSERT_EQ(f.size(), 16u);
  for (size_t i = 0; i < f.size(); ++i) EXPECT_EQ(f[i] != 0.f, i < 4) << i;  // 0.25 * 32 / 2 pairs turn
  EXPECT_EQ(c.local_rope.type, "default");
  EXPECT_EQ(c.rot_dim_of(c.local_rope), 16);
  EXPECT_FALSE(c.layer_has_cache(3));
  EXPECT_TRUE(c.layer_has_cache(2));

  // 26B-A4B's pieces: values are the full layers' keys (one kv head there), experts in every layer.
  const models::DecoderConfig m = parse(fixture("gemma4_moe"));
  EXPECT_TRUE(m.k_eq_v);
  EXPECT_EQ(m.layer_kv_heads, (std::vector<int64_t>{2, 1, 2, 1}));
  EXPECT_TRUE(m.moe_beside_mlp);
  EXPECT_EQ(m.num_experts, 4);
  EXPECT_EQ(m.num_experts_per_tok, 2);
  EXPECT_EQ(m.per_layer_input_size, 0);
}

// The released files' layout (global_head_dim, num_global_key_value_heads; no per_layer_config) reads as the
// same model; without either, global_head_dim is Transformers' default 512; the last layer is full attention
// whatever layer_types says (Transformers forces it).
TEST(Gemma4, ReleasedLayoutAndDefaults) {
  json j = fixture("gemma4_moe");
  const models::DecoderConfig want = parse(j);
  j.erase("per_layer_config");
  j["global_head_dim"] = 32;
  j["num_global_key_value_heads"] = 1;
  const models::DecoderConfig got = parse(j);
  EXPECT_EQ(got.layer_head_dim, want.layer_head_dim);
  EXPECT_EQ(got.layer_kv_heads, want.layer_kv_heads);
  j.erase("global_head_dim");
  EXPECT_EQ(parse(j).layer_head_dim, (std::vector<int64_t>{16, 512, 16, 512}));
  j = fixture("gemma4_moe");
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "sliding_attention"};
  j["per_layer_config"] = {{"1", {{"head_dim", 32}, {"num_key_value_heads", 1}}},
                           {"3", {{"head_dim", 32}, {"num_key_value_heads", 1}}}};
  EXPECT_FALSE(parse(j).layer_is_sliding(3));
}

// Each unsupported or ambiguous setting is refused naming its field.
TEST(Gemma4, RefusalsNameTheField) {
  auto refused = [](const std::function<void(json&)>& edit, const char* needle) {
    json j = fixture("gemma4");
    edit(j);
    tessera::testing::expect_error([&] { parse(j); }, needle);
  };
  refused([](json& j) { j["use_bidirectional_attention"] = "all"; }, "use_bidirectional_attention");
  refused([](json& j) { j["per_layer_config"]["2"]["sliding_window"] = 4; }, "sliding_window");
  refused([](json& j) { j["per_layer_config"]["9"] = {{"head_dim", 32}}; }, "per_layer_config");
  refused([](json& j) { j["per_layer_config"]["5"]["head_dim"] = 64; }, "per_layer_config");
  refused([](json& j) { j["num_kv_shared_layers"] = 6; }, "num_kv_shared_layers");
  refused([](json& j) { j["num_kv_shared_layers"] = 5; }, "num_kv_shared_layers");  // no earlier full layer
  refused([](json& j) { j["vocab_size_per_layer_input"] = 512; }, "vocab_size_per_layer_input");
  refused([](json& j) { j["global_head_dim"] = 32; }, "global_head_dim");  // beside per_layer_config
  refused([](json& j) { j["rope_parameters"].erase("full_attention"); }, "full_attention");
  refused([](json& j) { j["rope_theta"] = 10000.0; }, "rope_theta");
  refused([](json& j) { j["enable_moe_block"] = true; }, "num_experts");
}

// The cache holds keys and values of the layers that compute them only, each of its own geometry: layers 0
// and 1 (sliding, 2 x 16) and 2 (full, 2 x 32); layers 3 to 5 read theirs.
TEST(Gemma4, TheCacheHoldsOnlyTheLayersThatComputeKeysAndValues) {
  CausalLM m = golden::load_f32("gemma4");
  EXPECT_EQ(m.info().kv_bytes_per_token, 2u * (2 * 16 + 2 * 16 + 2 * 32) * 4);
}

// The hub's Gemma 4 files are Gemma4ForConditionalGeneration (vision tower beside the language model, text
// config in the released layout): the language model is read from them, bit-equal to the causal fixture and
// within 1e-4 of Transformers' logits for the wrapper.
TEST(Gemma4, TheHubsMultimodalLayoutLoadsAsItsLanguageModel) {
  const json j = golden::load_json(golden::model_path("gemma4_moe_hub/hub_golden.json"));
  const std::vector<int64_t> ids64 = golden::ids(j["input_ids"]);
  const std::vector<int32_t> ids(ids64.begin(), ids64.end());
  CausalLM hub = golden::load_f32("gemma4_moe_hub");
  EXPECT_EQ(hub.info().architecture, "Gemma4ForCausalLM");
  const std::vector<float> got = hub.forward(ids);
  EXPECT_LE(golden::max_abs_diff(got, golden::matrix(j["logits"]).data).max_abs, 1e-4);
  EXPECT_TRUE(got == golden::load_f32("gemma4_moe").forward(ids));
}

// Two ranks (tessera launch: the Cli suite, which the sanitizer stage leaves out) against one process:
// attention by heads and the MLP split (E fixture); the MoE fixture's full layers have one kv head, which two
// ranks do not divide: replicated with --tp-plan auto, the experts still split.
TEST(Cli, TpGemma4TwoRanks) {
  const char* prompt = "5,17,33,250,7,99,201,3,44,18,90,120,6,77,230,11,150,60,9,31";
  tessera::testing::expect_tp_same_as_one_process({golden::model_path("gemma4"), 2, "", prompt});
  tessera::testing::expect_tp_same_as_one_process(
      {golden::model_path("gemma4_moe"), 2, "--tp-plan auto", prompt});
}

// Without --tp-plan auto, a layer type whose kv heads two ranks do not divide is refused by name.
TEST(Gemma4, TensorParallelRefusesKvHeadsTwoRanksDoNotDivide) {
  models::DecoderConfig c = parse(fixture("gemma4_moe"));
  tessera::testing::expect_error(
      [&] {
        distributed::resolve_tp_plan(arch(), c, {.tp_size = 2, .tp_plan = {}}, 0, "gemma4_moe", nullptr);
      },
      "1 key-value heads");
}

TEST(Cli, TpGemma4XlaCpuTwoDevices) {
  REQUIRE_XLA_CPU();
  tessera::testing::expect_tp_same_as_one_process(
      {golden::model_path("gemma4"), 2, "", "5,17,33,250,7,99,201,3,44,18,90", "xla-cpu"});
}
