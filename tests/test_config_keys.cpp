// config.json semantics: each architecture's key table (src/models/<arch>.cpp) is complete for configs that
// Transformers saves and every refused key is refused; both rope layouts; hidden_act; Qwen3's sliding
// layers; range checks. Expected resolutions come from Transformers itself (config_resolution.json, made by
// tools/make_model_goldens.py), never from our own output.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "golden_util.h"
#include "models/architecture.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
using namespace tessera::models;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

#define EXPECT_HAS(hay, needle) EXPECT_NE((hay).find(needle), std::string::npos) << (hay)

// A config.json of each architecture as Transformers 5 saved it (a fixture).
const std::map<std::string, std::string> kFixtureOf = {
    {"Qwen3ForCausalLM", "qwen3_tied"},
    {"LlamaForCausalLM", "llama_gqa"},
    {"Glm4ForCausalLM", "glm4"},
    {"Qwen2ForCausalLM", "qwen2"},
    {"MistralForCausalLM", "mistral"},
    {"Phi3ForCausalLM", "phi3"},
    {"Gemma2ForCausalLM", "gemma2"},
    {"Gemma3ForCausalLM", "gemma3"},
    {"Qwen3MoeForCausalLM", "qwen3_moe"},
    {"MixtralForCausalLM", "mixtral"},
    {"GptOssForCausalLM", "gpt_oss"},
    {"SmolLM3ForCausalLM", "smollm3"},
    {"Olmo2ForCausalLM", "olmo2"},
    {"Olmo3ForCausalLM", "olmo3"},
    {"Qwen3_5ForCausalLM", "qwen3_5"},
    {"Qwen3_5MoeForCausalLM", "qwen3_5_moe"},
    {"Qwen3NextForCausalLM", "qwen3_next"},
    {"Gemma4ForCausalLM", "gemma4"},
};

json fixture_config(const std::string& fixture) {
  return golden::load_json(golden::model_path(fixture + "/config.json"));
}

DecoderConfig parse(const json& j) {
  const std::string name = architecture_name(j, "config.json");
  return find_architecture(name, "config.json").parse_config(j, "config.json");
}

std::string parse_error(const json& j) {
  try {
    parse(j);
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  return "no error";
}

std::vector<ConfigKey> table_of(const std::string& arch) {
  return merge_config_keys(common_config_keys(), find_architecture(arch, "test").config_keys);
}

// A value other than `def` of the same kind.
json non_default(const json& def) {
  if (def.is_boolean()) return !def.get<bool>();
  if (def.is_number()) return def.get<double>() + 3;
  if (def.is_string()) return def.get<std::string>() + "_other";
  return json{{"quant_method", "gptq"}};  // null default: anything set
}

TEST(ConfigKeys, TablesHaveNoDuplicatesAndEveryEntryExplainsItself) {
  for (const auto& arch : supported_architectures()) {
    std::set<std::string> seen;
    for (const ConfigKey& k : table_of(arch)) {
      EXPECT_TRUE(seen.insert(k.key).second) << arch << ": '" << k.key << "' listed twice";
      if (k.use == KeyUse::kRefused) {
        EXPECT_FALSE(json::parse(k.default_json, nullptr, false).is_discarded()) << k.key;
        EXPECT_NE(std::string(k.why), "") << k.key;
      }
    }
  }
}

TEST(ConfigKeys, EveryRefusedKeyIsRefusedNamingKeyAndValue) {
  for (const auto& arch : supported_architectures()) {
    const json base = fixture_config(kFixtureOf.at(arch));
    ASSERT_NO_THROW(parse(base)) << arch;
    int refused = 0;
    for (const ConfigKey& k : table_of(arch)) {
      if (k.use != KeyUse::kRefused) continue;
      ++refused;
      json j = base;
      const json def = json::parse(k.default_json);
      j[k.key] = def;  // the default itself is accepted
      EXPECT_NO_THROW(parse(j)) << arch << " " << k.key << " = " << def;
      j[k.key] = non_default(def);
      const std::string e = parse_error(j);
      EXPECT_HAS(e, std::string("'") + k.key + "'");
      EXPECT_HAS(e, ConfigReader::show(j[k.key]));
    }
    EXPECT_GE(refused, 2) << arch;
  }
}

// Every key of every config.json in the fixtures (all written by Transformers' save_pretrained, in either
// layout) is in its architecture's table: nothing Transformers writes is ignored unknowingly.
TEST(ConfigKeys, EveryKeyTransformersWroteIsInTheTable) {
  int configs = 0;
  std::vector<fs::directory_entry> dirs;
  for (const char* root : {"/tests/fixtures/models", "/tests/fixtures/variants"})
    if (fs::exists(std::string(TESSERA_SOURCE_DIR) + root))
      for (const auto& e : fs::directory_iterator(std::string(TESSERA_SOURCE_DIR) + root)) dirs.push_back(e);
  for (const auto& entry : dirs) {
    const fs::path cfg = entry.path() / "config.json";
    if (!fs::exists(cfg)) continue;
    json j = golden::load_json(cfg.string());
    std::string arch = j["architectures"][0].get<std::string>();
    if (j.contains("text_config")) {  // a multimodal wrapper (io/text_model.cpp): its language model's keys
      arch.replace(arch.find("ForConditionalGeneration"), std::string("ForConditionalGeneration").size(),
                   "ForCausalLM");
      j = json(j["text_config"]);
    }
    std::set<std::string> known;
    for (const ConfigKey& k : table_of(arch)) known.insert(k.key);
    for (const auto& [key, value] : j.items())
      EXPECT_TRUE(known.count(key)) << cfg << ": key '" << key << "' is in no table of " << arch;
    ++configs;
  }
  EXPECT_GE(configs, 7);
}

// quantization_config: only gpt-oss's MXFP4 (its experts' blocks, io/expert_layout.cpp) is read; any other
// method, or MXFP4 on another architecture, is refused naming the key and the value.
TEST(ConfigKeys, QuantizationConfigOnlyGptOssMxfp4) {
  json oss = fixture_config("gpt_oss_mxfp4");
  ASSERT_EQ(oss["quantization_config"]["quant_method"], "mxfp4");
  EXPECT_NO_THROW(parse(oss));
  oss["quantization_config"]["quant_method"] = "fp8";
  EXPECT_HAS(parse_error(oss), "'quantization_config'");
  EXPECT_HAS(parse_error(oss), "fp8");
  oss["quantization_config"] = "mxfp4";
  EXPECT_HAS(parse_error(oss), "'quantization_config'");
  json llama = fixture_config("qwen3_tied");
  llama["quantization_config"] = {{"quant_method", "mxfp4"}};
  EXPECT_HAS(parse_error(llama), "'quantization_config'");
  llama["quantization_config"] = nullptr;
  EXPECT_NO_THROW(parse(llama));
}

TEST(ConfigKeys, UnknownModelTypeForTheArchitectureIsRefused) {
  json j = fixture_config("qwen3_tied");
  j["model_type"] = "qwen2";
  const std::string e = parse_error(j);
  EXPECT_HAS(e, "'model_type'");
  EXPECT_HAS(e, "qwen2");
}

// ---------------------------------------------------------------------------------------------------------
// Resolutions Transformers computed for hand-written configs (config_resolution.json).

TEST(ConfigResolution, MatchesTransformers) {
  const json cases = golden::load_json(golden::model_path("config_resolution.json"));
  ASSERT_GE(cases["cases"].size(), 20u);
  for (const auto& c : cases["cases"]) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    const json& cfg = c["config"];
    if (c.contains("refused")) {
      // Transformers raises, or accepts something ambiguous / unsupported: we refuse, naming every listed
      // key.
      const std::string e = parse_error(cfg);
      for (const auto& needle : c["refused"]) EXPECT_HAS(e, needle.get<std::string>());
      continue;
    }
    DecoderConfig got;
    ASSERT_NO_THROW(got = parse(cfg)) << parse_error(cfg);
    const json& hf = c["transformers"];
    EXPECT_EQ(got.head_dim, hf["head_dim"].get<int64_t>());
    EXPECT_EQ(got.num_kv_heads, hf["num_key_value_heads"].get<int64_t>());
    EXPECT_EQ(got.max_position_embeddings, hf["max_position_embeddings"].get<int64_t>());
    EXPECT_DOUBLE_EQ(got.rms_norm_eps, hf["rms_norm_eps"].get<double>());
    EXPECT_EQ(got.attention_bias, hf["attention_bias"].get<bool>());
    EXPECT_EQ(got.mlp_bias, hf["mlp_bias"].get<bool>());
    EXPECT_EQ(got.tie_word_embeddings, hf["tie_word_embeddings"].get<bool>());
    const std::map<std::string, Activation> acts = {{"silu", Activation::kSilu},
                                                    {"gelu", Activation::kGelu},
                                                    {"gelu_tanh", Activation::kGeluTanh},
                                                    {"relu", Activation::kRelu}};
    EXPECT_EQ(static_cast<int>(got.hidden_act),
              static_cast<int>(acts.at(hf["activation"].get<std::string>())));
    // Special ids as the config object holds them.
    auto opt_id = [](const json& v) { return v.is_null() ? std::optional<int32_t>() : v.get<int32_t>(); };
    EXPECT_EQ(got.bos_token_id, opt_id(hf["bos_token_id"]));
    EXPECT_EQ(got.pad_token_id, opt_id(hf["pad_token_id"]));
    std::vector<int32_t> eos;
    if (hf["eos_token_id"].is_number()) eos = {hf["eos_token_id"].get<int32_t>()};
    if (hf["eos_token_id"].is_array()) eos = hf["eos_token_id"].get<std::vector<int32_t>>();
    EXPECT_EQ(got.eos_token_ids, eos);
    // Sliding layers: Transformers' per-layer attention windows (null: full attention).
    const auto& windows = hf["layer_sliding_window"];
    ASSERT_EQ(windows.size(), static_cast<size_t>(got.num_layers));
    for (size_t l = 0; l < windows.size(); ++l) {
      if (windows[l].is_null()) {
        EXPECT_FALSE(got.layer_is_sliding(static_cast<int64_t>(l))) << "layer " << l;
      } else {
        EXPECT_TRUE(got.layer_is_sliding(static_cast<int64_t>(l))) << "layer " << l;
        EXPECT_EQ(got.sliding_window, windows[l].get<int64_t>());
      }
    }
    // SmolLM3's NoPE layers.
    if (hf.contains("layer_no_rope") && !hf["layer_no_rope"].is_null()) {
      const auto& nope = hf["layer_no_rope"];
      ASSERT_EQ(nope.size(), static_cast<size_t>(got.num_layers));
      for (size_t l = 0; l < nope.size(); ++l)
        EXPECT_EQ(got.layer_uses_rope(static_cast<int64_t>(l)), nope[l].get<int>() == 0) << "layer " << l;
    } else {
      EXPECT_TRUE(got.layer_no_rope.empty());
    }
    // The rotary table, float32, as Transformers' rotary embedding module built it (Gemma 3: the full
    // attention layers' one, and the sliding layers' local one).
    auto expect_table = [](const std::vector<float>& inv, const json& want_json, const char* what) {
      const auto want = want_json.get<std::vector<float>>();
      ASSERT_EQ(inv.size(), want.size()) << what;
      for (size_t i = 0; i < inv.size(); ++i)
        EXPECT_NEAR(inv[i], want[i], 1e-6f * std::abs(want[i])) << what << i;
    };
    if (!hf["inv_freq"].is_null()) expect_table(rope_inv_freq(got), hf["inv_freq"], "inv_freq ");
    if (hf.contains("rope_attention_scaling")) {  // yarn's factor on cos and sin (1 for the other types)
      EXPECT_FLOAT_EQ(static_cast<float>(rope_attention_factor(got.rope)),
                      hf["rope_attention_scaling"].get<float>());
    }
    if (hf.contains("local_inv_freq") && !hf["local_inv_freq"].is_null()) {
      EXPECT_FALSE(got.layer_local_rope.empty());
      expect_table(rope_inv_freq(got, got.local_rope), hf["local_inv_freq"], "local inv_freq ");
    }
    // Gemma's attention scale and soft-capping (null: none); every other architecture's scale is
    // head_dim^-0.5.
    if (hf.contains("attention_scaling")) {
      const double scale = got.query_pre_attn_scalar > 0 ? std::pow(got.query_pre_attn_scalar, -0.5)
                                                         : std::pow(got.head_dim, -0.5);
      EXPECT_EQ(static_cast<float>(scale), hf["attention_scaling"].get<float>());  // the f32 multiplier
      auto cap = [](const json& v) { return v.is_null() ? 0.0 : v.get<double>(); };
      EXPECT_EQ(got.attn_logit_softcapping, cap(hf["attn_logit_softcapping"]));
      EXPECT_EQ(got.final_logit_softcapping, cap(hf["final_logit_softcapping"]));
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Values that make NaN or nonsense, integers that do not fit.

struct BadValue {
  const char* key;
  json value;
  const char* needle;  // besides the key
};

TEST(ConfigRanges, BadValuesAreRefusedNamingTheField) {
  const std::vector<BadValue> cases = {
      {"hidden_size", 10000000000LL, "10000000000"},
      {"hidden_size", 0, "0"},
      {"hidden_size", 64.0, "64.0"},
      {"hidden_size", "64", "\"64\""},
      {"vocab_size", -1, "-1"},
      {"vocab_size", 1LL << 40, "1099511627776"},
      {"intermediate_size", 1LL << 40, "1099511627776"},
      {"num_hidden_layers", 1000000, "1000000"},
      {"num_attention_heads", 1000000, "1000000"},
      {"num_key_value_heads", 0, "0"},
      {"head_dim", 15, "15"},
      {"max_position_embeddings", 1LL << 40, "1099511627776"},
      {"rms_norm_eps", -1e-6, "-1e-06"},
      {"rms_norm_eps", 1e300, "1e+300"},
      {"eos_token_id", 1LL << 40, "1099511627776"},
      {"eos_token_id", json::array({2, -5}), "-5"},
      {"eos_token_id", json::array({2, 1LL << 33}), "8589934592"},
      {"bos_token_id", -1, "-1"},
      {"bos_token_id", json::array({1}), "[1]"},
      {"pad_token_id", 5000, "5000"},  // >= vocab_size
      {"pad_token_id", 18446744073709551615ULL, "18446744073709551615"},
      {"tie_word_embeddings", "yes", "\"yes\""},
      {"hidden_act", "gelu_fast", "gelu_fast"},
      {"hidden_act", "quick_gelu", "quick_gelu"},
      {"hidden_act", 3, "3"},
      {"rope_theta", 0.0, "0"},
      {"rope_theta", -10000.0, "-10000"},
      {"rope_theta", 1e300, "1e+300"},
      {"partial_rotary_factor", 0.0, "0"},
      {"partial_rotary_factor", 1.5, "1.5"},
      {"dtype", "float64", "float64"},
      {"architectures", json::array(), "[]"},
      {"architectures", "LlamaForCausalLM", "LlamaForCausalLM"},
  };
  for (const auto& arch : supported_architectures()) {
    for (const BadValue& b : cases) {
      json j = fixture_config(kFixtureOf.at(arch));
      j[b.key] = b.value;
      if (std::string(b.key) == "rope_theta" || std::string(b.key) == "partial_rotary_factor") {
        // Set it in whichever layout the fixture uses, so only the bad value is at issue.
        if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
          j["rope_parameters"][b.key] = b.value;
          j.erase(b.key);
        }
      }
      const std::string e = parse_error(j);
      SCOPED_TRACE(arch + " " + b.key + " = " + b.value.dump());
      EXPECT_HAS(e, b.key);
      EXPECT_HAS(e, b.needle);
      EXPECT_HAS(e, "config.json");
    }
  }
}

TEST(ConfigRanges, RopeScalingFactorsMustBePositive) {
  json j = fixture_config("llama_gqa");
  json& rope = j.contains("rope_parameters") ? j["rope_parameters"] : j["rope_scaling"];
  for (const char* key : {"factor", "low_freq_factor"}) {
    json k = j;
    json& r = k.contains("rope_parameters") ? k["rope_parameters"] : k["rope_scaling"];
    r[key] = 0.0;
    const std::string e = parse_error(k);
    EXPECT_HAS(e, key);
    r[key] = -2.0;
    EXPECT_HAS(parse_error(k), key);
  }
  json k = j;
  json& r = k.contains("rope_parameters") ? k["rope_parameters"] : k["rope_scaling"];
  r["high_freq_factor"] = rope["low_freq_factor"];
  EXPECT_HAS(parse_error(k), "high_freq_factor");
  r = rope;
  r.erase("low_freq_factor");
  EXPECT_HAS(parse_error(k), "low_freq_factor");
  for (const char* t : {"axial", "su"}) {
    r = rope;
    r["rope_type"] = t;
    const std::string e = parse_error(k);
    EXPECT_HAS(e, t);
    EXPECT_HAS(e, "not supported");
  }
  // longrope needs its factors, one per rotary pair; dynamic its factor.
  r = rope;
  r["rope_type"] = "longrope";
  EXPECT_HAS(parse_error(k), "short_factor");
  r["short_factor"] = json::array({1.0, 2.0});
  r["long_factor"] = json::array({1.0, 2.0});
  EXPECT_HAS(parse_error(k), "one per rotary pair");
  r["short_factor"] = json::array({1.0, "x"});
  EXPECT_HAS(parse_error(k), "short_factor");
  r = rope;
  r["rope_type"] = "dynamic";
  r.erase("factor");
  EXPECT_HAS(parse_error(k), "factor");
}

TEST(ConfigRanges, DeepJsonIsRefusedNotRecursedInto) {
  std::string deep = "{\"architectures\": [\"LlamaForCausalLM\"], \"x\": ";
  for (int i = 0; i < 100000; ++i) deep += "[";
  for (int i = 0; i < 100000; ++i) deep += "]";
  deep += "}";
  try {
    const json parsed = parse_config_json(deep, "m/config.json");
    (void)parsed;
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), "m/config.json");
  }
  // A moderately deep value inside a field is shown summarised, never re-serialised.
  json j = fixture_config("llama_gqa");
  json v = json::array();
  for (int i = 0; i < 100; ++i) v = json::array({v});
  j["hidden_size"] = v;
  const std::string e = parse_error(j);
  EXPECT_HAS(e, "hidden_size");
  EXPECT_LT(e.size(), 300u) << e;
}

// ---------------------------------------------------------------------------------------------------------
// Absurd sizes are checked against the checkpoint before anything proportional to them is built.

class ScratchModel {
 public:
  explicit ScratchModel(const std::string& fixture) {
    dir_ = fs::temp_directory_path() / ("tessera_cfgkeys_" + std::to_string(::getpid()) + "_" + fixture +
                                        "_" + std::to_string(counter_++));
    fs::remove_all(dir_);
    fs::copy(golden::model_path(fixture), dir_, fs::copy_options::recursive);
    fs::remove(dir_ / "golden.json");
    config_ = golden::load_json((dir_ / "config.json").string());
  }
  ~ScratchModel() { fs::remove_all(dir_); }
  json& config() { return config_; }
  void save_config() { std::ofstream(dir_ / "config.json") << config_.dump(2); }
  std::string path() const { return dir_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
  json config_;
};

std::string load_error(const std::string& path, double* seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg = "no error";
  try {
    LoadOptions opt;
    opt.dtype = DType::F32;
    AutoModelForCausalLM::from_pretrained(path, opt);
  } catch (const Error& e) {
    msg = e.what();
  }
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return msg;
}

TEST(ConfigVsCheckpoint, HugeButLegalSizesFailFastNamingTheMismatch) {
  struct Case {
    const char* key;
    int64_t value;
    const char* needle;
  };
  // Within the sanity bounds, so only the checkpoint can refuse them (hidden 65532 is a multiple of 6 heads).
  const std::vector<Case> cases = {
      {"num_hidden_layers", 4000, "num_hidden_layers 4000"},
      {"vocab_size", 4000000, "model.embed_tokens.weight"},
      {"hidden_size", 65532, "model.embed_tokens.weight"},
  };
  for (const Case& c : cases) {
    ScratchModel m("llama_gqa");
    m.config()[c.key] = c.value;
    m.save_config();
    double s = 0;
    const std::string e = load_error(m.path(), &s);
    EXPECT_HAS(e, c.needle);
    EXPECT_LT(s, 1.0) << c.key << " took " << s
                      << " s";  // measured ~0.01 s; 1 s leaves room on a busy machine
  }
}

}  // namespace

// Older hub configs write pad_token_id -1 for "no padding token"; Transformers loads them (with a warning).
TEST(ConfigRanges, PadTokenIdMinusOneMeansNone) {
  for (const auto& [arch, fixture] : kFixtureOf) {
    json j = fixture_config(fixture);
    j["pad_token_id"] = -1;
    EXPECT_FALSE(parse(j).pad_token_id.has_value()) << arch;
    j["pad_token_id"] = -2;
    EXPECT_HAS(parse_error(j), "pad_token_id");
  }
}
