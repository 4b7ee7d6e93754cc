#include "models/config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "tessera/error.h"

namespace tessera::models {



ConfigReader::ConfigReader(const nlohmann::json& j, std::string origin) : j_(j), origin_(std::move(origin)) {
  if (!j_.is_object()) fail(origin_, ": expected a JSON object");
}

void ConfigReader::fail_field(const char* key, const std::string& what) const {
  fail(origin_, ": field '", key, "' ", what);
}

int64_t ConfigReader::required_int(const char* key) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) fail_field(key, "is missing");
  if (!it->is_number_integer()) fail_field(key, "must be an integer, got " + it->dump());
  return it->get<int64_t>();
}

int64_t ConfigReader::int_or(const char* key, int64_t def) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return def;
  if (!it->is_number_integer()) fail_field(key, "must be an integer, got " + it->dump());
  return it->get<int64_t>();
}

double ConfigReader::number_or(const char* key, double def) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return def;
  if (!it->is_number()) fail_field(key, "must be a number, got " + it->dump());
  return it->get<double>();
}

bool ConfigReader::bool_or(const char* key, bool def) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return def;
  if (!it->is_boolean()) fail_field(key, "must be true or false, got " + it->dump());
  return it->get<bool>();
}

std::string ConfigReader::string_or(const char* key, const std::string& def) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return def;
  if (!it->is_string()) fail_field(key, "must be a string, got " + it->dump());
  return it->get<std::string>();
}

namespace {

std::vector<int32_t> id_list(const ConfigReader& r, const char* key) {
  auto it = r.json().find(key);
  if (it == r.json().end() || it->is_null()) return {};
  if (it->is_number_integer()) return {it->get<int32_t>()};
  if (!it->is_array()) r.fail_field(key, "must be an integer or a list of integers, got " + it->dump());
  std::vector<int32_t> out;
  for (const auto& v : *it) {
    if (!v.is_number_integer()) r.fail_field(key, "must be a list of integers, got " + it->dump());
    out.push_back(v.get<int32_t>());
  }
  return out;
}

void parse_rope_scaling(const ConfigReader& r, RopeConfig& rope) {
  auto it = r.json().find("rope_scaling");
  if (it == r.json().end() || it->is_null()) return;
  if (!it->is_object()) r.fail_field("rope_scaling", "must be an object");
  ConfigReader s(*it, r.origin() + ": rope_scaling");
  rope.type = s.string_or("rope_type", s.string_or("type", "default"));
  if (rope.type == "default") return;
  if (rope.type != "llama3" && rope.type != "linear")
    r.fail_field("rope_scaling", "has rope_type '" + rope.type + "', supported: default, linear, llama3");
  rope.factor = s.number_or("factor", 1.0);
  if (rope.type == "llama3") {
    rope.low_freq_factor = s.number_or("low_freq_factor", 1.0);
    rope.high_freq_factor = s.number_or("high_freq_factor", 4.0);
    rope.original_max_position_embeddings = s.required_int("original_max_position_embeddings");
    if (rope.low_freq_factor >= rope.high_freq_factor)
      r.fail_field("rope_scaling", "needs low_freq_factor < high_freq_factor");
  }
  if (rope.factor <= 0) r.fail_field("rope_scaling", "needs factor > 0");
}

}  // namespace

void parse_common(const ConfigReader& r, DecoderConfig& c) {
  c.model_type = r.string_or("model_type", "");
  c.hidden_size = r.required_int("hidden_size");
  c.intermediate_size = r.required_int("intermediate_size");
  c.num_layers = r.required_int("num_hidden_layers");
  c.num_heads = r.required_int("num_attention_heads");
  c.num_kv_heads = r.int_or("num_key_value_heads", c.num_heads);
  c.vocab_size = r.required_int("vocab_size");
  c.max_position_embeddings = r.int_or("max_position_embeddings", 2048);
  c.rms_norm_eps = r.number_or("rms_norm_eps", 1e-6);
  c.rope.theta = r.number_or("rope_theta", 10000.0);
  parse_rope_scaling(r, c.rope);
  c.rope.partial_rotary_factor = r.number_or("partial_rotary_factor", c.rope.partial_rotary_factor);
  c.tie_word_embeddings = r.bool_or("tie_word_embeddings", false);
  c.attention_bias = r.bool_or("attention_bias", false);
  c.mlp_bias = r.bool_or("mlp_bias", false);
  std::string dt = r.string_or("torch_dtype", r.string_or("dtype", ""));
  if (!dt.empty()) {
    try {
      c.torch_dtype = parse_dtype(dt);
    } catch (const Error&) {
      r.fail_field("torch_dtype", "has unsupported dtype '" + dt + "' (supported: float32, bfloat16, float16)");
    }
  }
  auto bos = id_list(r, "bos_token_id");
  if (!bos.empty()) c.bos_token_id = bos[0];
  auto pad = id_list(r, "pad_token_id");
  if (!pad.empty()) c.pad_token_id = pad[0];
  c.eos_token_ids = id_list(r, "eos_token_id");
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
  if (c.rot_dim() % 2 != 0 || c.rot_dim() <= 0 || c.rot_dim() > c.head_dim)
    fail(origin, ": rotary dimension ", c.rot_dim(), " must be even and within head_dim ", c.head_dim);
}

std::vector<float> rope_inv_freq(const DecoderConfig& c) {
  const int64_t dim = c.rot_dim();
  const float base = static_cast<float>(c.rope.theta);
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    // float32 as in Transformers: 1 / base ** (arange(0, dim, 2) / dim)
    float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[static_cast<size_t>(i)] = 1.0f / std::pow(base, e);
  }
  if (c.rope.type == "linear") {
    for (float& f : inv) f = f / static_cast<float>(c.rope.factor);
  } else if (c.rope.type == "llama3") {
    const float factor = static_cast<float>(c.rope.factor);
    const float old_ctx = static_cast<float>(c.rope.original_max_position_embeddings);
    const float low = static_cast<float>(c.rope.low_freq_factor), high = static_cast<float>(c.rope.high_freq_factor);
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

}  // namespace tessera::models
