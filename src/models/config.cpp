#include "models/config.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "io/json_util.h"
#include "tessera/error.h"

namespace tessera::models {

namespace {

// Upper bounds no released model comes near (the largest today: hidden 16384 and 126 layers in Llama 3.1
// 405B, 128 heads, head_dim 256, vocab 262144 in Gemma 3, intermediate 53248, context 10M in Llama 4 Scout).
// They refuse absurd files before anything is sized from them, and keep every product of sizes far inside
// int64 (hidden * vocab <= 2^38, layers * hidden * intermediate <= 2^48).
constexpr int64_t kMaxHidden = int64_t{1} << 16;
constexpr int64_t kMaxIntermediate = int64_t{1} << 20;
constexpr int64_t kMaxVocab = int64_t{1} << 22;
constexpr int64_t kMaxLayers = int64_t{1} << 12;
constexpr int64_t kMaxHeads = int64_t{1} << 12;
constexpr int64_t kMaxHeadDim = int64_t{1} << 12;
constexpr int64_t kMaxPositions = int64_t{1} << 26;  // also keeps it an int for the bucket code
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

std::string fmt_number(double v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// ConfigReader

ConfigReader::ConfigReader(const nlohmann::json& j, std::string origin) : j_(j), origin_(std::move(origin)) {
  if (!j_.is_object()) fail(origin_, ": expected a JSON object, got ", show(j_));
}

std::string ConfigReader::show(const nlohmann::json& v) {
  using nlohmann::json;
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    const bool cut = s.size() > 80;
    if (cut) {
      s.resize(80);
      while (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xC0) == 0x80)
        s.pop_back();  // whole UTF-8
      if (!s.empty() && static_cast<unsigned char>(s.back()) >= 0xC0) s.pop_back();
    }
    return json(s).dump(-1, ' ', false, json::error_handler_t::replace) + (cut ? "..." : "");
  }
  if (v.is_array()) {
    // Short lists of scalars in full (e.g. eos ids, layer_types of a small model); anything else summarised.
    bool flat = v.size() <= 8;
    for (const auto& e : v) flat = flat && !e.is_structured();
    if (!flat) return "a list of " + std::to_string(v.size());
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + show(v[i]);
    return out + "]";
  }
  if (v.is_object()) return "an object of " + std::to_string(v.size()) + " keys";
  if (v.is_number_float() &&
      !std::isfinite(v.get<double>()))  // e.g. 1e999 in the file; dump() would say null
    return std::isnan(v.get<double>()) ? "nan"
           : v.get<double>() > 0       ? "inf (out of double range)"
                                       : "-inf (out of double range)";
  return v.dump(-1, ' ', false, json::error_handler_t::replace);  // a scalar: no recursion
}

void ConfigReader::fail_field(const char* key, const std::string& what) const {
  fail(origin_, ": field '", key, "' ", what);
}

const nlohmann::json* ConfigReader::find(const char* key) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<int64_t> ConfigReader::optional_int(const char* key, int64_t lo, int64_t hi) const {
  const nlohmann::json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) fail_field(key, "must be an integer, got " + show(*v));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(kIntMax))
    fail_field(key,
               "is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + show(*v));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi)
    fail_field(key,
               "is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + show(*v));
  return x;
}

int64_t ConfigReader::required_int(const char* key, int64_t lo, int64_t hi) const {
  auto v = optional_int(key, lo, hi);
  if (!v) fail_field(key, "is missing");
  return *v;
}

int64_t ConfigReader::int_or(const char* key, int64_t def, int64_t lo, int64_t hi) const {
  return optional_int(key, lo, hi).value_or(def);
}

std::optional<double> ConfigReader::optional_number(const char* key, double lo, double hi,
                                                    bool lo_open) const {
  const nlohmann::json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) fail_field(key, "must be a number, got " + show(*v));
  const double x = v->get<double>();
  if (!std::isfinite(x)) fail_field(key, "must be a finite number, got " + show(*v));
  if (x < lo || x > hi || (lo_open && x == lo)) {
    std::string range = std::string(lo_open ? "(" : "[") + (std::isinf(lo) ? "-inf" : fmt_number(lo)) + ", " +
                        (std::isinf(hi) ? "inf" : fmt_number(hi)) + "]";
    fail_field(key, "is out of range " + range + ", got " + show(*v));
  }
  return x;
}

double ConfigReader::number_or(const char* key, double def, double lo, double hi, bool lo_open) const {
  return optional_number(key, lo, hi, lo_open).value_or(def);
}

std::optional<bool> ConfigReader::optional_bool(const char* key) const {
  const nlohmann::json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) fail_field(key, "must be true or false, got " + show(*v));
  return v->get<bool>();
}

bool ConfigReader::bool_or(const char* key, bool def) const { return optional_bool(key).value_or(def); }

std::optional<std::string> ConfigReader::optional_string(const char* key) const {
  const nlohmann::json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) fail_field(key, "must be a string, got " + show(*v));
  return v->get<std::string>();
}

std::string ConfigReader::string_or(const char* key, const std::string& def) const {
  return optional_string(key).value_or(def);
}

std::optional<int32_t> ConfigReader::optional_id(const char* key) const {
  const nlohmann::json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) fail_field(key, "must be a token id (an integer), got " + show(*v));
  if (v->is_number_unsigned() ? v->get<uint64_t>() > static_cast<uint64_t>(kInt32Max)
                              : (v->get<int64_t>() < 0 || v->get<int64_t>() > kInt32Max))
    fail_field(key, "must be a token id in [0, " + std::to_string(kInt32Max) + "], got " + show(*v));
  return static_cast<int32_t>(v->get<int64_t>());
}

std::vector<int32_t> ConfigReader::id_list(const char* key) const {
  const nlohmann::json* v = find(key);
  if (!v) return {};
  if (v->is_number_integer()) return {*optional_id(key)};
  if (!v->is_array()) fail_field(key, "must be a token id or a list of token ids, got " + show(*v));
  std::vector<int32_t> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const nlohmann::json& e = (*v)[i];
    const bool ok = e.is_number_integer() &&
                    (e.is_number_unsigned() ? e.get<uint64_t>() <= uint64_t{kInt32Max}
                                            : e.get<int64_t>() >= 0 && e.get<int64_t>() <= kInt32Max);
    if (!ok)
      fail_field(key, "must be a list of token ids in [0, " + std::to_string(kInt32Max) + "], got " +
                          show(e) + " at index " + std::to_string(i));
    out.push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  return out;
}

std::optional<std::vector<std::string>> ConfigReader::optional_string_list(const char* key) const {
  const nlohmann::json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_array()) fail_field(key, "must be a list of strings, got " + show(*v));
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string())
      fail_field(key, "must be a list of strings, got " + show((*v)[i]) + " at index " + std::to_string(i));
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

std::optional<ConfigReader> ConfigReader::optional_object(const char* key) const {
  const nlohmann::json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_object()) fail_field(key, "must be an object, got " + show(*v));
  return ConfigReader(*v, origin_ + ": " + key);
}

// ---------------------------------------------------------------------------------------------------------
// Key tables

const std::vector<ConfigKey>& common_config_keys() {
  using enum KeyUse;
  static const std::vector<ConfigKey> t = {
      {"architectures", kImplemented, "", "picks the architecture (architectures[0])"},
      {"model_type", kImplemented, "",
       "must name the architecture's model type (Transformers picks the class by it)"},
      {"dtype", kImplemented, "", "the default load dtype (Transformers 5's name)"},
      {"torch_dtype", kImplemented, "",
       "the default load dtype (Transformers 4's name; dtype wins when both)"},
      {"tie_word_embeddings", kImplemented, "", "lm_head reads model.embed_tokens.weight"},
      {"bos_token_id", kImplemented, "", "token id (range-checked)"},
      {"eos_token_id", kImplemented, "", "stop id(s) when generation_config.json has none"},
      {"pad_token_id", kImplemented, "",
       "padding id; must be < vocab_size (Transformers' nn.Embedding asserts it)"},
      {"transformers_version", kNoEffect, "", "bookkeeping"},
      {"_name_or_path", kNoEffect, "", "bookkeeping"},
      {"_commit_hash", kNoEffect, "", "bookkeeping (Transformers 5 drops it)"},
      {"output_hidden_states", kNoEffect, "", "output flag"},
      {"output_attentions", kNoEffect, "", "output flag"},
      {"return_dict", kNoEffect, "", "output flag"},
      {"use_return_dict", kNoEffect, "", "output flag"},
      {"chunk_size_feed_forward", kNoEffect, "", "never read by the Llama-family modeling files"},
      {"id2label", kNoEffect, "", "classification heads only"},
      {"label2id", kNoEffect, "", "classification heads only"},
      {"num_labels", kNoEffect, "", "classification heads only"},
      {"problem_type", kNoEffect, "", "classification heads only"},
      {"initializer_range", kNoEffect, "", "weight initialisation (training)"},
      {"attention_dropout", kNoEffect, "", "dropout is off at inference"},
      {"attn_implementation", kNoEffect, "", "eager / sdpa / flash compute the same attention"},
      {"_attn_implementation", kNoEffect, "", "eager / sdpa / flash compute the same attention"},
      {"experts_implementation", kNoEffect, "", "no experts in these architectures"},
      {"tie_last_hidden_states", kNoEffect, "", "which hidden state is returned, not the logits"},
      // Transformers 5 pops generation parameters from config.json (GenerationConfig's defaults list); the
      // model's defaults come from generation_config.json.
      {"use_cache", kNoEffect, "", "a generation parameter: dropped from config.json by Transformers 5"},
      {"max_length", kNoEffect, "", "a generation parameter: dropped from config.json by Transformers 5"},
      {"min_length", kNoEffect, "", "a generation parameter: dropped from config.json by Transformers 5"},
      {"do_sample", kNoEffect, "", "a generation parameter: dropped from config.json by Transformers 5"},
      {"early_stopping", kNoEffect, "", "a generation parameter: dropped from config.json by Transformers 5"},
      {"num_beams", kNoEffect, "", "a generation parameter: dropped from config.json by Transformers 5"},
      {"temperature", kNoEffect, "", "a generation parameter: dropped from config.json by Transformers 5"},
      {"top_k", kNoEffect, "", "a generation parameter: dropped from config.json by Transformers 5"},
      {"top_p", kNoEffect, "", "a generation parameter: dropped from config.json by Transformers 5"},
      {"typical_p", kNoEffect, "", "a generation parameter: dropped from config.json by Transformers 5"},
      {"repetition_penalty", kNoEffect, "",
       "a generation parameter: dropped from config.json by Transformers 5"},
      {"length_penalty", kNoEffect, "", "a generation parameter: dropped from config.json by Transformers 5"},
      {"no_repeat_ngram_size", kNoEffect, "",
       "a generation parameter: dropped from config.json by Transformers 5"},
      {"num_return_sequences", kNoEffect, "",
       "a generation parameter: dropped from config.json by Transformers 5"},
      {"bad_words_ids", kNoEffect, "", "a generation parameter: dropped from config.json by Transformers 5"},
      {"forced_bos_token_id", kNoEffect, "",
       "a generation parameter: dropped from config.json by Transformers 5"},
      {"forced_eos_token_id", kNoEffect, "",
       "a generation parameter: dropped from config.json by Transformers 5"},
      {"is_encoder_decoder", kRefused, "false", "these are decoder-only models"},
      {"quantization_config", kImplemented, "",
       "null, or gpt-oss's {\"quant_method\": \"mxfp4\"} (its experts' MXFP4 blocks computed as stored); "
       "any other quantised safetensors checkpoint is refused"},
      {"per_layer_config", kRefused, "null", "per-layer overrides (heterogeneous layers) are not supported"},
  };
  return t;
}

const std::vector<ConfigKey>& decoder_config_keys() {
  using enum KeyUse;
  static const std::vector<ConfigKey> keys = {
      {"vocab_size", kImplemented, "", "embedding / LM head rows"},
      {"hidden_size", kImplemented, "", ""},
      {"intermediate_size", kImplemented, "", ""},
      {"num_hidden_layers", kImplemented, "", ""},
      {"num_attention_heads", kImplemented, "", ""},
      {"hidden_act", kImplemented, "", "silu, swish, gelu, gelu_pytorch_tanh, gelu_new, relu"},
      {"rms_norm_eps", kImplemented, "", ""},
      {"rope_parameters", kImplemented, "", "Transformers 5 layout; types default, linear, llama3"},
      {"rope_scaling", kImplemented, "",
       "Transformers 4 layout; wins over rope_parameters (both: must agree)"},
      {"rope_theta", kImplemented, "", "Transformers 4 layout (must agree with rope_parameters.rope_theta)"},
      {"original_max_position_embeddings", kImplemented, "", "llama3 rope: overrides the rope dict's"},
  };
  return keys;
}

ConfigReader checked_config_reader(const nlohmann::json& j, const std::string& origin,
                                   const std::vector<ConfigKey>& own_keys) {
  ConfigReader r(j, origin);
  // A key the architecture's own table lists is checked by that row alone.
  check_refused_keys(
      r, merge_config_keys(merge_config_keys(common_config_keys(), decoder_config_keys()), own_keys));
  check_quantization_config(r);
  return r;
}

void check_quantization_config(const ConfigReader& r) {
  const auto it = r.json().find("quantization_config");
  if (it == r.json().end() || it->is_null()) return;
  const auto method = it->is_object() ? it->find("quant_method") : it->end();
  const bool mxfp4 = it->is_object() && method != it->end() && *method == "mxfp4";
  const auto arch = r.json().find("architectures");
  const bool gpt_oss =
      arch != r.json().end() && arch->is_array() && !arch->empty() && (*arch)[0] == "GptOssForCausalLM";
  if (mxfp4 && gpt_oss) return;
  const std::string named = method != it->end() && method->is_string()
                                ? " with quant_method \"" + method->get<std::string>() + "\""
                                : "";
  r.fail_field("quantization_config",
               "is " + ConfigReader::show(*it) + named +
                   ", which is not supported (quantised safetensors checkpoints are not supported, but for "
                   "GptOssForCausalLM's {\"quant_method\": \"mxfp4\"}; only null is)");
}

std::vector<ConfigKey> merge_config_keys(const std::vector<ConfigKey>& shared,
                                         const std::vector<ConfigKey>& own) {
  std::vector<ConfigKey> out;
  for (const ConfigKey& k : shared)
    if (std::none_of(own.begin(), own.end(),
                     [&](const ConfigKey& o) { return std::string_view(o.key) == k.key; }))
      out.push_back(k);
  out.insert(out.end(), own.begin(), own.end());
  return out;
}

void check_refused_keys(const ConfigReader& r, const std::vector<ConfigKey>& table) {
  for (const ConfigKey& k : table) {
    if (k.use != KeyUse::kRefused) continue;
    const auto it = r.json().find(k.key);
    if (it == r.json().end()) continue;
    const nlohmann::json def = nlohmann::json::parse(k.default_json);
    // JSON compares 1 and 1.0 equal, as Python does.
    if (*it == def || (def.is_null() && it->is_null())) continue;
    r.fail_field(k.key, "is " + ConfigReader::show(*it) + ", which is not supported (" + k.why + "; only " +
                            k.default_json + " is)");
  }
}

// ---------------------------------------------------------------------------------------------------------
// Parsing

Activation parse_activation(const ConfigReader& r, const char* key, const char* absent) {
  const std::string act = r.string_or(key, absent);
  // Transformers' ACT2FN names whose function we implement exactly ("swish" is nn.SiLU).
  if (act == "silu" || act == "swish") return Activation::kSilu;
  if (act == "gelu") return Activation::kGelu;
  if (act == "gelu_pytorch_tanh" || act == "gelu_new") return Activation::kGeluTanh;
  if (act == "relu") return Activation::kRelu;
  r.fail_field(
      key, "is " + ConfigReader::show(nlohmann::json(act)) +
               ", which is not supported (supported: silu, swish, gelu, gelu_pytorch_tanh, gelu_new, relu)");
}

namespace {

// One source of rope settings (rope_parameters or rope_scaling), read without the top-level keys.
struct RopeSource {
  const char* name;  // "rope_parameters" / "rope_scaling"
  std::optional<ConfigReader> r;
  bool set() const { return r && !r->json().empty(); }
};

bool same(double a, double b) { return a == b; }

[[noreturn]] void disagree(const ConfigReader& r, const std::string& a, const std::string& av,
                           const std::string& b, const std::string& bv) {
  fail(r.origin(), ": field '", a, "' (", av, ") and field '", b, "' (", bv,
       ") disagree; Transformers would silently use one of them, so the checkpoint is ambiguous");
}

}  // namespace

RopeConfig parse_rope(const ConfigReader& r, std::optional<double> default_partial_rotary,
                      int64_t max_position_embeddings, bool longrope_aliases,
                      std::optional<int64_t> default_original, double default_theta) {
  RopeConfig rope;
  // Bounds that make the float32 table meaningful: theta a positive float32, factors positive, partial in (0,
  // 1].
  const double kMaxTheta = FLT_MAX;
  const auto top_theta = r.optional_number("rope_theta", 0.0, kMaxTheta, true);
  const auto top_partial = r.optional_number("partial_rotary_factor", 0.0, 1.0, true);
  const auto top_original = r.optional_int("original_max_position_embeddings", 1, kMaxPositions);

  RopeSource params{"rope_parameters", r.optional_object("rope_parameters")};
  RopeSource scaling{"rope_scaling", r.optional_object("rope_scaling")};
  for (const RopeSource* s : {&params, &scaling}) {
    if (!s->set()) continue;
    // Transformers 5 nests rope_parameters by layer type for models whose layers differ in rope; none of
    // ours does (their rotary embedding reads rope_parameters["rope_type"] directly and would fail).
    for (const char* lt : {"full_attention", "sliding_attention", "chunked_attention", "linear_attention"})
      if (s->r->json().contains(lt))
        r.fail_field(s->name, "is nested by layer type ('" + std::string(lt) +
                                  "'), which this architecture does not support (one rope for every layer)");
  }

  // Transformers 5 (convert_rope_params_to_dict): rope_scaling replaces rope_parameters when both are set;
  // rope_theta / partial_rotary_factor inside the dict win over the top-level keys. Any disagreement is
  // refused.
  const RopeSource* src = scaling.set() ? &scaling : params.set() ? &params : nullptr;
  auto read_source = [&](const RopeSource& s) {
    RopeConfig out;
    out.theta = default_theta;
    const ConfigReader& d = *s.r;
    const auto type = d.optional_string("rope_type");
    const auto legacy_type = d.optional_string("type");
    if (type && legacy_type && *type != *legacy_type)
      disagree(r, std::string(s.name) + ".rope_type", "'" + *type + "'", std::string(s.name) + ".type",
               "'" + *legacy_type + "'");
    out.type = type ? *type : legacy_type ? *legacy_type : "default";
    // Phi3Config reads 'su' and 'yarn' as longrope (its convert_rope_params_to_dict). It standardises first,
    // which leaves an 'su' dict as it is, so longrope's validation then needs the dict's own original length.
    if (longrope_aliases && (out.type == "su" || out.type == "yarn")) {
      if (out.type == "su" && !d.has("original_max_position_embeddings"))
        d.fail_field(
            "original_max_position_embeddings",
            "is missing (rope_type 'su' needs it in the dict itself; Transformers 5 fails without it)");
      out.type = "longrope";
    }
    if (out.type != "default" && out.type != "linear" && out.type != "dynamic" && out.type != "llama3" &&
        out.type != "yarn" && out.type != "longrope" && out.type != "proportional")
      r.fail_field(s.name, "has rope_type " + ConfigReader::show(nlohmann::json(out.type)) +
                               ", which is not supported (supported: default, linear, dynamic, llama3, yarn, "
                               "longrope, proportional)");
    if (auto th = d.optional_number("rope_theta", 0.0, kMaxTheta, true)) out.theta = *th;
    if (auto p = d.optional_number("partial_rotary_factor", 0.0, 1.0, true)) out.partial_rotary_factor = *p;
    out.max_position_embeddings = max_position_embeddings;
    // proportional: factor optional (absent: 1), as Transformers' _compute_proportional_rope_parameters.
    if (out.type == "proportional") out.factor = d.number_or("factor", 1.0, 0.0, 1e30, true);
    if (out.type == "linear" || out.type == "dynamic" || out.type == "llama3" || out.type == "yarn") {
      // Transformers' rope validation raises KeyError when these are missing.
      if (!d.has("factor")) d.fail_field("factor", "is missing (required by rope_type '" + out.type + "')");
      out.factor = d.number_or("factor", 1.0, 0.0, 1e30, true);
    }
    if (out.type == "llama3") {
      for (const char* k : {"low_freq_factor", "high_freq_factor"})
        if (!d.has(k)) d.fail_field(k, "is missing (required by rope_type 'llama3')");
      out.low_freq_factor = d.number_or("low_freq_factor", 1.0, 0.0, 1e30, true);
      out.high_freq_factor = d.number_or("high_freq_factor", 4.0, 0.0, 1e30, true);
      if (out.high_freq_factor <= out.low_freq_factor)
        d.fail_field("high_freq_factor", "(" + fmt_number(out.high_freq_factor) +
                                             ") must be greater than low_freq_factor (" +
                                             fmt_number(out.low_freq_factor) + ")");
      out.original_max_position_embeddings =
          d.int_or("original_max_position_embeddings", 0, 1, kMaxPositions);
    }
    if (out.type == "yarn") {
      // Transformers: beta_fast / beta_slow `or` their defaults (so 0 and null mean 32 / 1), truncate true.
      const double fast = d.number_or("beta_fast", 32.0, -1e30, 1e30),
                   slow = d.number_or("beta_slow", 1.0, -1e30, 1e30);
      out.beta_fast = fast != 0.0 ? fast : 32.0;
      out.beta_slow = slow != 0.0 ? slow : 1.0;
      out.truncate = d.bool_or("truncate", true);
      out.attention_factor = d.optional_number("attention_factor", 0.0, 1e30);
      out.mscale = d.optional_number("mscale", -1e30, 1e30);
      out.mscale_all_dim = d.optional_number("mscale_all_dim", -1e30, 1e30);
      out.original_max_position_embeddings =
          d.int_or("original_max_position_embeddings", 0, 1, kMaxPositions);
    }
    if (out.type == "longrope") {
      for (const char* k : {"short_factor", "long_factor"}) {
        const nlohmann::json* f = d.find(k);
        if (!f) d.fail_field(k, "is missing (required by rope_type 'longrope')");
        if (!f->is_array() || f->empty())
          d.fail_field(k, "must be a non-empty list of numbers, got " + ConfigReader::show(*f));
        std::vector<double>& dst = std::string(k) == "short_factor" ? out.short_factor : out.long_factor;
        for (const nlohmann::json& x : *f) {
          if (!x.is_number() || !std::isfinite(x.get<double>()) || x.get<double>() <= 0)
            d.fail_field(k, "must hold positive numbers, got " + ConfigReader::show(x));
          dst.push_back(x.get<double>());
        }
      }
      out.factor_set = d.has("factor") && !d.json().at("factor").is_null();
      if (out.factor_set) out.factor = d.number_or("factor", 1.0, 0.0, 1e30, true);
      out.attention_factor = d.optional_number("attention_factor", 0.0, 1e30);
      out.original_max_position_embeddings =
          d.int_or("original_max_position_embeddings", 0, 1, kMaxPositions);
    }
    return out;
  };

  if (src) {
    rope = read_source(*src);
    const ConfigReader& d = *src->r;
    if (scaling.set() && params.set()) {
      // Both layouts: every setting must agree (rope_theta / partial_rotary_factor may be in either dict).
      const RopeConfig other = read_source(params);
      const ConfigReader& p = *params.r;
      auto check = [&](const char* what, bool eq, const std::string& sv, const std::string& pv) {
        if (!eq)
          disagree(r, std::string("rope_scaling.") + what, sv, std::string("rope_parameters.") + what, pv);
      };
      check("rope_type", rope.type == other.type, "'" + rope.type + "'", "'" + other.type + "'");
      if (d.has("rope_theta") && p.has("rope_theta"))
        check("rope_theta", same(rope.theta, other.theta), fmt_number(rope.theta), fmt_number(other.theta));
      if (d.has("partial_rotary_factor") && p.has("partial_rotary_factor"))
        check("partial_rotary_factor", same(rope.partial_rotary_factor, other.partial_rotary_factor),
              fmt_number(rope.partial_rotary_factor), fmt_number(other.partial_rotary_factor));
      check("factor", same(rope.factor, other.factor), fmt_number(rope.factor), fmt_number(other.factor));
      for (const bool long_set : {false, true}) {
        const auto& a = long_set ? rope.long_factor : rope.short_factor;
        const auto& b = long_set ? other.long_factor : other.short_factor;
        check(long_set ? "long_factor" : "short_factor", a == b, std::to_string(a.size()) + " values",
              std::to_string(b.size()) + " values" + (a.size() == b.size() ? ", some different" : ""));
      }
      check("low_freq_factor", same(rope.low_freq_factor, other.low_freq_factor),
            fmt_number(rope.low_freq_factor), fmt_number(other.low_freq_factor));
      check("high_freq_factor", same(rope.high_freq_factor, other.high_freq_factor),
            fmt_number(rope.high_freq_factor), fmt_number(other.high_freq_factor));
      if (d.has("original_max_position_embeddings") && p.has("original_max_position_embeddings"))
        check("original_max_position_embeddings",
              rope.original_max_position_embeddings == other.original_max_position_embeddings,
              std::to_string(rope.original_max_position_embeddings),
              std::to_string(other.original_max_position_embeddings));
      // A value only the other dict has still counts (Transformers would drop it with rope_parameters).
      if (!d.has("rope_theta") && p.has("rope_theta")) rope.theta = other.theta;
      if (!d.has("partial_rotary_factor") && p.has("partial_rotary_factor"))
        rope.partial_rotary_factor = other.partial_rotary_factor;
      if (!d.has("original_max_position_embeddings") && p.has("original_max_position_embeddings"))
        rope.original_max_position_embeddings = other.original_max_position_embeddings;
    }
    const bool theta_in_dict = d.has("rope_theta") || (params.set() && params.r->has("rope_theta"));
    const bool partial_in_dict =
        d.has("partial_rotary_factor") || (params.set() && params.r->has("partial_rotary_factor"));
    const std::string dn = src->name;
    if (top_theta && theta_in_dict && *top_theta != rope.theta)
      disagree(r, "rope_theta", fmt_number(*top_theta), dn + ".rope_theta", fmt_number(rope.theta));
    if (top_theta && !theta_in_dict) rope.theta = *top_theta;
    if (top_partial && partial_in_dict && *top_partial != rope.partial_rotary_factor)
      disagree(r, "partial_rotary_factor", fmt_number(*top_partial), dn + ".partial_rotary_factor",
               fmt_number(rope.partial_rotary_factor));
    if (!partial_in_dict)
      rope.partial_rotary_factor = top_partial.value_or(default_partial_rotary.value_or(1.0));
    if (rope.type == "llama3" || rope.type == "yarn" || rope.type == "longrope") {
      // standardize_rope_params: a top-level original_max_position_embeddings overrides the dict's (Phi-3's
      // convention; Phi3Config always has one, 4096 by default); else the dict's; else
      // max_position_embeddings.
      const auto top = top_original ? top_original : default_original;
      if (top && rope.original_max_position_embeddings > 0 && *top != rope.original_max_position_embeddings)
        disagree(r,
                 top_original ? "original_max_position_embeddings"
                              : "original_max_position_embeddings (absent: "
                                "the config class's default)",
                 std::to_string(*top), dn + ".original_max_position_embeddings",
                 std::to_string(rope.original_max_position_embeddings));
      if (top) rope.original_max_position_embeddings = *top;
      if (rope.original_max_position_embeddings == 0)
        rope.original_max_position_embeddings = max_position_embeddings;
    }
  } else {
    rope.theta = top_theta.value_or(default_theta);
    rope.partial_rotary_factor = top_partial.value_or(default_partial_rotary.value_or(1.0));
  }

  if (!default_partial_rotary) {
    // Llama / Qwen3 rotate whole heads: their default rope ignores partial_rotary_factor, and with a scaled
    // rope (whose tables do honour it) Transformers fails on the shape mismatch.
    // (proportional rope applies its factor inside a whole-head table, so it is whole heads too.)
    if (rope.partial_rotary_factor != 1.0 && rope.type != "default" && rope.type != "proportional")
      r.fail_field("partial_rotary_factor",
                   "is " + fmt_number(rope.partial_rotary_factor) + " with rope_type '" + rope.type +
                       "', which this architecture does not support (it rotates whole heads)");
    if (rope.type != "proportional") rope.partial_rotary_factor = 1.0;
  }
  return rope;
}

std::vector<ConfigKey> qwen_sliding_keys() {
  using enum KeyUse;
  return {
      {"use_sliding_window", kImplemented, "", "sliding_window counts only when true"},
      {"sliding_window", kImplemented, "", "absent: 4096; null: no window"},
      {"max_window_layers", kImplemented, "", "without layer_types: layers >= this slide (absent: 28)"},
      {"layer_types", kImplemented, "", "full_attention / sliding_attention per layer"},
  };
}

void parse_qwen_sliding(const ConfigReader& r, DecoderConfig& c) {
  // Qwen2Config and Qwen3Config (the same code): sliding_window = sliding_window if use_sliding_window else
  // None; layer_types, when not given, slides layers i >= max_window_layers when the window is set.
  // Qwen2Attention / Qwen3Attention then use the window in the layers whose type is "sliding_attention"; the
  // sliding mask needs the window set (ValueError otherwise).
  const bool use = r.bool_or("use_sliding_window", false);
  // 4096: the config classes' default, used when the key is absent (null means no window).
  const int64_t window_value = r.json().contains("sliding_window")
                                   ? r.int_or("sliding_window", 0, use ? 1 : ConfigReader::kIntMin, kInt32Max)
                                   : 4096;
  const bool has_window = use && window_value > 0;
  const int64_t max_window_layers = r.int_or("max_window_layers", 28, 0, kInt32Max);
  std::vector<uint8_t> sliding(static_cast<size_t>(c.num_layers), 0);
  if (auto types = r.optional_string_list("layer_types")) {
    if (static_cast<int64_t>(types->size()) != c.num_layers)
      r.fail_field("layer_types", "has " + std::to_string(types->size()) + " entries, num_hidden_layers is " +
                                      std::to_string(c.num_layers));
    for (size_t i = 0; i < types->size(); ++i) {
      const std::string& t = (*types)[i];
      if (t == "sliding_attention") {
        if (!has_window)
          r.fail_field("layer_types",
                       "marks layer " + std::to_string(i) +
                           " 'sliding_attention' but no sliding window is set (use_sliding_window " +
                           (use ? "true, sliding_window null" : "false") + ")");
        sliding[i] = 1;
      } else if (t != "full_attention" && t != "attention") {  // "attention": Transformers' legacy name
        r.fail_field("layer_types", "has " + ConfigReader::show(nlohmann::json(t)) + " at index " +
                                        std::to_string(i) + ", which " + c.architecture +
                                        " does not support (full_attention, sliding_attention)");
      }
    }
  } else if (has_window) {
    for (int64_t i = max_window_layers; i < c.num_layers; ++i) sliding[static_cast<size_t>(i)] = 1;
  }
  set_sliding_layers(c, window_value, std::move(sliding));
}

void rope_parameters_by_layer_type(const ConfigReader& r, const char* arch, nlohmann::json& full,
                                   nlohmann::json& sliding) {
  const auto p = r.optional_object("rope_parameters");
  if (!p) return;
  for (const auto& [k, v] : p->json().items()) {
    if (k != "full_attention" && k != "sliding_attention")
      r.fail_field("rope_parameters",
                   "has '" + k + "' (" + ConfigReader::show(v) + ") beside its per-layer-type entries; " +
                       arch +
                       " reads only rope_parameters.full_attention and "
                       "rope_parameters.sliding_attention, so the checkpoint is ambiguous");
    if (v.is_null()) continue;
    if (!v.is_object())
      r.fail_field("rope_parameters",
                   "has '" + k + "' = " + ConfigReader::show(v) + ", which must be an object");
    (k == "full_attention" ? full : sliding) = v;
  }
}

void parse_sliding_every_layer(const ConfigReader& r, DecoderConfig& c, int64_t absent) {
  const int64_t window =
      r.json().contains("sliding_window") ? r.int_or("sliding_window", 0, 1, kInt32Max) : absent;
  set_sliding_layers(c, window, std::vector<uint8_t>(static_cast<size_t>(c.num_layers), 1));
}

std::vector<uint8_t> sliding_from_layer_types(const ConfigReader& r, const std::vector<std::string>& types,
                                              int64_t num_layers) {
  if (static_cast<int64_t>(types.size()) != num_layers)
    r.fail_field("layer_types", "has " + std::to_string(types.size()) + " entries, num_hidden_layers is " +
                                    std::to_string(num_layers));
  std::vector<uint8_t> sliding(types.size(), 0);
  for (size_t i = 0; i < types.size(); ++i) {
    const std::string& t = types[i];
    if (t == "sliding_attention") {
      sliding[i] = 1;
    } else if (t != "full_attention" && t != "attention") {  // "attention": Transformers' legacy name
      r.fail_field("layer_types", "has " + ConfigReader::show(nlohmann::json(t)) + " at index " +
                                      std::to_string(i) +
                                      ", which is not supported (full_attention, sliding_attention)");
    }
  }
  return sliding;
}

void set_sliding_layers(DecoderConfig& c, int64_t window, std::vector<uint8_t> sliding) {
  bool any = false;
  for (uint8_t s : sliding) any = any || s;
  any = any && window > 0;
  c.sliding_window = any ? window : 0;
  c.layer_sliding = any ? std::move(sliding) : std::vector<uint8_t>{};
}

void parse_decoder_config(const ConfigReader& r, const ConfigDefaults& d, DecoderConfig& c) {
  const auto& j = r.json();
  c.model_type = r.string_or("model_type", d.model_type ? d.model_type : "");
  // Transformers' Auto classes pick the model class by model_type, not by architectures[0].
  if (d.model_type && c.model_type != d.model_type)
    r.fail_field("model_type", "is " + ConfigReader::show(nlohmann::json(c.model_type)) + ", but " +
                                   c.architecture + " is model_type '" + d.model_type + "'");
  c.hidden_size = r.required_int("hidden_size", 1, kMaxHidden);
  c.intermediate_size = d.intermediate_size
                            ? r.int_or("intermediate_size", *d.intermediate_size, 1, kMaxIntermediate)
                            : r.required_int("intermediate_size", 1, kMaxIntermediate);
  c.num_layers = r.required_int("num_hidden_layers", 1, kMaxLayers);
  c.num_heads = r.required_int("num_attention_heads", 1, kMaxHeads);
  // Absent: the config class's default; null: num_attention_heads (Transformers' __post_init__).
  if (!j.contains("num_key_value_heads"))
    c.num_kv_heads = d.num_kv_heads.value_or(c.num_heads);
  else
    c.num_kv_heads = r.int_or("num_key_value_heads", c.num_heads, 1, kMaxHeads);
  if (c.num_heads % c.num_kv_heads != 0)
    r.fail_field("num_key_value_heads", "(" + std::to_string(c.num_kv_heads) +
                                            ") must divide num_attention_heads (" +
                                            std::to_string(c.num_heads) + ")");
  const int64_t derived_head_dim = c.hidden_size / c.num_heads;
  c.head_dim = r.int_or("head_dim", d.head_dim.value_or(derived_head_dim), 1, kMaxHeadDim);
  if (c.head_dim % 2 != 0)
    r.fail_field("head_dim", "must be even (rotary pairs), got " + std::to_string(c.head_dim));
  c.vocab_size = r.required_int("vocab_size", 1, kMaxVocab);
  c.max_position_embeddings =
      r.int_or("max_position_embeddings", d.max_position_embeddings, 1, kMaxPositions);
  // eps 0 is legal (a zero row then divides by zero in Transformers too); >= 1 is no real model's.
  c.rms_norm_eps = r.number_or("rms_norm_eps", d.rms_norm_eps, 0.0, 1.0);
  c.tie_word_embeddings = r.bool_or("tie_word_embeddings", d.tie_word_embeddings);
  c.attention_bias = r.bool_or("attention_bias", d.attention_bias);
  c.hidden_act = parse_activation(r, d.activation_key, d.activation);
  if (!d.own_rope)
    c.rope = parse_rope(r, d.partial_rotary_factor, c.max_position_embeddings, d.longrope_aliases,
                        d.original_max_position_embeddings, d.rope_theta);
  if (c.rot_dim() % 2 != 0 || c.rot_dim() <= 0)
    r.fail_field("partial_rotary_factor", "(" + fmt_number(c.rope.partial_rotary_factor) +
                                              ") times head_dim (" + std::to_string(c.head_dim) +
                                              ") gives rotary dimension " + std::to_string(c.rot_dim()) +
                                              ", which must be even and positive");

  // dtype (Transformers 5's name) and torch_dtype (4.x's): PreTrainedConfig keeps dtype when both are set;
  // two different values are refused as ambiguous.
  const auto dtype_v5 = r.optional_string("dtype"), dtype_v4 = r.optional_string("torch_dtype");
  if (dtype_v5 && dtype_v4 && *dtype_v5 != *dtype_v4)
    disagree(r, "dtype", ConfigReader::show(nlohmann::json(*dtype_v5)), "torch_dtype",
             ConfigReader::show(nlohmann::json(*dtype_v4)));
  const char* dt_key = dtype_v5 ? "dtype" : "torch_dtype";
  const std::string dt = dtype_v5 ? *dtype_v5 : dtype_v4.value_or("");
  if (!dt.empty()) {
    try {
      c.torch_dtype = parse_dtype(dt);
    } catch (const Error&) {
      r.fail_field(dt_key, "has unsupported dtype " + ConfigReader::show(nlohmann::json(dt)) +
                               " (supported: float32, bfloat16, float16)");
    }
  }
  // Special ids: absent -> the config class's default; null -> none.
  c.bos_token_id = j.contains("bos_token_id") ? r.optional_id("bos_token_id") : d.bos_token_id;
  // pad_token_id -1 appears in older hub configs (e.g. early Llama conversions) meaning "no padding token";
  // Transformers accepts it with a warning. It is read as none (finished rows are padded with the first eos
  // id).
  const auto pad_it = j.find("pad_token_id");
  const bool pad_minus_one = pad_it != j.end() && pad_it->is_number_integer() &&
                             !pad_it->is_number_unsigned() && pad_it->get<int64_t>() == -1;
  c.pad_token_id = pad_minus_one       ? std::nullopt
                   : pad_it != j.end() ? r.optional_id("pad_token_id")
                                       : d.pad_token_id;
  c.eos_token_ids = j.contains("eos_token_id") ? r.id_list("eos_token_id") : d.eos_token_ids;
  if (c.pad_token_id && *c.pad_token_id >= c.vocab_size)
    r.fail_field("pad_token_id", "(" + std::to_string(*c.pad_token_id) + ") must be below vocab_size (" +
                                     std::to_string(c.vocab_size) + ")");
}

nlohmann::json parse_config_json(std::string_view text, const std::string& origin) {
  nlohmann::json j = io::parse_json(text, origin);
  if (!j.is_object()) fail(origin, ": expected a JSON object, got ", ConfigReader::show(j));
  return j;
}

std::string architecture_name(const nlohmann::json& config, const std::string& origin) {
  ConfigReader r(config, origin);
  const nlohmann::json* a = r.find("architectures");
  if (!a)
    r.fail_field("architectures", "is missing (a list of architecture names, e.g. [\"LlamaForCausalLM\"])");
  if (!a->is_array() || a->empty() || !(*a)[0].is_string())
    r.fail_field("architectures", "must be a non-empty list of names, got " + ConfigReader::show(*a));
  return (*a)[0].get<std::string>();
}

void validate(const DecoderConfig& c, const std::string& origin) {
  auto positive = [&](const char* name, int64_t v) {
    if (v <= 0) fail(origin, ": field '", name, "' must be positive, got ", v);
  };
  positive("hidden_size", c.hidden_size);
  positive("intermediate_size", c.intermediate_size);
  positive("num_hidden_layers", c.num_layers);
  positive("num_attention_heads", c.num_heads);
  positive("num_key_value_heads", c.num_kv_heads);
  positive("head_dim", c.head_dim);
  positive("vocab_size", c.vocab_size);
  positive("max_position_embeddings", c.max_position_embeddings);
  if (c.num_heads % c.num_kv_heads != 0)
    fail(origin, ": num_attention_heads (", c.num_heads, ") is not a multiple of num_key_value_heads (",
         c.num_kv_heads, ")");
  for (const RopeConfig* r : {&c.rope, &c.local_rope}) {
    if (r == &c.local_rope && c.layer_local_rope.empty()) continue;
    const int64_t heads = r->head_dim > 0 ? r->head_dim : c.head_dim;
    if (c.rot_dim_of(*r) % 2 != 0 || c.rot_dim_of(*r) <= 0 || c.rot_dim_of(*r) > heads)
      fail(origin, ": rotary dimension ", c.rot_dim_of(*r), " must be even and within head_dim ", heads);
  }
  if (c.head_dim > kMaxHeadDim || c.hidden_size > kMaxHidden || c.vocab_size > kMaxVocab ||
      c.num_layers > kMaxLayers || c.intermediate_size > kMaxIntermediate || c.num_heads > kMaxHeads ||
      c.max_position_embeddings > kMaxPositions)
    fail(origin, ": sizes beyond any real model's (hidden ", c.hidden_size, ", layers ", c.num_layers,
         ", vocab ", c.vocab_size, ")");
  if (!std::isfinite(c.rope.theta) || c.rope.theta <= 0 || !std::isfinite(c.rms_norm_eps) ||
      c.rms_norm_eps < 0)
    fail(origin, ": rope_theta (", c.rope.theta, ") must be positive and rms_norm_eps (", c.rms_norm_eps,
         ") non-negative");
  if (c.rope.type == "longrope") {
    const auto half = static_cast<size_t>(c.rot_dim() / 2);
    for (const bool long_set : {false, true}) {
      const size_t n = (long_set ? c.rope.long_factor : c.rope.short_factor).size();
      if (n != half)
        fail(origin, ": rope_parameters field '", long_set ? "long_factor" : "short_factor", "' has ", n,
             " values; rope_type 'longrope' needs one per rotary pair (", half, " = rotary dimension ",
             c.rot_dim(), " / 2)");
    }
    if (c.rope.original_max_position_embeddings < 2)
      fail(origin, ": rope_parameters field 'original_max_position_embeddings' (",
           c.rope.original_max_position_embeddings, ") must be at least 2 for rope_type 'longrope'");
  }
}

int64_t rope_context_limit(const RopeConfig& rope, int64_t max_position_embeddings) {
  int64_t limit = max_position_embeddings;
  if (rope.type == "yarn" && rope.original_max_position_embeddings > 0) {
    const double served =
        std::floor(static_cast<double>(rope.original_max_position_embeddings) * rope.factor);
    limit = std::max(limit, static_cast<int64_t>(std::min(served, static_cast<double>(kMaxPositions))));
  } else if (rope.type == "dynamic") {
    limit = std::max(limit, kMaxPositions);
  }
  return limit;
}

int64_t DecoderConfig::rope_split_limit() const {
  int64_t limit = std::numeric_limits<int64_t>::max();
  auto add = [&](const RopeConfig& r) {
    if (r.type == "longrope") limit = std::min(limit, r.original_max_position_embeddings);
    if (r.type == "dynamic") limit = std::min(limit, r.max_position_embeddings);
  };
  add(rope);
  if (!layer_local_rope.empty()) add(local_rope);
  return limit;
}

int64_t DecoderConfig::longrope_switch() const {
  // Transformers: only Phi3ForCausalLM's prepare_inputs_for_generation drops the cache at the switch.
  return rope.type == "longrope" && architecture == "Phi3ForCausalLM" ? rope.original_max_position_embeddings
                                                                      : 0;
}

std::string DecoderConfig::rope_crossing_error(int64_t prompt_len, int64_t new_tokens) const {
  const int64_t switch_at = longrope_switch();
  // The last token fed back sits at prompt_len + new_tokens - 2.
  if (switch_at <= 0 || prompt_len > switch_at || prompt_len + new_tokens - 2 < switch_at) return "";
  return "a prompt of " + std::to_string(prompt_len) + " tokens and " + std::to_string(new_tokens) +
         " new tokens would decode past the longrope switch at original_max_position_embeddings (" +
         std::to_string(switch_at) +
         "), where Transformers recomputes the whole sequence with the long factors; a batch or padded rows "
         "do that over slots, which this run cannot use (disable_compile, a dynamic cache, in-step sampling "
         "or tensor parallelism over MPI): keep the prompt and max_new_tokens within " +
         std::to_string(switch_at + 1) + " positions, or use a prompt longer than " +
         std::to_string(switch_at) + " tokens";
}

int64_t DecoderConfig::context_limit() const { return rope_context_limit(rope, max_position_embeddings); }

std::string DecoderConfig::context_limit_str() const {
  const int64_t limit = context_limit();
  const std::string max_pos = "max_position_embeddings (" + std::to_string(max_position_embeddings) + ")";
  if (limit == max_position_embeddings) return max_pos;
  if (rope.type == "dynamic")
    return "the " + std::to_string(limit) + " positions this runtime allows with rope_type 'dynamic' (" +
           max_pos + " is where its scaling starts)";
  return "the " + std::to_string(limit) + " positions rope_type '" + rope.type +
         "' serves (original_max_position_embeddings " +
         std::to_string(rope.original_max_position_embeddings) + " x factor " + fmt_number(rope.factor) +
         "; " + max_pos + ")";
}

std::vector<float> rope_inv_freq(const DecoderConfig& c) { return rope_inv_freq(c, c.rope); }

double rope_attention_factor(const RopeConfig& rope) {
  if (rope.type == "longrope") {
    // Transformers' _compute_longrope_parameters (Python floats).
    if (rope.attention_factor) return *rope.attention_factor;
    const auto orig = static_cast<double>(rope.original_max_position_embeddings);
    const double factor =
        rope.factor_set ? rope.factor : static_cast<double>(rope.max_position_embeddings) / orig;
    return factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(orig));
  }
  if (rope.type != "yarn") return 1.0;
  if (rope.attention_factor) return *rope.attention_factor;
  auto mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
  // Transformers: `if mscale and mscale_all_dim` (both set and nonzero).
  if (rope.mscale && rope.mscale_all_dim && *rope.mscale != 0 && *rope.mscale_all_dim != 0)
    return mscale(rope.factor, *rope.mscale) / mscale(rope.factor, *rope.mscale_all_dim);
  return mscale(rope.factor, 1.0);
}

std::vector<float> rope_inv_freq(const DecoderConfig& c, const RopeConfig& rope, bool long_factors) {
  const int64_t dim = c.rot_dim_of(rope);
  const float base = static_cast<float>(rope.theta);
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  if (rope.type == "proportional") {
    // Transformers' _compute_proportional_rope_parameters: int(partial * head_dim // 2) rotated pairs at
    // 1 / base ** (arange(0, 2 * angles, 2) / head_dim) in float32, zeros after, all divided by factor.
    const auto angles =
        static_cast<int64_t>(std::floor(rope.partial_rotary_factor * static_cast<double>(dim) / 2));
    for (int64_t i = 0; i < dim / 2; ++i) {
      const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
      const float f = i < angles ? 1.0f / std::pow(base, e) : 0.0f;
      inv[static_cast<size_t>(i)] = f / static_cast<float>(rope.factor);
    }
    return inv;
  }
  if (rope.type == "longrope") {
    // 1 / (ext_factors * base ** (arange(0, dim, 2) / dim)), float32 (validate checked the lengths).
    const std::vector<double>& ext = long_factors ? rope.long_factor : rope.short_factor;
    for (int64_t i = 0; i < dim / 2; ++i) {
      const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
      inv[static_cast<size_t>(i)] =
          1.0f / (static_cast<float>(ext[static_cast<size_t>(i)]) * std::pow(base, e));
    }
    return inv;
  }
  for (int64_t i = 0; i < dim / 2; ++i) {
    // float32 as in Transformers: 1 / base ** (arange(0, dim, 2) / dim)
    float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[static_cast<size_t>(i)] = 1.0f / std::pow(base, e);
  }
  if (rope.type == "linear") {
    for (float& f : inv) f = f / static_cast<float>(rope.factor);
  } else if (rope.type == "yarn") {
    // Transformers' _compute_yarn_parameters: the ramp's ends in double (Python floats), the frequencies and
    // the blend in float32 (torch), as it computes them.
    const double base_d = rope.theta, d = static_cast<double>(dim);
    const double orig = static_cast<double>(rope.original_max_position_embeddings);
    auto correction_dim = [&](double rotations) {
      return (d * std::log(orig / (rotations * 2 * M_PI))) / (2 * std::log(base_d));
    };
    double low = correction_dim(rope.beta_fast), high = correction_dim(rope.beta_slow);
    if (rope.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, d - 1);
    if (low == high) high += 0.001;  // as Transformers: no division by zero
    const float lo = static_cast<float>(low), span = static_cast<float>(high - low);
    const float factor = static_cast<float>(rope.factor);
    for (int64_t i = 0; i < dim / 2; ++i) {
      const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
      const float pos_freq = std::pow(base, e);
      const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (factor * pos_freq);
      const float ramp = std::clamp((static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
      const float extra = 1.0f - ramp;
      const float a = interpolation * (1.0f - extra), b = extrapolation * extra;
      inv[static_cast<size_t>(i)] = a + b;
    }
  } else if (rope.type == "llama3") {
    const float factor = static_cast<float>(rope.factor);
    const float old_ctx = static_cast<float>(rope.original_max_position_embeddings);
    const float low = static_cast<float>(rope.low_freq_factor),
                high = static_cast<float>(rope.high_freq_factor);
    const float low_freq_wavelen = old_ctx / low, high_freq_wavelen = old_ctx / high;
    const float two_pi = 2.0f * static_cast<float>(M_PI);
    for (float& f : inv) {
      float wavelen = two_pi / f;
      float scaled = wavelen > low_freq_wavelen ? f / factor : f;
      float smooth = (old_ctx / wavelen - low) / (high - low);
      float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
      bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      f = medium ? smoothed : scaled;
    }
  }
  return inv;
}

bool is_linear(Role r) { return r != Role::kOther && r != Role::kEmbed; }

TpSplit TpLayout::split(Role role, int64_t layer) const {
  if (size <= 1) return TpSplit::kNone;
  switch (role) {
    case Role::kAttnQ:
    case Role::kAttnK:
    case Role::kAttnV:
    case Role::kAttnQkv:  // each of its q, k and v blocks split alike, so every rank keeps whole heads
      return attn_split ? TpSplit::kCol : TpSplit::kNone;  // by heads
    case Role::kAttnO:
      return attn_split ? TpSplit::kRow : TpSplit::kNone;
    case Role::kMlpGate:
    case Role::kMlpUp:
    case Role::kMlpGateUp:  // each half split alike, so gate and up stay paired on every rank
    case Role::kExpertsGateUp:
      return mlp_split_at(layer) ? TpSplit::kCol : TpSplit::kNone;
    case Role::kMlpDown:
    case Role::kExpertsDown:
      return mlp_split_at(layer) ? TpSplit::kRow : TpSplit::kNone;
    case Role::kLmHead:
      return lm_head_split ? TpSplit::kColGather : TpSplit::kNone;
    case Role::kOther:
    case Role::kEmbed:
    case Role::kLinearMixer:
      break;
  }
  return TpSplit::kNone;
}

}  // namespace tessera::models
