// Hyper-parameters of the decoder-only transformer family we run, parsed from
// a Hugging Face config.json. Each architecture file fills what it needs.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tessera/tensor.h"

namespace tessera::models {

struct RopeConfig {
  double theta = 10000.0;
  std::string type = "default";  // "default", "linear", "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
  double partial_rotary_factor = 1.0;
};

// How one rank's share of the model is laid out (tensor parallelism); the default is one rank, nothing split.
// Resolved from the architecture's plan and the user's rules by dist::resolve_tp_plan.
struct TpLayout {
  int rank = 0, size = 1;
  bool attn_split = false;         // q/k/v column-parallel by heads, o_proj row-parallel (the same in every layer)
  std::vector<uint8_t> mlp_split;  // per layer (empty: none): gate/up column-parallel, down row-parallel
  bool lm_head_split = false;      // vocab-parallel LM head, logits all-gathered

  bool mlp_split_at(int64_t layer) const {
    return layer < static_cast<int64_t>(mlp_split.size()) && mlp_split[static_cast<size_t>(layer)] != 0;
  }
};

// The MLP's gate activation (config.json `hidden_act` / `hidden_activation`). kGeluTanh is both
// `gelu_pytorch_tanh` and `gelu_new` (the same tanh approximation).
enum class Activation : uint8_t { kSilu, kGelu, kGeluTanh, kRelu };

struct DecoderConfig {
  std::string architecture;  // architectures[0]
  std::string model_type;
  int64_t hidden_size = 0, intermediate_size = 0, num_layers = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0, vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false, mlp_bias = false;
  bool qk_norm = false;  // Qwen3: RMSNorm on q and k per head
  Activation hidden_act = Activation::kSilu;
  // Sliding-window attention: a query at position p sees keys at positions > p - sliding_window (Transformers'
  // convention) in the layers marked in layer_sliding. 0 / empty: every layer attends to the whole prefix.
  int64_t sliding_window = 0;
  std::vector<uint8_t> layer_sliding;  // [num_layers] (or empty): 1 = this layer uses the sliding window
  std::optional<DType> torch_dtype;
  std::optional<int32_t> bos_token_id, pad_token_id;
  std::vector<int32_t> eos_token_ids;
  TpLayout tp;  // this rank's share (set after parsing, before building graphs)

  bool layer_is_sliding(int64_t layer) const {
    return sliding_window > 0 && layer < static_cast<int64_t>(layer_sliding.size()) &&
           layer_sliding[static_cast<size_t>(layer)] != 0;
  }
  int64_t local_heads() const { return tp.attn_split ? num_heads / tp.size : num_heads; }
  int64_t local_kv_heads() const { return tp.attn_split ? num_kv_heads / tp.size : num_kv_heads; }
  int64_t rot_dim() const { return static_cast<int64_t>(static_cast<double>(head_dim) * rope.partial_rotary_factor); }
};

// Typed access to config.json fields with errors that name the file and field.
class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& j, std::string origin);
  int64_t required_int(const char* key) const;
  int64_t int_or(const char* key, int64_t def) const;
  double number_or(const char* key, double def) const;
  bool bool_or(const char* key, bool def) const;
  std::string string_or(const char* key, const std::string& def) const;
  const nlohmann::json& json() const { return j_; }
  const std::string& origin() const { return origin_; }
  [[noreturn]] void fail_field(const char* key, const std::string& what) const;

 private:
  const nlohmann::json& j_;
  std::string origin_;
};

// Fields shared by the Llama family (sizes, rope, eps, tie, dtype, special ids).
void parse_common(const ConfigReader& r, DecoderConfig& c);
// Checks sizes are positive and divisible as attention requires.
void validate(const DecoderConfig& c, const std::string& origin);
// Rotary inverse frequencies [rot_dim / 2], computed in float32 as Transformers does.
std::vector<float> rope_inv_freq(const DecoderConfig& c);

}  // namespace tessera::models
