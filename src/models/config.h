// Hyper-parameters of the decoder-only transformer family we run, parsed from
// a Hugging Face config.json. Each architecture file fills what it needs.
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::models {

// Rotary embedding, as Transformers 5 standardises it into `rope_parameters` (from either config layout).
struct RopeConfig {
  double theta = 10000.0;
  // "default", "linear", "dynamic", "llama3", "yarn", "longrope", "proportional" (Gemma 4's full layers: the
  // first partial_rotary_factor * head_dim / 2 pairs (i, i + head_dim / 2) rotate at 1 / theta^(2i /
  // head_dim), divided by factor; the other pairs not at all)
  std::string type = "default";
  double factor = 1.0;
  // The size of the heads this rope rotates (0: DecoderConfig::head_dim); Gemma 4's full and sliding layers
  // differ.
  int64_t head_dim = 0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
  double partial_rotary_factor = 1.0;
  // yarn: the ramp between extrapolated and interpolated frequencies (beta_fast / beta_slow, absent or 0: 32
  // / 1, `truncate` rounding its ends), and the factor on cos and sin (attention_factor, else from factor,
  // mscale and mscale_all_dim), as Transformers' _compute_yarn_parameters.
  double beta_fast = 32.0, beta_slow = 1.0;
  bool truncate = true;
  std::optional<double> attention_factor, mscale, mscale_all_dim;
  // longrope: each rotary pair's frequency divided by short_factor[i] while the sequence reaches at most
  // original_max_position_embeddings positions, by long_factor[i] beyond; the factor on cos and sin is
  // attention_factor, else sqrt(1 + ln f / ln original) with f = `factor` when set (factor_set), else
  // max_position_embeddings / original_max_position_embeddings.
  std::vector<double> short_factor, long_factor;
  bool factor_set = false;
  // The config's max_position_embeddings: dynamic's switch length, longrope's default factor.
  int64_t max_position_embeddings = 0;
};

// What a module is in its block. Every linear layer the graph builder adds carries one
// (GraphBuilder::Linear), and the tensor-parallel plan is resolved per role (distributed::resolve_tp_plan
// maps the plan's module patterns to the roles of the modules they match) and applied per role
// (TpLayout::split).
enum class Role : uint8_t {
  kOther,  // not a linear layer (norm weights, ...): always replicated
  kEmbed,  // the token embedding table: replicated
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnO,
  kMlpGate,
  kMlpUp,
  kMlpGateUp,  // a fused gate/up projection (gate rows first)
  kMlpDown,
  kLmHead,
  kAttnQkv,        // a fused q/k/v projection (q rows, then k, then v): split by heads like q/k/v
  kExpertsGateUp,  // stacked experts' gate/up [E, 2I, H]: each expert's gate and up halves split alike
  kExpertsDown,    // stacked experts' down [E, H, I]: each expert's columns split
  kLinearMixer,    // a linear-attention projection (Gated DeltaNet's in_proj_* / out_proj): replicated
};
bool is_linear(Role r);  // every role but kOther and kEmbed

// How one linear layer is split over the tensor-parallel ranks.
enum class TpSplit : uint8_t {
  kNone,       // every rank holds the whole weight
  kCol,        // rows of W (output features) split; the output stays split
  kRow,        // columns of W (input features) split; partial outputs summed by an all-reduce
  kColGather,  // kCol, then the outputs all-gathered (vocab-parallel LM head)
};

// How one rank's share of the model is laid out (tensor parallelism); the default is one rank, nothing split.
// Resolved from the architecture's plan and the user's rules by distributed::resolve_tp_plan.
struct TpLayout {
  int rank = 0, size = 1;
  bool attn_split = false;  // q/k/v column-parallel by heads, o_proj row-parallel (the same in every layer)
  std::vector<uint8_t> mlp_split;  // per layer (empty: none): gate/up column-parallel, down row-parallel
  bool lm_head_split = false;      // vocab-parallel LM head, logits all-gathered

  bool mlp_split_at(int64_t layer) const {
    return layer < static_cast<int64_t>(mlp_split.size()) && mlp_split[static_cast<size_t>(layer)] != 0;
  }
  // The split of the linear layer with `role` in `layer` (-1 outside the layers) on size > 1 ranks.
  TpSplit split(Role role, int64_t layer) const;
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
  Activation hidden_act = Activation::kSilu;
  // Sliding-window attention: a query at position p sees keys at positions > p - sliding_window
  // (Transformers' convention) in the layers marked in layer_sliding. 0 / empty: every layer attends to the
  // whole prefix.
  int64_t sliding_window = 0;
  std::vector<uint8_t> layer_sliding;  // [num_layers] (or empty): 1 = this layer uses the sliding window
  // Gemma 2 / Gemma 3 (0 / false: off): token embeddings times sqrt(hidden_size) rounded to the model dtype;
  // every RMSNorm scales by (1 + weight) (the weight plus 1 in float32, at load); attention scale
  // query_pre_attn_scalar^-0.5 instead of head_dim^-0.5; tanh soft-capping of the attention scores and of the
  // logits (x -> tanh(x / cap) * cap).
  bool scale_embeddings = false;
  bool norm_plus_one = false;
  double query_pre_attn_scalar = 0;
  double attn_logit_softcapping = 0, final_logit_softcapping = 0;
  // Gemma 3: the rope of the sliding layers (layer_local_rope marks them, empty: none); `rope` is the
  // others'.
  RopeConfig local_rope;
  std::vector<uint8_t> layer_local_rope;
  // Gemma 4: a per-layer input of per_layer_input_size values for every layer from a second embedding table
  // of per_layer_vocab rows (0: none); keys reused as values in the full-attention layers (k_eq_v); the dense
  // MLP twice intermediate_size wide in the layers that share keys and values (double_wide_shared_mlp); the
  // experts (num_experts, moe_intermediate_size) beside the dense MLP in every layer (moe_beside_mlp).
  int64_t per_layer_input_size = 0, per_layer_vocab = 0;
  bool k_eq_v = false, double_wide_shared_mlp = false, moe_beside_mlp = false;
  // Mixture of experts (num_experts 0: dense). The layers marked in layer_sparse replace the gated MLP by the
  // sparse block: a router (mlp.gate) choosing num_experts_per_tok of num_experts experts per token, each a
  // gated MLP of moe_intermediate_size (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H,
  // I]).
  int64_t num_experts = 0, num_experts_per_tok = 0, moe_intermediate_size = 0;
  std::vector<uint8_t> layer_sparse;          // [num_layers]
  double swiglu_alpha = 0, swiglu_limit = 0;  // gpt-oss's experts (clamped SwiGLU)
  bool moe_norm_topk = false;  // the kept routing weights divided by their sum (Qwen3-MoE's norm_topk_prob)
  // > 0: each sparse block also has a shared expert (mlp.shared_expert, a gated MLP of this intermediate
  // size) scaled per token by sigmoid(mlp.shared_expert_gate) and added to the experts' sum (Qwen3.5-MoE,
  // Qwen3-Next).
  int64_t shared_expert_intermediate_size = 0;
  // Linear attention's value heads tiled over the key heads (value head h reads key head h % key heads; a
  // GGUF as llama.cpp's converter writes it) instead of grouped (h / (value heads / key heads)). Set by the
  // loader from the checkpoint (io::WeightSource::linear_tiled_value_heads), not read from config.json.
  bool linear_tiled_value_heads = false;
  // Qwen3-Next's in_proj_qkvz read as Qwen3.5's in_proj_qkv and in_proj_z (all q, all k, all v; z), as
  // llama.cpp's converter splits it; in_proj_ba stays fused. Set by the loader
  // (io::WeightSource::linear_split_qkvz).
  bool linear_split_qkvz = false;
  std::optional<DType> torch_dtype;
  // Matrices kept block-quantised as the checkpoint stores them (a GGUF's block-quantised tensors on the
  // native cpu backend), by Hugging Face name; every other matrix is in the graph's dtype. Set by the loader,
  // not read from config.json. A tensor-parallel column block that is not whole blocks stays in the dtype.
  std::map<std::string, DType> quantized_weights;
  std::optional<int32_t> bos_token_id, pad_token_id;
  std::vector<int32_t> eos_token_ids;
  TpLayout tp;  // this rank's share (set after parsing, before building graphs)

  // The positions a sequence may reach: max_position_embeddings, or what the rope scaling serves beyond it
  // (rope_context_limit); and the same for an error message, naming both numbers when they differ.
  int64_t context_limit() const;
  std::string context_limit_str() const;
  // The longest prompt whose keys do not depend on the prompt's whole length: a rope whose frequencies follow
  // the sequence's length (longrope: past original_max_position_embeddings; dynamic: past
  // max_position_embeddings) rotates a longer prompt's every key by that length, so such a prompt is computed
  // whole (no chunks, no cached or reused prefix). INT64_MAX for the other ropes.
  int64_t rope_split_limit() const;
  // Phi3ForCausalLM's longrope switch, original_max_position_embeddings (0: another rope or architecture):
  // decoding that feeds the token at this position from a shorter prompt crosses it, where Transformers'
  // Phi3ForCausalLM drops its cache and recomputes the whole sequence with the long factors (generate() does
  // the same for one unpadded sequence). Other architectures with longrope switch per forward, as dynamic.
  int64_t longrope_switch() const;
  // Why a sequence of `prompt_len` tokens and `new_tokens` more cannot run where that recompute is not done
  // (generate()'s own loop for a batch or a padded row, where SlotBatch cannot take it): "" when it does not
  // cross the switch.
  std::string rope_crossing_error(int64_t prompt_len, int64_t new_tokens) const;

  bool layer_is_sliding(int64_t layer) const {
    return sliding_window > 0 && layer < static_cast<int64_t>(layer_sliding.size()) &&
           layer_sliding[static_cast<size_t>(layer)] != 0;
  }
  bool layer_is_sparse(int64_t layer) const {
    return layer >= 0 && layer < static_cast<int64_t>(layer_sparse.size()) &&
           layer_sparse[static_cast<size_t>(layer)] != 0;
  }
  // Qwen3.5 / Qwen3-Next: the layers marked in layer_linear mix tokens by Gated DeltaNet linear attention
  // (a recurrent state per sequence, graph::Op::GatedDeltaNet) instead of self-attention.
  std::vector<uint8_t> layer_linear;
  int64_t linear_num_key_heads = 0, linear_num_value_heads = 0, linear_key_head_dim = 0,
          linear_value_head_dim = 0, linear_conv_kernel_dim = 0;
  bool layer_is_linear(int64_t layer) const {
    return layer >= 0 && layer < static_cast<int64_t>(layer_linear.size()) &&
           layer_linear[static_cast<size_t>(layer)] != 0;
  }
  // Some layer keeps a recurrent state: a sequence's cache is not only keys and values by position, so it
  // cannot be cut at a position (prefix reuse, speculative rollback).
  bool has_recurrent_state() const {
    for (uint8_t x : layer_linear)
      if (x) return true;
    return false;
  }
  // SmolLM3's NoPE layers (no_rope_layers): 1 = this layer applies no rotary embedding to q and k. Empty:
  // every layer rotates.
  std::vector<uint8_t> layer_no_rope;
  bool layer_uses_rope(int64_t layer) const {
    return layer >= static_cast<int64_t>(layer_no_rope.size()) || !layer_no_rope[static_cast<size_t>(layer)];
  }
  bool layer_uses_local_rope(int64_t layer) const {
    return layer < static_cast<int64_t>(layer_local_rope.size()) &&
           layer_local_rope[static_cast<size_t>(layer)];
  }
  int64_t local_heads() const { return tp.attn_split ? num_heads / tp.size : num_heads; }
  int64_t local_kv_heads() const { return tp.attn_split ? num_kv_heads / tp.size : num_kv_heads; }
  // The rotated dims of each head under `r` (proportional: the whole head, its unrotated pairs at frequency
  // 0).
  int64_t rot_dim_of(const RopeConfig& r) const {
    const int64_t hd = r.head_dim > 0 ? r.head_dim : head_dim;
    if (r.type == "proportional") return hd;
    return static_cast<int64_t>(static_cast<double>(hd) * r.partial_rotary_factor);
  }
  int64_t rot_dim() const { return rot_dim_of(rope); }

  // Gemma 4: attention geometry per layer (empty: head_dim and num_kv_heads in every layer), and key/value
  // sharing: layer l attends over the keys and values of layer layer_kv_source[l] (empty, or l itself: its
  // own), computing no keys or values of its own.
  std::vector<int64_t> layer_head_dim, layer_kv_heads;
  std::vector<int32_t> layer_kv_source;
  int64_t head_dim_of(int64_t layer) const {
    return layer >= 0 && layer < static_cast<int64_t>(layer_head_dim.size())
               ? layer_head_dim[static_cast<size_t>(layer)]
               : head_dim;
  }
  int64_t kv_heads_of(int64_t layer) const {
    return layer >= 0 && layer < static_cast<int64_t>(layer_kv_heads.size())
               ? layer_kv_heads[static_cast<size_t>(layer)]
               : num_kv_heads;
  }
  int64_t local_kv_heads_of(int64_t layer) const {
    return tp.attn_split ? kv_heads_of(layer) / tp.size : kv_heads_of(layer);
  }
  int64_t kv_source(int64_t layer) const {
    return layer >= 0 && layer < static_cast<int64_t>(layer_kv_source.size())
               ? layer_kv_source[static_cast<size_t>(layer)]
               : layer;
  }
  // The layer keeps keys and values of its own in the cache (not linear attention, not a sharing layer).
  bool layer_has_cache(int64_t layer) const { return !layer_is_linear(layer) && kv_source(layer) == layer; }
};

// Typed, range-checked access to one JSON object of a config file (config.json, generation_config.json, a
// nested object such as rope_parameters): THE reader for every such file. Every error is one line naming the
// origin, the field and the bad value (shown bounded: a deep or huge value is never re-serialised).
// A key that is absent or JSON null reads as "not set", as in Transformers.
class ConfigReader {
 public:
  static constexpr int64_t kIntMin = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kIntMax = std::numeric_limits<int64_t>::max();
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  // `j` must outlive the reader. Throws Error when `j` is not an object.
  ConfigReader(const nlohmann::json& j, std::string origin);

  // The value of `key`, or nullptr when absent or null.
  const nlohmann::json* find(const char* key) const;
  bool has(const char* key) const { return find(key) != nullptr; }

  // Integers: JSON integers only (2.0, 1e300 and "2" are refused), within [lo, hi].
  int64_t required_int(const char* key, int64_t lo = kIntMin, int64_t hi = kIntMax) const;
  int64_t int_or(const char* key, int64_t def, int64_t lo = kIntMin, int64_t hi = kIntMax) const;
  std::optional<int64_t> optional_int(const char* key, int64_t lo = kIntMin, int64_t hi = kIntMax) const;
  // Finite numbers (integers accepted), within [lo, hi] (lo itself excluded when lo_open).
  double number_or(const char* key, double def, double lo = -kInf, double hi = kInf,
                   bool lo_open = false) const;
  std::optional<double> optional_number(const char* key, double lo = -kInf, double hi = kInf,
                                        bool lo_open = false) const;
  bool bool_or(const char* key, bool def) const;
  std::optional<bool> optional_bool(const char* key) const;
  std::string string_or(const char* key, const std::string& def) const;
  std::optional<std::string> optional_string(const char* key) const;
  // Token ids: an integer in [0, 2^31 - 1].
  std::optional<int32_t> optional_id(const char* key) const;
  // An id or a list of ids (eos_token_id); empty when not set.
  std::vector<int32_t> id_list(const char* key) const;
  // A list of strings (e.g. layer_types); nullopt when not set.
  std::optional<std::vector<std::string>> optional_string_list(const char* key) const;
  // A nested object, read with the same rules; its errors name "<origin>: <key>". nullopt when not set.
  std::optional<ConfigReader> optional_object(const char* key) const;

  const nlohmann::json& json() const { return j_; }
  const std::string& origin() const { return origin_; }
  // "<origin>: field '<key>' <what>"
  [[noreturn]] void fail_field(const char* key, const std::string& what) const;
  // A bounded, one-line rendering of a JSON value for error messages (scalars as JSON, strings cut at 80
  // bytes, lists and objects summarised without recursion).
  static std::string show(const nlohmann::json& v);

 private:
  const nlohmann::json& j_;
  std::string origin_;
};

// How an architecture treats one config.json key that Transformers' configuration or modeling file for it
// reads. The tables live in the architecture files (qwen3.cpp, llama.cpp, glm4.cpp) and are tested by
// tests/test_config_keys.cpp.
enum class KeyUse : uint8_t {
  kImplemented,  // read and honoured (golden-tested)
  kNoEffect,  // read by Transformers but changes nothing at inference (training, bookkeeping, output flags)
  kRefused,   // only its default (`default_json`) is accepted; any other value is an error naming key and
              // value
};
struct ConfigKey {
  const char* key;
  KeyUse use;
  const char* default_json;  // kRefused: the one accepted value, as JSON ("null": only absent / null)
  const char* why;           // one line: what Transformers does with it, and what we do
};
// Keys of PreTrainedConfig itself (every architecture): bookkeeping, output flags, classification heads,
// generation parameters (Transformers 5 drops those from config.json), quantization
// (check_quantization_config).
const std::vector<ConfigKey>& common_config_keys();
// Keys every Llama-family decoder reads the same way (sizes, activation, eps, both rope layouts); each
// architecture's file lists only its own keys beside these (registry: Architecture::config_keys holds both).
const std::vector<ConfigKey>& decoder_config_keys();
// quantization_config: absent, null, or {"quant_method": "mxfp4", ...} in a GptOssForCausalLM config (the
// hub's gpt-oss, whose experts are MXFP4 blocks); anything else is refused naming the key and its value.
void check_quantization_config(const ConfigReader& r);
// The start of every parser: a typed reader over `j` after refusing every kRefused key of the common, the
// decoder and the architecture's own table set to anything but its default, and any quantization_config
// but gpt-oss's MXFP4 one.
ConfigReader checked_config_reader(const nlohmann::json& j, const std::string& origin,
                                   const std::vector<ConfigKey>& own_keys);
// Refuses every kRefused key of `table` that is set to anything but its default.
void check_refused_keys(const ConfigReader& r, const std::vector<ConfigKey>& table);
// `shared` without the rows whose key `own` lists, then `own`: an architecture's row for a key replaces the
// shared tables' (Gemma 4 implements per_layer_config, which common_config_keys() refuses).
std::vector<ConfigKey> merge_config_keys(const std::vector<ConfigKey>& shared,
                                         const std::vector<ConfigKey>& own);

// Per-architecture defaults: what Transformers' config class uses when config.json leaves a key out.
struct ConfigDefaults {
  const char* model_type = nullptr;     // config.json's model_type must be this when present (nullptr: any)
  std::optional<int64_t> head_dim;      // nullopt: hidden_size / num_attention_heads
  std::optional<int64_t> num_kv_heads;  // nullopt: num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  bool attention_bias = false;
  std::optional<double>
      partial_rotary_factor;  // nullopt: the rotary dim is the whole head, whatever the file says
  std::optional<int32_t> bos_token_id, pad_token_id;
  std::vector<int32_t> eos_token_ids;
  bool tie_word_embeddings = false;
  // The MLP activation's key and its value when absent (Gemma: hidden_activation, gelu_pytorch_tanh).
  const char* activation_key = "hidden_act";
  const char* activation = "silu";
  // The architecture reads its rope itself in its finish hook (Gemma 3: one rope per layer type).
  bool own_rope = false;
  bool longrope_aliases = false;  // rope_type 'su' and 'yarn' mean longrope (Phi3Config)
  std::optional<int64_t>
      original_max_position_embeddings;  // the class's top-level default (Phi3Config: 4096)
  double rope_theta = 10000.0;  // the config class's default_theta: rope_theta when config.json has none
  // intermediate_size when config.json has none (nullopt: required). 0: the finish hook sets it (Qwen3.5-MoE,
  // whose layers are all sparse, has no such field).
  std::optional<int64_t> intermediate_size;
};

// Sizes (with sane upper bounds), eps, tie, dtype, special ids, hidden_act and rope (both layouts) into `c`.
void parse_decoder_config(const ConfigReader& r, const ConfigDefaults& d, DecoderConfig& c);
// Rope settings from either layout: Transformers 5's `rope_parameters`, or the older top-level `rope_theta` /
// `rope_scaling` / `partial_rotary_factor`; both present and disagreeing is an error naming both keys.
// `partial_rotary_factor` nullopt: the architecture rotates whole heads (any factor but 1 is refused, except
// with default rope where Transformers ignores it).
// `longrope_aliases`: rope_type 'su' and 'yarn' mean longrope (Phi3Config). `default_original`: the config
// class's top-level original_max_position_embeddings when config.json has none (Phi3Config: 4096).
RopeConfig parse_rope(const ConfigReader& r, std::optional<double> default_partial_rotary,
                      int64_t max_position_embeddings, bool longrope_aliases = false,
                      std::optional<int64_t> default_original = std::nullopt, double default_theta = 10000.0);
// rope_parameters nested by layer type (Gemma 3, OLMo 3): its full_attention and sliding_attention entries
// into `full` and `sliding` (left as they are when absent or null); any other key is refused as ambiguous
// (`arch` reads only those two), an entry that is not an object as malformed.
void rope_parameters_by_layer_type(const ConfigReader& r, const char* arch, nlohmann::json& full,
                                   nlohmann::json& sliding);
// `hidden_act`: silu/swish, gelu, gelu_pytorch_tanh, gelu_new, relu; anything else refused by name.
Activation parse_activation(const ConfigReader& r, const char* key, const char* absent = "silu");
// Sliding-window layers exactly as Transformers' Qwen2Config and Qwen3Config decide them (the same code):
// `use_sliding_window`, `sliding_window`, `max_window_layers`, `layer_types`.
void parse_qwen_sliding(const ConfigReader& r, DecoderConfig& c);
// The keys parse_qwen_sliding reads and what it does with them (rows of the tables of Qwen2 and Qwen3).
std::vector<ConfigKey> qwen_sliding_keys();
// `sliding_window` in every layer (MistralConfig, Phi3Config): absent: `absent`; null: no window; 0 is
// refused (it leaves a query no key; Transformers fails on it).
void parse_sliding_every_layer(const ConfigReader& r, DecoderConfig& c, int64_t absent);
// Gemma 2 and Gemma 3 (gemma2.cpp): embedding scale, (1 + weight) norms, query_pre_attn_scalar, the two
// soft-cappings (absent: the given class defaults; null: none), hidden_act checked against hidden_activation,
// use_bidirectional_attention true refused.
void parse_gemma_common(const ConfigReader& r, DecoderConfig& c, std::optional<double> attn_softcap_absent,
                        std::optional<double> final_softcap_absent);
// Their sliding layers: layer_types, else layer i slides unless (i + 1) % pattern == 0; sliding_window
// (absent: 4096). Returns the layers whose type is sliding_attention.
std::vector<uint8_t> parse_gemma_sliding(const ConfigReader& r, DecoderConfig& c, int64_t pattern);
// The layers marked in `sliding` (one per layer) slide over `window` positions; when none is marked or the
// window is 0, no layer slides (sliding_window 0, layer_sliding empty).
void set_sliding_layers(DecoderConfig& c, int64_t window, std::vector<uint8_t> sliding);

// config.json text -> a JSON object (nesting depth bounded by io::parse_json); errors name `origin`.
nlohmann::json parse_config_json(std::string_view text, const std::string& origin);
// architectures[0] of a parsed config.json (a non-empty list of names), else an error naming the field.
std::string architecture_name(const nlohmann::json& config, const std::string& origin);

// Checks sizes are positive and divisible as attention requires.
void validate(const DecoderConfig& c, const std::string& origin);
// Rotary inverse frequencies [rot_dim / 2], computed in float32 as Transformers does.
std::vector<float> rope_inv_freq(const DecoderConfig& c);
// The factor on cos and sin of `rope` (Transformers' attention_scaling: yarn's, else 1).
double rope_attention_factor(const RopeConfig& rope);
// The same for `rope` over the config's rotary dims (Gemma 3's local rope).
// `long_factors`: longrope's frequencies beyond its original length.
std::vector<float> rope_inv_freq(const DecoderConfig& c, const RopeConfig& rope, bool long_factors = false);
// The positions a sequence may reach with `rope` (vLLM's derivation, as the issue of long context asks):
// yarn serves original_max_position_embeddings x factor, dynamic any length (kMaxPositions), the others
// max_position_embeddings; never less than max_position_embeddings.
int64_t rope_context_limit(const RopeConfig& rope, int64_t max_position_embeddings);
// layer_types as a per-layer sliding mask: one entry per layer, each full_attention (or the legacy
// "attention") or sliding_attention; anything else refused naming the entry, `arch` and what it supports.
std::vector<uint8_t> sliding_from_layer_types(const ConfigReader& r, const std::vector<std::string>& types,
                                              int64_t num_layers);

}  // namespace tessera::models
