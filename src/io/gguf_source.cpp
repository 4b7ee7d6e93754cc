// A GGUF of a supported architecture (llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3, glm4, gpt-oss,
// smollm3, olmo2) seen as a Hugging Face checkpoint: config.json derived from the metadata (under the
// architecture's key prefix) as llama.cpp reads it, tensor names mapped to HF's, and for llama the q/k
// projection rows put back in HF order (the HF->GGUF converter interleaves each head's two rotary halves for
// llama.cpp's rope; see unpermute_rows). The others are stored unpermuted (llama.cpp runs them with the NeoX
// rope, as Transformers does). Mistral has no architecture of its own: llama.cpp's converter writes it as
// llama (no sliding window), and so it loads. Gemma's RMSNorm weights are stored as 1 + weight and are given
// back as HF stores them (GemmaGgufSource). Mixtures of experts: qwen3moe is Qwen3MoeForCausalLM, gpt-oss
// GptOssForCausalLM (its router and expert biases, attention sinks, MXFP4 experts), and a llama GGUF with
// experts (llama.cpp's Mixtral) MixtralForCausalLM; their experts are presented in Transformers 5's fused
// layout (see map_experts).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "io/gguf.h"
#include "io/io_util.h"
#include "io/mapped_file.h"
#include "io/weight_source.h"
#include "tessera/error.h"

namespace tessera::io {

using ojson = nlohmann::ordered_json;

namespace {

// How an architecture's block tensors are named and laid out.
enum class Layout {
  kLlama,   // attn_norm / ffn_norm before attention / MLP; separate q, k, v and gate, up
  kGemma,   // four norms a block: attn_norm, post_attention_norm, ffn_norm (before the MLP), post_ffw_norm
  kPhi3,    // attn_qkv (q rows, then k, then v) and ffn_up (gate rows, then up), as HF's fused tensors
  kGlm4,    // GLM-4-0414: attn_norm, post_attention_norm (on attention's output), ffn_norm, post_ffw_norm
            // (on the MLP's output); ffn_up holds gate rows, then up, as HF's gate_up_proj
  kGptOss,  // gpt-oss: attn_norm, post_attention_norm (before the experts), attn_sinks
  kOlmo2,   // OLMo 2: post_attention_norm and post_ffw_norm on the outputs only; q/k norms over every head
  kQwen35,  // Qwen3.5: attn_norm, post_attention_norm; Gated DeltaNet blocks (attn_qkv, attn_gate, ssm_*)
            // beside gated attention blocks (attn_q holding each head's query and gate rows)
};

// Mixtures of experts, as llama.cpp reads them (blk.N.ffn_gate_inp and the stacked ffn_{gate,up,down}_exps).
enum class Moe {
  kNone,
  kMixtral,  // llama: experts in every block when <arch>.expert_count > 0 (Mixtral), else a dense llama
  kQwen3,    // qwen3moe: Qwen3's blocks with experts (and, here, the dense blocks of mlp_only_layers)
  kGptOss,   // gpt-oss: experts in every block, with biases; the router (with a bias) is mlp.router
  kQwen35,   // qwen35moe: experts in every block beside a shared expert (ffn_*_shexp, ffn_gate_inp_shexp)
};

// What differs between the GGUF architectures read here; the metadata keys are "<gguf>.<name>".
struct ArchSpec {
  const char* gguf;        // general.architecture
  const char* hf_class;    // config.json architectures[0]
  const char* model_type;  // config.json model_type
  bool permuted_qk;        // q/k rows stored interleaved (llama)
  bool bias_keys;          // the config class has attention_bias (and, llama, mlp_bias)
  bool mlp_bias_key;
  Layout layout = Layout::kLlama;
  // Gemma: the block count of the 27B model, whose attention llama.cpp scales by (hidden / heads)^-0.5
  // instead of head_dim^-0.5 (no metadata key says which; HF's configs carry it as query_pre_attn_scalar).
  int64_t gemma_27b_blocks = 0;
  // The rotary part may be smaller than the head: rope.dimension_count is HF's partial_rotary_factor.
  bool partial_rotary = false;
  Moe moe = Moe::kNone;
};
constexpr ArchSpec kArchs[] = {
    {"llama", "LlamaForCausalLM", "llama", true, true, true, Layout::kLlama, 0, false, Moe::kMixtral},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", false, false,
     false},  // q/k/v biases always (Qwen2Config has no key)
    {"qwen3", "Qwen3ForCausalLM", "qwen3", false, true, false},
    {"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe", false, true, false, Layout::kLlama, 0, false,
     Moe::kQwen3},
    {"gemma2", "Gemma2ForCausalLM", "gemma2", false, true, false, Layout::kGemma, 46},
    {"gemma3", "Gemma3ForCausalLM", "gemma3_text", false, true, false, Layout::kGemma, 62},
    {"phi3", "Phi3ForCausalLM", "phi3", false, false, false, Layout::kPhi3, 0, true},
    // GLM-4's rotary pairs are interleaved in HF's rows as in llama.cpp's normal rope: stored unpermuted.
    {"glm4", "Glm4ForCausalLM", "glm4", false, true, false, Layout::kGlm4, 0, true},
    {"gpt-oss", "GptOssForCausalLM", "gpt_oss", false, true, false, Layout::kGptOss, 0, false, Moe::kGptOss},
    // SmolLM3: llama's tensors (q/k permuted); llama.cpp skips the rope in every fourth layer and writes no
    // key for it, which is SmolLM3Config's default no_rope_layer_interval, so the derived config leaves it
    // out.
    {"smollm3", "SmolLM3ForCausalLM", "smollm3", true, true, true},
    {"olmo2", "Olmo2ForCausalLM", "olmo2", false, true, false, Layout::kOlmo2},
    // Qwen3.5 (dense, text): Qwen35GgufSource gives the norms and A_log back as HF stores them.
    {"qwen35", "Qwen3_5ForCausalLM", "qwen3_5_text", false, true, false, Layout::kQwen35, 0, true},
    {"qwen35moe", "Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", false, true, false, Layout::kQwen35, 0, true,
     Moe::kQwen35},
    // Qwen3-Next: Qwen3.5-MoE's blocks with the mixer's in_proj_qkvz split into attn_qkv / attn_gate and
    // in_proj_ba kept whole (ssm_ba), the value heads in Transformers' grouped order.
    {"qwen3next", "Qwen3NextForCausalLM", "qwen3_next", false, true, false, Layout::kQwen35, 0, true,
     Moe::kQwen35},
};
const char* const kSupportedArchs =
    "llama (with experts: Mixtral), qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3, glm4, gpt-oss, smollm3, "
    "olmo2 (OLMo 2), qwen35 (Qwen3.5), qwen35moe (Qwen3.5-MoE), qwen3next (Qwen3-Next)";

const ArchSpec* find_arch(const std::string& name) {
  for (const ArchSpec& a : kArchs)
    if (name == a.gguf) return &a;
  return nullptr;
}

// Slice `index` of `slices` equal slices (along the outermost dimension) of a GGUF tensor.
struct Piece {
  std::string gguf_name;
  int64_t slices = 1, index = 0;
};

struct Mapping {
  std::string gguf_name;
  int64_t permute_heads = 0;  // > 0: un-permute rows for this many heads (q: n_head, k: n_head_kv)
  std::vector<Piece> pieces;  // non-empty: the HF tensor is these, concatenated (gguf_name unused)
};

// "blk.<N>.<part>.weight" -> {N, part}; N at most 6 digits, as hf_name_for reads it.
std::optional<std::pair<int64_t, std::string>> block_weight(const std::string& g) {
  const std::string suffix = ".weight";
  if (g.rfind("blk.", 0) != 0 || g.size() <= suffix.size() ||
      g.compare(g.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  const size_t d2 = g.find('.', 4);
  if (d2 == std::string::npos || d2 == 4 || d2 - 4 > 6) return std::nullopt;
  int64_t n = 0;
  for (size_t i = 4; i < d2; ++i) {
    if (g[i] < '0' || g[i] > '9') return std::nullopt;
    n = n * 10 + (g[i] - '0');
  }
  if (d2 + 1 >= g.size() - suffix.size()) return std::nullopt;
  return std::make_pair(n, g.substr(d2 + 1, g.size() - suffix.size() - d2 - 1));
}

// The tensors of a block's experts as llama.cpp names them (see GgufSource::map_experts).
enum ExpertPart { kRouter, kGateExps, kUpExps, kDownExps, kGateUpExps, kNumExpertParts };
constexpr const char* kExpertPartNames[] = {"ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
                                            "ffn_gate_up_exps"};
// llama.cpp's converter before April 2024 wrote Mixtral one tensor per expert: blk.N.ffn_gate.E.weight,
// ffn_up.E, ffn_down.E (the order of the stacked 3-D tensors' first index).
constexpr const char* kPerExpertNames[] = {"ffn_gate", "ffn_up", "ffn_down"};

// "ffn_up.3" -> {1, 3} (kind: gate, up, down); nullopt for any other part. E at most 6 digits.
std::optional<std::pair<int, int64_t>> per_expert_part(const std::string& part) {
  for (int k = 0; k < 3; ++k) {
    const std::string prefix = std::string(kPerExpertNames[k]) + ".";
    if (part.rfind(prefix, 0) != 0 || part.size() == prefix.size() || part.size() - prefix.size() > 6)
      continue;
    int64_t e = 0;
    for (size_t i = prefix.size(); i < part.size(); ++i) {
      if (part[i] < '0' || part[i] > '9') return std::nullopt;
      e = e * 10 + (part[i] - '0');
    }
    return std::make_pair(k, e);
  }
  return std::nullopt;
}

// "blk.12.attn_q.weight" -> "model.layers.12.self_attn.q_proj.weight"; "" when there is no HF name.
std::string hf_name_for(const std::string& g, Layout layout) {
  // Qwen3.5's blk.N.ssm_a (-exp(A_log), as llama.cpp's converter stores it) has no suffix, like HF's A_log.
  const bool no_suffix = layout == Layout::kQwen35 && ends_with(g, ".ssm_a");
  const size_t dot = no_suffix ? g.size() : g.rfind('.');
  if (dot == std::string::npos) return "";
  const std::string base = g.substr(0, dot), suffix = g.substr(dot);  // ".weight" / ".bias" / ""
  if (suffix != ".weight" && suffix != ".bias" && !no_suffix) return "";
  if (base == "token_embd") return "model.embed_tokens" + suffix;
  if (base == "output_norm") return "model.norm" + suffix;
  if (base == "output") return "lm_head" + suffix;
  if (base.rfind("blk.", 0) != 0) return "";
  const size_t d2 = base.find('.', 4);
  if (d2 == std::string::npos || d2 == 4 || d2 - 4 > 6) return "";
  const std::string layer = base.substr(4, d2 - 4);
  if (!std::all_of(layer.begin(), layer.end(), [](char c) { return c >= '0' && c <= '9'; })) return "";
  using Parts = std::vector<std::pair<const char*, const char*>>;
  static const Parts kShared = {
      {"attn_norm", "input_layernorm"},    {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},      {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"}, {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"}, {"ffn_gate", "mlp.gate_proj"},
      {"ffn_down", "mlp.down_proj"},
  };
  static const Parts kLlama = {{"ffn_norm", "post_attention_layernorm"}, {"ffn_up", "mlp.up_proj"}};
  static const Parts kGemma = {{"post_attention_norm", "post_attention_layernorm"},
                               {"ffn_norm", "pre_feedforward_layernorm"},
                               {"post_ffw_norm", "post_feedforward_layernorm"},
                               {"ffn_up", "mlp.up_proj"}};
  static const Parts kPhi3 = {{"ffn_norm", "post_attention_layernorm"},
                              {"attn_qkv", "self_attn.qkv_proj"},
                              {"ffn_up", "mlp.gate_up_proj"}};
  static const Parts kGptOss = {{"post_attention_norm", "post_attention_layernorm"}};
  static const Parts kOlmo2 = {{"post_attention_norm", "post_attention_layernorm"},
                               {"post_ffw_norm", "post_feedforward_layernorm"},
                               {"ffn_up", "mlp.up_proj"}};
  static const Parts kQwen35 = {{"post_attention_norm", "post_attention_layernorm"},
                                {"ffn_up", "mlp.up_proj"},
                                {"attn_qkv", "linear_attn.in_proj_qkv"},
                                {"attn_gate", "linear_attn.in_proj_z"},
                                {"ssm_beta", "linear_attn.in_proj_b"},
                                {"ssm_alpha", "linear_attn.in_proj_a"},
                                {"ssm_ba", "linear_attn.in_proj_ba"},
                                {"ssm_conv1d", "linear_attn.conv1d"},
                                {"ssm_norm", "linear_attn.norm"},
                                {"ssm_out", "linear_attn.out_proj"},
                                {"ffn_gate_shexp", "mlp.shared_expert.gate_proj"},
                                {"ffn_up_shexp", "mlp.shared_expert.up_proj"},
                                {"ffn_down_shexp", "mlp.shared_expert.down_proj"},
                                {"ffn_gate_inp_shexp", "mlp.shared_expert_gate"},
                                {"ssm_a", "linear_attn.A_log"}};
  static const Parts kGlm4 = {{"post_attention_norm", "post_self_attn_layernorm"},
                              {"ffn_norm", "post_attention_layernorm"},
                              {"post_ffw_norm", "post_mlp_layernorm"},
                              {"ffn_up", "mlp.gate_up_proj"}};
  const std::string part = base.substr(d2 + 1);
  // Qwen3.5's per-head decay parameters: HF names them without a suffix.
  if (layout == Layout::kQwen35 && part == "ssm_dt" && suffix == ".bias")
    return "model.layers." + layer + ".linear_attn.dt_bias";
  // gpt-oss's attention sinks: one logit per head, a parameter HF names without a suffix.
  if (layout == Layout::kGptOss && part == "attn_sinks" && suffix == ".weight")
    return "model.layers." + layer + ".self_attn.sinks";
  const Parts& own = layout == Layout::kGemma    ? kGemma
                     : layout == Layout::kPhi3   ? kPhi3
                     : layout == Layout::kGlm4   ? kGlm4
                     : layout == Layout::kGptOss ? kGptOss
                     : layout == Layout::kOlmo2  ? kOlmo2
                     : layout == Layout::kQwen35 ? kQwen35
                                                 : kLlama;
  for (const Parts* parts : {&kShared, &own})
    for (const auto& [from, to] : *parts)
      if (part == from) return "model.layers." + layer + "." + to + suffix;
  return "";
}

// The converter stores row (h, i, j) of each head, i < head_dim/2, j < 2, from
// HF row (h, j, i): the two rotary halves are interleaved. This undoes it.
// t: [rows, cols...] with rows = heads * head_dim.
void unpermute_rows(Tensor& t, int64_t heads) {
  const int64_t rows = t.shape[0];
  if (rows == 0 || t.numel() == 0) return;
  const int64_t half = rows / heads / 2;
  const size_t row_bytes = t.nbytes() / static_cast<size_t>(rows);
  Tensor out = Tensor::empty(t.dtype, t.shape);  // same [rows, cols...]
  const auto* src = static_cast<const uint8_t*>(t.data);
  auto* dst = static_cast<uint8_t*>(out.data);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < half; ++i) {
        const int64_t hf_row = (h * 2 + j) * half + i, gguf_row = (h * half + i) * 2 + j;
        std::memcpy(dst + hf_row * row_bytes, src + gguf_row * row_bytes, row_bytes);
      }
  t = std::move(out);
}

class GgufSource : public WeightSource {
 public:
  explicit GgufSource(std::shared_ptr<GgufFile> g) : g_(std::move(g)), origin_(g_->path()) {
    const std::string& path = origin_;
    const auto arch = g_->get_string("general.architecture");
    if (!arch) fail(path, ": GGUF metadata has no general.architecture");
    arch_ = find_arch(*arch);
    if (!arch_)
      fail(path, ": GGUF architecture '", printable(*arch),
           "' is not supported (supported: ", kSupportedArchs, ")");
    n_head_ = require_int(key("attention.head_count"));
    n_head_kv_ = g_->get_int(key("attention.head_count_kv")).value_or(n_head_);
    read_layer_count();
    if (n_head_ <= 0 || n_head_kv_ <= 0 || n_head_ > (1 << 20) || n_head_ % n_head_kv_ != 0)
      fail(path, ": ", key("attention.head_count"), " ", n_head_, " / ", key("attention.head_count_kv"), " ",
           n_head_kv_, " are inconsistent (both must be positive and the first a multiple of the second)");
    read_experts();
    map_tensors();
    build_config();
  }

  const std::vector<TensorMeta>& tensors() const override { return metas_; }
  const TensorMeta* find(const std::string& name) const override { return find_sorted(metas_, name); }
  Tensor load(const std::string& name, DType dtype) const override {
    auto it = map_.find(name);
    if (it == map_.end()) fail(origin_, ": checkpoint has no tensor named '", printable(name), "'");
    if (!it->second.pieces.empty()) return assemble(name, it->second.pieces, dtype);
    Tensor t = g_->load_tensor(it->second.gguf_name, dtype);
    if (it->second.permute_heads > 0) unpermute_rows(t, it->second.permute_heads);
    // The shape registered for the HF name (map_tensors: a squeezed dimension put back; the same bytes).
    if (const TensorMeta* m = find(name); m && m->shape != t.shape && shape_numel(m->shape) == t.numel())
      t.shape = m->shape;
    return t;
  }
  const std::string& config_json() const override { return config_; }
  const std::string& generation_config_json() const override { return generation_config_; }
  const std::string& origin() const override { return origin_; }
  const std::vector<std::string>& unmapped_tensors() const override { return unmapped_; }
  std::shared_ptr<const GgufFile> gguf() const override { return g_; }

 private:
  // config.json's class: a llama GGUF with experts is Mixtral.
  const char* hf_class() const {
    return moe_ && arch_->moe == Moe::kMixtral ? "MixtralForCausalLM" : arch_->hf_class;
  }
  // The metadata key `name` under this architecture's prefix ("qwen3.block_count").
  std::string key(const char* name) const { return std::string(arch_->gguf) + "." + name; }
  int64_t require_int(const std::string& key) const {
    auto v = g_->get_int(key);
    if (!v) fail(origin_, ": GGUF metadata key '", key, "' is missing");
    return *v;
  }
  // Float metadata for config.json: passed through as stored (range checks belong to the config reader,
  // which sees the same value a config.json would carry), except non-finite values, which JSON cannot hold
  // (nlohmann would write null and the reader would take its default instead).
  std::optional<double> finite_float(const std::string& key) const {
    auto v = g_->get_float(key);
    if (v && !std::isfinite(*v))
      fail(origin_, ": GGUF metadata key '", key, "' is ", *v, ", not a finite number");
    return v;
  }
  double require_float(const std::string& key) const {
    auto v = finite_float(key);
    if (!v) fail(origin_, ": GGUF metadata key '", key, "' is missing");
    return *v;
  }

  // The decoder's layers: block_count, less the multi-token-prediction blocks llama.cpp's converter appends
  // to Qwen3.5 / Qwen3-Next files (nextn_predict_layers: blk.<layers>.* on), which Transformers never reads
  // (its mtp.* tensors); theirs are left unread here too.
  void read_layer_count() {
    const int64_t blocks = require_int(key("block_count"));
    layers_ = blocks;
    if (arch_->layout != Layout::kQwen35) return;
    if (auto n = g_->get_int(key("nextn_predict_layers")); n && *n > 0) {
      if (*n >= blocks)
        fail(origin_, ": ", key("nextn_predict_layers"), " is ", *n, " of ", blocks, " blocks (",
             key("block_count"), "); the model needs at least one decoder block");
      layers_ = blocks - *n;
    }
  }
  // A tensor of a multi-token-prediction block (read_layer_count).
  bool in_nextn_block(const std::string& name) const {
    const auto bw = block_weight(name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0
                                     ? name.substr(0, name.size() - 5) + ".weight"
                                     : name);
    if (bw) return bw->first >= layers_;
    // blk.N.ssm_a has no suffix
    if (name.rfind("blk.", 0) != 0) return false;
    int64_t n = 0;
    size_t i = 4;
    for (; i < name.size() && i < 14 && name[i] >= '0' && name[i] <= '9'; ++i) n = n * 10 + (name[i] - '0');
    return i > 4 && i < name.size() && name[i] == '.' && n >= layers_;
  }

  void map_tensors() {
    for (const GgufTensorInfo& t : g_->tensors()) {
      if (in_nextn_block(t.name)) continue;  // multi-token prediction, never read
      if (arch_->layout == Layout::kPhi3) {
        check_phi3_tensor(t.name);
        if (t.name.rfind("rope_factors_", 0) == 0) continue;  // the config's longrope (add_phi3_longrope)
      }
      if (arch_->layout == Layout::kGlm4) check_glm4_tensor(t.name);
      if (moe_ && collect_expert_tensor(t)) continue;
      const std::string hf = hf_name_for(t.name, arch_->layout);
      if (hf.empty()) {
        unmapped_.push_back(t.name);
        continue;
      }
      Mapping m{t.name, 0, {}};
      if (arch_->permuted_qk && t.name.find(".attn_q.") != std::string::npos) m.permute_heads = n_head_;
      if (arch_->permuted_qk && t.name.find(".attn_k.") != std::string::npos) m.permute_heads = n_head_kv_;
      if (m.permute_heads > 0 && t.shape[0] % (2 * m.permute_heads) != 0)
        fail(origin_, ": tensor '", printable(t.name), "' has ", t.shape[0], " rows, not a multiple of 2 x ",
             m.permute_heads, " heads");
      Shape shape = t.shape;
      // Qwen3.5's convolution: the converter squeezes HF's [C, 1, K] to [C, K] (the same bytes).
      if (arch_->layout == Layout::kQwen35 && t.name.find(".ssm_conv1d.") != std::string::npos &&
          shape.size() == 2)
        shape = {shape[0], 1, shape[1]};
      // The shared expert's gate, HF's [1, H]: the converter writes [1, H], llama-quantize squeezes it to
      // [H].
      if (arch_->layout == Layout::kQwen35 && t.name.find(".ffn_gate_inp_shexp.") != std::string::npos &&
          shape.size() == 1)
        shape = {1, shape[0]};
      add_tensor(hf, std::move(m), shape, t.type_name);
    }
    if (moe_) map_experts();
    std::sort(metas_.begin(), metas_.end(), [](auto& a, auto& b) { return a.name < b.name; });
  }

  void add_tensor(const std::string& hf, Mapping m, const Shape& shape, const std::string& type_name) {
    if (!map_.emplace(hf, std::move(m)).second) fail(origin_, ": two tensors map to '", hf, "'");
    metas_.push_back(TensorMeta{hf, shape, type_name, origin_});
  }

  // ---- Mixtures of experts ----
  //
  // llama.cpp stores a block's experts as 3-D tensors, GGUF dims reversed to [E, rows, cols] here:
  //   blk.N.ffn_gate_inp.weight   [E, H]     the router           -> model.layers.N.mlp.gate.weight
  //   blk.N.ffn_gate_exps.weight  [E, I, H]  each expert's gate   |
  //   blk.N.ffn_up_exps.weight    [E, I, H]  each expert's up     -> model.layers.N.mlp.experts.gate_up_proj
  //                                                                  [E, 2I, H], assembled at load: per
  //                                                                  expert its I gate rows, then its I up
  //                                                                  rows
  //   blk.N.ffn_down_exps.weight  [E, H, I]  each expert's down   -> model.layers.N.mlp.experts.down_proj
  //                                                                  (as stored: zero-copy)
  // The converter's --fuse-gate-up-exps writes blk.N.ffn_gate_up_exps [E, 2I, H], already HF's layout: read
  // as stored (llama.cpp's own qwen3moe and llama loaders do not read it, its newer architectures do).
  // llama.cpp's Mixtral files from before April 2024 hold one 2-D tensor per expert (blk.N.ffn_gate.E /
  // ffn_up.E / ffn_down.E); they are stacked the same way at load (llama only). Shared experts (*_shexp),
  // qwen2moe and the other MoE architectures are refused.

  // llama.cpp's metadata for the experts, checked and refused where it says what these models do not do.
  void read_experts() {
    if (arch_->moe == Moe::kNone) return;
    const std::string count_key = key("expert_count");
    const auto count = g_->get_int(count_key);
    const GgufTensorInfo* expert_tensor = nullptr;
    for (const GgufTensorInfo& t : g_->tensors())
      if (auto bw = block_weight(t.name); bw && bw->first < layers_) {
        const std::string& part = bw->second;
        if (part.find("_exps") != std::string::npos || part == kExpertPartNames[kRouter] ||
            part.find("shexp") != std::string::npos || per_expert_part(part)) {
          expert_tensor = &t;
          break;
        }
      }
    // llama: llama.cpp builds experts when expert_count > 0 and a dense MLP otherwise.
    if (arch_->moe == Moe::kMixtral && count.value_or(0) == 0 && !expert_tensor) return;
    if (!count)
      fail(origin_, ": GGUF metadata key '", count_key, "' is missing",
           expert_tensor ? " (the file has expert tensors, e.g. '" + printable(expert_tensor->name) + "')"
                         : "");
    if (*count <= 0 || *count > (1 << 16))
      fail(origin_, ": ", count_key, " is ", *count, ", expected 1 to 65536 experts");
    moe_ = true;
    n_expert_ = *count;
    const std::string used_key = key("expert_used_count");
    n_expert_used_ = require_int(used_key);
    if (n_expert_used_ <= 0 || n_expert_used_ > n_expert_)
      fail(origin_, ": ", used_key, " is ", n_expert_used_, ", expected 1 to ", count_key, " (", n_expert_,
           ")");
    if (arch_->moe == Moe::kQwen35) {  // no dense MLP: the experts' and the shared expert's sizes only
      n_ff_exp_ = require_int(key("expert_feed_forward_length"));
      n_ff_shexp_ = require_int(key("expert_shared_feed_forward_length"));
      for (const auto& [k, v] : {std::pair{"expert_feed_forward_length", n_ff_exp_},
                                 std::pair{"expert_shared_feed_forward_length", n_ff_shexp_}})
        if (v <= 0 || v > (1 << 20)) fail(origin_, ": ", key(k), " is ", v, ", expected a positive size");
      if (auto v = g_->get_int(key("expert_shared_count")); v && *v != 1)
        fail(origin_, ": ", key("expert_shared_count"), " is ", *v,
             ": Qwen3_5MoeForCausalLM has one shared expert per block");
    } else {
      read_expert_width();
    }
    check_routing();
  }

  // n_ff_exp_, and the refusal of shared experts, for the architectures without them.
  void read_expert_width() {
    const int64_t ffn = require_int(key("feed_forward_length"));
    if (arch_->moe == Moe::kQwen3 || arch_->moe == Moe::kGptOss) {
      // llama.cpp: expert_feed_forward_length, or without it feed_forward_length / expert_used_count
      // (qwen3moe) or feed_forward_length (gpt-oss, whose converter writes both, equal).
      n_ff_exp_ = g_->get_int(key("expert_feed_forward_length"))
                      .value_or(arch_->moe == Moe::kGptOss ? ffn : ffn / n_expert_used_);
      if (n_ff_exp_ <= 0 || n_ff_exp_ > (1 << 20))
        fail(origin_, ": ", key("expert_feed_forward_length"), " is ", n_ff_exp_,
             ", expected a positive size");
    } else {
      n_ff_exp_ = ffn;  // llama.cpp's llama: the experts are feed_forward_length wide
    }
    // Shared experts (Qwen2-MoE's, Granite-MoE's), which llama.cpp does not do for these architectures.
    for (const char* k : {"expert_shared_count", "expert_shared_feed_forward_length"})
      if (auto v = g_->get_int(key(k)); v && *v != 0)
        fail(origin_, ": ", key(k), " is ", *v, ": shared experts are not supported (", arch_->gguf,
             " GGUFs as llama.cpp writes them have none)");
  }

  // Routing llama.cpp does not do for these architectures.
  void check_routing() const {
    if (auto v = g_->get_int(key("expert_group_count")); v && *v > 1)
      fail(origin_, ": ", key("expert_group_count"), " is ", *v, ": grouped expert routing is not supported");
    // llama.cpp's qwen3moe and llama graphs route with a softmax and renormalise the kept weights, unscaled,
    // whatever these say (their loaders do not read them and their converter does not write them); a file
    // that says otherwise is refused rather than run against its own metadata.
    // gpt-oss: a softmax over the top-k logits (llama.cpp's SOFTMAX_WEIGHT, 3, set by its graph).
    const int64_t gating = arch_->moe == Moe::kGptOss ? 3 : 1;
    if (auto v = g_->get_int(key("expert_gating_func")); v && *v != gating)
      fail(origin_, ": ", key("expert_gating_func"), " is ", *v, ", expected ", gating, " (",
           gating == 3 ? "a softmax over the top-k logits" : "a softmax", ", as llama.cpp's ", arch_->gguf,
           " graph routes)");
    if (auto v = g_->get_bool(key("expert_weights_norm")); v && !*v && arch_->moe != Moe::kGptOss)
      fail(origin_, ": ", key("expert_weights_norm"),
           " is false: llama.cpp renormalises the top-k weights of ", arch_->gguf, " regardless");
    if (auto v = finite_float(key("expert_weights_scale")); v && *v != 0.0 && *v != 1.0)
      fail(origin_, ": ", key("expert_weights_scale"), " is ", *v,
           ": scaled expert weights are not supported");
  }

  struct ExpertBlock {
    const GgufTensorInfo* parts[kNumExpertParts] = {};
    const GgufTensorInfo* biases[kNumExpertParts] = {};      // gpt-oss: blk.N.<part>.bias
    std::map<int64_t, const GgufTensorInfo*> per_expert[3];  // gate, up, down: one tensor per expert
  };

  // Takes a block's expert tensor (and notes the dense MLP blocks); false for any other tensor.
  bool collect_expert_tensor(const GgufTensorInfo& t) {
    if (arch_->moe == Moe::kGptOss && t.name.size() > 5 && t.name.compare(t.name.size() - 5, 5, ".bias") == 0)
      if (const auto bw = block_weight(t.name.substr(0, t.name.size() - 5) + ".weight"))
        for (int p = 0; p < kNumExpertParts; ++p)
          if (bw->second == kExpertPartNames[p]) {
            expert_blocks_[bw->first].biases[p] = &t;
            return true;
          }
    const auto bw = block_weight(t.name);
    if (!bw) {
      if (t.name.find("shexp") != std::string::npos)
        fail(origin_, ": tensor '", printable(t.name), "': shared experts are not supported");
      return false;
    }
    const auto& [block, part] = *bw;
    if (part.find("shexp") != std::string::npos && arch_->moe == Moe::kQwen35) return false;  // by name
    if (part.find("shexp") != std::string::npos)
      fail(origin_, ": tensor '", printable(t.name), "': shared experts are not supported (", hf_class(),
           " has none)");
    for (int p = 0; p < kNumExpertParts; ++p)
      if (part == kExpertPartNames[p]) {
        expert_blocks_[block].parts[p] = &t;
        return true;
      }
    if (arch_->moe == Moe::kMixtral)
      if (auto pe = per_expert_part(part)) {
        expert_blocks_[block].per_expert[pe->first][pe->second] = &t;
        return true;
      }
    if (part == "ffn_gate" || part == "ffn_up" || part == "ffn_down") dense_blocks_.insert(block);
    return false;
  }

  // Every block's experts checked against the metadata and each other, and mapped to HF's fused layout.
  void map_experts() {
    const int64_t E = n_expert_, I = n_ff_exp_, H = require_int(key("embedding_length"));
    const std::string count_key = key("expert_count");
    const std::string ffn_key = (arch_->moe == Moe::kQwen3 && g_->has(key("expert_feed_forward_length"))) ||
                                        arch_->moe == Moe::kQwen35
                                    ? key("expert_feed_forward_length")
                                : arch_->moe == Moe::kQwen3
                                    ? key("feed_forward_length") + " / " + key("expert_used_count")
                                    : key("feed_forward_length");
    const std::string sizes = " (" + count_key + " " + std::to_string(E) + ", " + ffn_key + " " +
                              std::to_string(I) + ", " + key("embedding_length") + " " + std::to_string(H) +
                              ")";
    auto name = [](int64_t b, const char* part) {
      return "blk." + std::to_string(b) + "." + part + ".weight";
    };
    auto expect_shape = [&](const GgufTensorInfo& t, const Shape& want) {
      if (t.shape != want)
        fail(origin_, ": tensor '", printable(t.name), "' is ", shape_str(t.shape), ", expected ",
             shape_str(want), sizes);
    };
    std::set<int64_t> blocks;  // every decoder block some tensor names
    for (const GgufTensorInfo& t : g_->tensors())
      if (auto bw = block_weight(t.name); bw && bw->first < layers_) blocks.insert(bw->first);
    for (const auto& [b, eb] : expert_blocks_) blocks.insert(b);
    for (const int64_t b : blocks) {
      const auto it = expert_blocks_.find(b);
      const bool dense = dense_blocks_.count(b) > 0;
      if (it == expert_blocks_.end()) {
        // llama.cpp's llama reads experts in every block once expert_count > 0; Qwen3-MoE's dense blocks are
        // its mlp_only_layers (llama.cpp's own qwen3moe has none).
        if (arch_->moe == Moe::kMixtral || !dense)
          fail(origin_, ": missing tensor '", name(b, "ffn_gate_inp"), "' (", count_key, " is ", E,
               arch_->moe == Moe::kMixtral
                   ? ": every block of a llama GGUF with experts has them)"
                   : "; the block has neither experts nor a dense ffn_up/ffn_gate/ffn_down)");
        dense_layers_.push_back(b);
        continue;
      }
      const ExpertBlock& eb = it->second;
      if (dense)
        fail(origin_, ": block ", b, " has both experts and a dense MLP (blk.", b,
             ".ffn_gate/ffn_up/ffn_down.weight); a block has one or the other");
      const GgufTensorInfo* const* p = eb.parts;
      if (!p[kRouter])
        fail(origin_, ": missing tensor '", name(b, "ffn_gate_inp"), "' (the router of block ", b, ")");
      if (p[kRouter]->shape.size() == 2 && p[kRouter]->shape[1] == H && p[kRouter]->shape[0] != E)
        fail(origin_, ": ", count_key, " is ", E, " but tensor '", printable(p[kRouter]->name), "' is ",
             shape_str(p[kRouter]->shape), " (", p[kRouter]->shape[0], " experts)");
      expect_shape(*p[kRouter], {E, H});
      const std::string prefix = "model.layers." + std::to_string(b) + ".mlp.";
      const bool oss = arch_->moe == Moe::kGptOss;
      add_tensor(prefix + (oss ? "router.weight" : "gate.weight"), Mapping{p[kRouter]->name, 0, {}},
                 p[kRouter]->shape, p[kRouter]->type_name);
      if (oss) map_gpt_oss_biases(b, eb, prefix, E, I, H);
      const bool stacked = p[kGateExps] || p[kUpExps] || p[kDownExps] || p[kGateUpExps];
      const bool per_expert =
          !eb.per_expert[0].empty() || !eb.per_expert[1].empty() || !eb.per_expert[2].empty();
      if (stacked && per_expert)
        fail(origin_, ": block ", b, " has both stacked expert tensors (blk.", b,
             ".ffn_*_exps.weight) and one tensor per expert (blk.", b, ".ffn_*.E.weight)");
      if (per_expert) {
        map_per_expert(b, eb, prefix, expect_shape, name);
        continue;
      }
      for (const int part :
           {kDownExps, p[kGateUpExps] ? kGateUpExps : kGateExps, p[kGateUpExps] ? kGateUpExps : kUpExps})
        if (!p[part])
          fail(origin_, ": missing tensor '", name(b, kExpertPartNames[part]), "' (block ", b,
               " has experts)");
      for (const int part : {kGateExps, kUpExps, kDownExps, kGateUpExps})
        if (p[part] && p[part]->shape.size() == 3 && p[part]->shape[0] != E)
          fail(origin_, ": ", count_key, " is ", E, " but tensor '", printable(p[part]->name), "' is ",
               shape_str(p[part]->shape), " (", p[part]->shape[0], " experts)");
      expect_shape(*p[kDownExps], {E, H, I});
      add_tensor(prefix + "experts.down_proj", Mapping{p[kDownExps]->name, 0, {}}, p[kDownExps]->shape,
                 p[kDownExps]->type_name);
      if (p[kGateUpExps]) {
        for (const int part : {kGateExps, kUpExps})
          if (p[part])
            fail(origin_, ": block ", b, " has both '", name(b, kExpertPartNames[kGateUpExps]), "' and '",
                 printable(p[part]->name), "'");
        expect_shape(*p[kGateUpExps], {E, 2 * I, H});
        add_tensor(prefix + "experts.gate_up_proj", Mapping{p[kGateUpExps]->name, 0, {}},
                   p[kGateUpExps]->shape, p[kGateUpExps]->type_name);
        continue;
      }
      expect_shape(*p[kGateExps], {E, I, H});
      expect_shape(*p[kUpExps], {E, I, H});
      if (p[kGateExps]->type_name != p[kUpExps]->type_name)
        fail(origin_, ": tensors '", printable(p[kGateExps]->name), "' (", p[kGateExps]->type_name, ") and '",
             printable(p[kUpExps]->name), "' (", p[kUpExps]->type_name,
             ") are stored in different types; they are read as one tensor (mlp.experts.gate_up_proj)");
      Mapping gate_up;
      for (int64_t e = 0; e < E; ++e) {
        gate_up.pieces.push_back({p[kGateExps]->name, E, e});
        gate_up.pieces.push_back({p[kUpExps]->name, E, e});
      }
      add_tensor(prefix + "experts.gate_up_proj", std::move(gate_up), {E, 2 * I, H}, p[kGateExps]->type_name);
    }
  }

  // gpt-oss's biases: the router's [E] (mlp.router.bias), the experts' gate and up [E, I] each (read as one
  // mlp.experts.gate_up_proj_bias [E, 2I]: per expert its I gate values, then its I up values, as the
  // weights) and down's [E, H].
  void map_gpt_oss_biases(int64_t b, const ExpertBlock& eb, const std::string& prefix, int64_t E, int64_t I,
                          int64_t H) {
    const auto bias = [&](int part, const Shape& want) -> const GgufTensorInfo& {
      const GgufTensorInfo* t = eb.biases[part];
      const std::string name = "blk." + std::to_string(b) + "." + kExpertPartNames[part] + ".bias";
      if (!t) fail(origin_, ": missing tensor '", name, "' (gpt-oss's router and experts have biases)");
      if (t->shape != want)
        fail(origin_, ": tensor '", name, "' is ", shape_str(t->shape), ", expected ", shape_str(want));
      return *t;
    };
    if (eb.biases[kGateUpExps])
      fail(origin_, ": tensor '", printable(eb.biases[kGateUpExps]->name),
           "': gpt-oss's gate and up biases are read as two tensors (ffn_gate_exps.bias, ffn_up_exps.bias)");
    const GgufTensorInfo& router = bias(kRouter, {E});
    add_tensor(prefix + "router.bias", Mapping{router.name, 0, {}}, router.shape, router.type_name);
    const GgufTensorInfo &gate = bias(kGateExps, {E, I}), &up = bias(kUpExps, {E, I});
    Mapping gate_up;
    for (int64_t e = 0; e < E; ++e) {
      gate_up.pieces.push_back({gate.name, E, e});
      gate_up.pieces.push_back({up.name, E, e});
    }
    add_tensor(prefix + "experts.gate_up_proj_bias", std::move(gate_up), {E, 2 * I}, gate.type_name);
    const GgufTensorInfo& down = bias(kDownExps, {E, H});
    add_tensor(prefix + "experts.down_proj_bias", Mapping{down.name, 0, {}}, down.shape, down.type_name);
  }

  // llama.cpp's Mixtral files from before April 2024: blk.N.ffn_{gate,up,down}.E.weight, one per expert.
  template <class ExpectShape, class Name>
  void map_per_expert(int64_t b, const ExpertBlock& eb, const std::string& prefix,
                      const ExpectShape& expect_shape, const Name& name) {
    const int64_t E = n_expert_, I = n_ff_exp_, H = require_int(key("embedding_length"));
    const Shape want[3] = {{I, H}, {I, H}, {H, I}};
    for (int k = 0; k < 3; ++k) {
      const auto& by_e = eb.per_expert[k];
      for (int64_t e = 0; e < E; ++e)
        if (!by_e.count(e))
          fail(origin_, ": missing tensor '",
               name(b, (std::string(kPerExpertNames[k]) + "." + std::to_string(e)).c_str()), "' (block ", b,
               " stores its ", E, " experts one tensor each)");
      if (by_e.rbegin()->first >= E)
        fail(origin_, ": ", key("expert_count"), " is ", E, " but the file has tensor '",
             printable(by_e.rbegin()->second->name), "'");
      for (const auto& [e, t] : by_e) {
        expect_shape(*t, want[k]);
        const GgufTensorInfo* first = eb.per_expert[k == 1 ? 0 : k].begin()->second;  // up must match gate
        if (t->type_name != first->type_name)
          fail(origin_, ": tensors '", printable(first->name), "' (", first->type_name, ") and '",
               printable(t->name), "' (", t->type_name,
               ") are stored in different types; they are read as one tensor (mlp.experts.",
               k == 2 ? "down_proj" : "gate_up_proj", ")");
      }
    }
    Mapping gate_up, down;
    for (int64_t e = 0; e < E; ++e) {
      gate_up.pieces.push_back({eb.per_expert[0].at(e)->name});
      gate_up.pieces.push_back({eb.per_expert[1].at(e)->name});
      down.pieces.push_back({eb.per_expert[2].at(e)->name});
    }
    add_tensor(prefix + "experts.gate_up_proj", std::move(gate_up), {E, 2 * I, H},
               eb.per_expert[0].begin()->second->type_name);
    add_tensor(prefix + "experts.down_proj", std::move(down), {E, H, I},
               eb.per_expert[2].begin()->second->type_name);
  }

  // The HF tensor made of `pieces` (an expert stack), each GGUF tensor read once as `dtype` (a stacked one
  // kept while its slices are copied; a whole one dropped once copied).
  Tensor assemble(const std::string& name, const std::vector<Piece>& pieces, DType dtype) const {
    const TensorMeta* meta = find(name);
    TS_ASSERT(meta, name);
    Tensor out = Tensor::empty(dtype, meta->shape);
    auto* dst = static_cast<uint8_t*>(out.data);
    std::map<std::string, Tensor> stacked;
    for (const Piece& p : pieces) {
      Tensor whole;
      if (p.slices == 1) whole = g_->load_tensor(p.gguf_name, dtype);
      auto it = stacked.find(p.gguf_name);
      if (p.slices > 1 && it == stacked.end())
        it = stacked.emplace(p.gguf_name, g_->load_tensor(p.gguf_name, dtype)).first;
      const Tensor& t = p.slices == 1 ? whole : it->second;
      TS_ASSERT(t.nbytes() % static_cast<size_t>(p.slices) == 0, p.gguf_name, ": ", t.nbytes(), " bytes in ",
                p.slices, " slices");
      const size_t bytes = t.nbytes() / static_cast<size_t>(p.slices);
      TS_ASSERT(dst + bytes <= static_cast<uint8_t*>(out.data) + out.nbytes(), name, ": pieces overrun ",
                out.nbytes(), " bytes");
      const uint8_t* from = static_cast<const uint8_t*>(t.data) + bytes * static_cast<size_t>(p.index);
      std::memcpy(dst, from, bytes);
      // A view of the mapping (no conversion): its pages are not needed again.
      if (const GgufTensorInfo* info = g_->find_tensor(p.gguf_name);
          info && loads_as_stored(info->type_name, dtype))
        release_pages(from, bytes);
      dst += bytes;
    }
    TS_ASSERT(dst == static_cast<uint8_t*>(out.data) + out.nbytes(), name, ": assembled ",
              dst - static_cast<uint8_t*>(out.data), " bytes of ", out.nbytes());
    return out;
  }

  // Phi-3 as llama.cpp's converter writes it from HF's fused qkv_proj / gate_up_proj. llama.cpp also reads
  // separate q/k/v projections for phi3, which no converted checkpoint has and Phi3ForCausalLM has no names
  // for. The longrope factors of the 128k variants (rope_factors_short / rope_factors_long) become the
  // config's rope_scaling (add_phi3_longrope), not weights.
  void check_phi3_tensor(const std::string& name) const {
    for (const char* part : {".attn_q.", ".attn_k.", ".attn_v.", ".ffn_gate."})
      if (name.find(part) != std::string::npos)
        fail(origin_, ": tensor '", printable(name),
             "': a phi3 GGUF with separate q/k/v or gate projections is not supported (Phi3ForCausalLM "
             "reads the fused blk.N.attn_qkv and blk.N.ffn_up, as llama.cpp's converter writes them)");
    if (name.rfind("rope_factors_", 0) == 0 && name != "rope_factors_short.weight" &&
        name != "rope_factors_long.weight")
      fail(origin_, ": tensor '", printable(name),
           "' is not one of Phi-3's longrope factors (rope_factors_short.weight, rope_factors_long.weight)");
  }

  // Phi-3's longrope (the 128k variants), as llama.cpp's converter writes it: the short and long factors as
  // F32 tensors, the original context in rope.scaling.original_context_length. Its rope.scaling.attn_factor
  // is not read: the converter derives it from the two lengths by the HF config's rope type (a 'yarn'-typed
  // one gets yarn's formula), where Transformers reads every Phi-3 type as longrope and derives its own.
  void add_phi3_longrope(ojson& c) const {
    const bool has_short = g_->find_tensor("rope_factors_short.weight") != nullptr,
               has_long = g_->find_tensor("rope_factors_long.weight") != nullptr;
    if (!has_short && !has_long) return;
    if (!has_short || !has_long)
      fail(origin_, ": tensor '", has_short ? "rope_factors_long.weight" : "rope_factors_short.weight",
           "' is missing (Phi-3's longrope needs both the short and the long factors)");
    auto factors = [&](const char* name) {
      const Tensor t = g_->load_tensor(name, DType::F32);
      const float* p = t.ptr<float>();
      ojson out = ojson::array();
      for (int64_t i = 0; i < t.numel(); ++i) out.push_back(static_cast<double>(p[i]));
      return out;
    };
    ojson r = {{"rope_type", "longrope"},
               {"short_factor", factors("rope_factors_short.weight")},
               {"long_factor", factors("rope_factors_long.weight")}};
    const int64_t orig = require_int(key("rope.scaling.original_context_length"));
    c["rope_scaling"] = r;
    c["original_max_position_embeddings"] = orig;
  }

  // GLM-4 as llama.cpp's converter writes Glm4ForCausalLM: separate q/k/v and the fused ffn_up. llama.cpp
  // also reads a fused attn_qkv and NextN (multi-token prediction) tensors for glm4, which Glm4ForCausalLM
  // has no names for.
  void check_glm4_tensor(const std::string& name) const {
    for (const char* part : {".attn_qkv.", ".ffn_gate.", ".nextn."})
      if (name.find(part) != std::string::npos)
        fail(origin_, ": tensor '", printable(name),
             "': a glm4 GGUF with a fused attn_qkv, a separate ffn_gate or NextN layers is not supported "
             "(Glm4ForCausalLM reads blk.N.attn_q/attn_k/attn_v and the fused blk.N.ffn_up, as llama.cpp's "
             "converter writes them)");
  }

  void build_config() {
    const GgufTensorInfo* embd = g_->find_tensor("token_embd.weight");
    if (!embd || embd->shape.size() != 2) fail(origin_, ": GGUF has no 2-D token_embd.weight tensor");
    ojson c;
    const bool mixtral = moe_ && arch_->moe == Moe::kMixtral;
    c["architectures"] = {hf_class()};
    c["model_type"] = mixtral ? "mixtral" : arch_->model_type;
    c["hidden_size"] = require_int(key("embedding_length"));
    // Qwen3.5-MoE has no dense MLP and no such key; Qwen3-Next's (for mlp_only_layers) is written.
    if (arch_->moe != Moe::kQwen35 || (next() && g_->has(key("feed_forward_length"))))
      c["intermediate_size"] = require_int(key("feed_forward_length"));
    c["num_hidden_layers"] = layers_;
    check_against_tensors(*embd);
    c["num_attention_heads"] = n_head_;
    c["num_key_value_heads"] = n_head_kv_;
    const auto key_length = g_->get_int(key("attention.key_length"));
    if (key_length) c["head_dim"] = *key_length;
    // Glm4Config's head_dim default is 128, llama.cpp's hidden / heads: say which.
    // Qwen3-MoE's too when it is not hidden / heads, so say it for both.
    if (!key_length && (arch_->layout == Layout::kGlm4 || arch_->moe == Moe::kQwen3))
      c["head_dim"] = c["hidden_size"].get<int64_t>() / n_head_;
    check_head_dims(key_length);
    if (arch_->layout == Layout::kGemma)
      c["hidden_activation"] = "gelu_pytorch_tanh";  // llama.cpp's GELU (tanh) for Gemma
    else
      c["hidden_act"] = "silu";
    c["rms_norm_eps"] = require_float(key("attention.layer_norm_rms_epsilon"));
    if (arch_->layout == Layout::kOlmo2 && g_->has(key("attention.sliding_window")))
      fail(origin_, ": ", key("attention.sliding_window"),
           " is set: an OLMo 3 GGUF (sliding layers, a rope per layer type), which is not read yet (its "
           "Transformers checkpoint is: Olmo3ForCausalLM)");
    c["rope_theta"] = finite_float(key("rope.freq_base")).value_or(10000.0);
    add_rope_scaling(c);
    if (arch_->layout == Layout::kPhi3) add_phi3_longrope(c);
    c["max_position_embeddings"] = require_int(key("context_length"));
    const auto n_tokens =
        g_->has("tokenizer.ggml.tokens") ? g_->array_size("tokenizer.ggml.tokens") : std::nullopt;
    c["vocab_size"] = n_tokens ? static_cast<int64_t>(*n_tokens) : embd->shape[0];
    c["tie_word_embeddings"] = g_->find_tensor("output.weight") == nullptr;
    if (mixtral) {
      // MixtralConfig has no bias keys: MixtralForCausalLM has none.
      for (const GgufTensorInfo& t : g_->tensors())
        if (t.name.size() > 5 && t.name.compare(t.name.size() - 5, 5, ".bias") == 0)
          fail(origin_, ": tensor '", printable(t.name), "': MixtralForCausalLM has no biases");
    } else {
      if (arch_->bias_keys) c["attention_bias"] = g_->find_tensor("blk.0.attn_q.bias") != nullptr;
      if (arch_->mlp_bias_key) c["mlp_bias"] = g_->find_tensor("blk.0.ffn_up.bias") != nullptr;
    }
    if (moe_) add_expert_keys(c);
    if (arch_->layout == Layout::kGemma) add_gemma_keys(c, key_length);
    if (arch_->partial_rotary) add_partial_rotary(c, key_length);
    if (arch_->layout == Layout::kPhi3) add_phi3_window(c);
    if (arch_->moe == Moe::kGptOss) add_gpt_oss_keys(c);
    if (arch_->layout == Layout::kQwen35) add_qwen35_keys(c);
    ojson gen;
    for (const char* k : {"bos", "eos", "padding"}) {
      const std::string hf_key = std::string(k == std::string("padding") ? "pad" : k) + "_token_id";
      if (auto id = g_->get_int(std::string("tokenizer.ggml.") + k + "_token_id")) {
        c[hf_key] = *id;
        gen[hf_key] = *id;
      }
    }
    c["torch_dtype"] = embd->type_name == "F16"    ? "float16"
                       : embd->type_name == "BF16" ? "bfloat16"
                                                   : "float32";
    config_ = c.dump();
    if (!gen.empty()) generation_config_ = gen.dump();
  }

  // Metadata the tensors contradict, or that no model can have, is refused here, naming the GGUF key (the
  // config reader would name the config.json field it maps to). Everything else passes through as stored.
  void check_against_tensors(const GgufTensorInfo& embd) const {
    const int64_t hidden = require_int(key("embedding_length"));
    if (hidden != embd.shape[1])
      fail(origin_, ": ", key("embedding_length"), " is ", hidden, " but token_embd.weight is ",
           shape_str(embd.shape), " (hidden size ", embd.shape[1], ")");
    const int64_t blocks = require_int(key("block_count"));
    if (blocks <= 0)
      fail(origin_, ": ", key("block_count"), " is ", blocks, "; a model needs at least one block");
    int64_t max_block = -1;
    for (const GgufTensorInfo& t : g_->tensors()) {
      if (t.name.rfind("blk.", 0) != 0) continue;
      int64_t n = 0;
      size_t i = 4;
      for (; i < t.name.size() && i < 14 && t.name[i] >= '0' && t.name[i] <= '9'; ++i)
        n = n * 10 + (t.name[i] - '0');
      if (i > 4 && i < t.name.size() && t.name[i] == '.') max_block = std::max(max_block, n);
    }
    if (max_block + 1 != blocks)
      fail(origin_, ": ", key("block_count"), " is ", blocks, " but the file holds tensors for ",
           max_block < 0 ? std::string("no blk.N block") : "blocks 0 to " + std::to_string(max_block));
    if (arch_->moe != Moe::kQwen35) check_feed_forward_length();  // Qwen3.5-MoE: no dense MLP, no such key
    const int64_t ctx = require_int(key("context_length"));
    if (ctx <= 0) fail(origin_, ": ", key("context_length"), " is ", ctx, ", expected a positive length");
    if (auto base = finite_float(key("rope.freq_base")); base && *base <= 0)
      fail(origin_, ": ", key("rope.freq_base"), " is ", *base, ", expected a positive rotary base");
    if (const double eps = require_float(key("attention.layer_norm_rms_epsilon")); eps < 0)
      fail(origin_, ": ", key("attention.layer_norm_rms_epsilon"), " is ", eps,
           ", expected a non-negative epsilon");
  }

  void check_feed_forward_length() const {
    const int64_t ffn = require_int(key("feed_forward_length"));
    const bool fused_up = arch_->layout == Layout::kPhi3 || arch_->layout == Layout::kGlm4;
    const int64_t up_rows = fused_up ? 2 * ffn : ffn;  // phi3, glm4: gate and up rows
    // The first dense MLP (block 0 but for a Qwen3-MoE whose first dense block is a later one).
    const std::string up_name =
        "blk." + std::to_string(dense_layers_.empty() ? 0 : dense_layers_.front()) + ".ffn_up.weight";
    if (const GgufTensorInfo* up = g_->find_tensor(up_name);
        up && up->shape.size() == 2 && up->shape[0] != up_rows)
      fail(origin_, ": ", key("feed_forward_length"), " is ", ffn, " but ", up_name, " is ",
           shape_str(up->shape));
    if (ffn <= 0) fail(origin_, ": ", key("feed_forward_length"), " is ", ffn, ", expected a positive size");
  }

  // The experts' config keys. Qwen3-MoE: norm_topk_prob is true whatever the checkpoint's config said:
  // llama.cpp's qwen3moe graph renormalises the top-k weights unconditionally (build_moe_ffn with norm_w =
  // true in src/models/qwen3moe.cpp) and its converter writes no key for norm_topk_prob, so this is how every
  // qwen3moe GGUF runs in llama.cpp (true in Qwen3-30B-A3B's and Qwen3-235B-A22B's configs). A block is
  // sparse when it has experts: decoder_sparse_step 1 and the others listed in mlp_only_layers. Mixtral:
  // experts in every block, each of intermediate_size, renormalised (MixtralForCausalLM always does).
  void add_expert_keys(ojson& c) const {
    if (arch_->moe == Moe::kGptOss) {  // GptOssConfig: intermediate_size is each expert's
      c["num_local_experts"] = n_expert_;
      c["num_experts_per_tok"] = n_expert_used_;
      c["intermediate_size"] = n_ff_exp_;
      return;
    }
    if (arch_->moe == Moe::kMixtral) {
      c["num_local_experts"] = n_expert_;
      c["num_experts_per_tok"] = n_expert_used_;
      return;
    }
    if (arch_->moe == Moe::kQwen35) {  // every layer sparse, renormalised (Qwen3_5MoeTextConfig reads no key)
      if (!dense_layers_.empty())
        fail(origin_, ": block ", dense_layers_.front(), " has a dense MLP; every layer of ", hf_class(),
             " in a ", arch_->gguf, " GGUF is a sparse block");
      c["num_experts"] = n_expert_;
      c["num_experts_per_tok"] = n_expert_used_;
      c["moe_intermediate_size"] = n_ff_exp_;
      c["shared_expert_intermediate_size"] = n_ff_shexp_;
      // Qwen3-Next: llama.cpp's qwen3next graph renormalises the top-k weights (build_moe_ffn with norm_w
      // true) and has no dense blocks, as Qwen3NextConfig's defaults say.
      if (next()) {
        c["norm_topk_prob"] = true;
        c["decoder_sparse_step"] = 1;
        c["mlp_only_layers"] = ojson::array();
      }
      return;
    }
    c["num_experts"] = n_expert_;
    c["num_experts_per_tok"] = n_expert_used_;
    c["moe_intermediate_size"] = n_ff_exp_;
    c["norm_topk_prob"] = true;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = dense_layers_;
  }

  // Hugging Face attention has one head_dim for queries, keys and values, and (but for Phi-3 and GLM-4,
  // whose rotary part is partial_rotary_factor) rotates all of it; llama.cpp has key_length, value_length and
  // rope.dimension_count. Files where they differ are refused, naming the key.
  void check_head_dims(std::optional<int64_t> key_length) const {
    const int64_t head_dim = key_length.value_or(require_int(key("embedding_length")) / n_head_);
    if (auto vl = g_->get_int(key("attention.value_length")); vl && *vl != head_dim)
      fail(origin_, ": ", key("attention.value_length"), " is ", *vl, " but the key length is ", head_dim,
           " (", key_length ? key("attention.key_length") : std::string("embedding_length / head_count"),
           "); different key and value head sizes are not supported");
    // Qwen3 without key_length has Qwen3Config's head_dim (128) in Transformers, so no comparison there.
    if (arch_->partial_rotary || (!key_length && std::string(arch_->gguf) == "qwen3")) return;
    if (auto rot = g_->get_int(key("rope.dimension_count")); rot && *rot != head_dim)
      fail(origin_, ": ", key("rope.dimension_count"), " is ", *rot, " but the head size is ", head_dim,
           "; a rotary part smaller than the head is not supported for ", arch_->gguf);
  }

  // A positive float metadata value, when present.
  std::optional<double> positive_float(const std::string& k) const {
    auto v = finite_float(k);
    if (v && *v <= 0) fail(origin_, ": ", k, " is ", *v, ", expected a positive number");
    return v;
  }
  std::optional<int64_t> positive_int(const std::string& k) const {
    auto v = g_->get_int(k);
    if (v && *v <= 0) fail(origin_, ": ", k, " is ", *v, ", expected a positive size");
    return v;
  }

  // Gemma 2 / Gemma 3 as llama.cpp reads them. The sliding layers follow llama.cpp's fixed patterns, which
  // are Gemma2Config's and Gemma3TextConfig's defaults (every other layer from layer 0; five of every six);
  // Gemma 3's sliding layers use rope base 10000 (rope_local_base_freq's default) unless
  // rope.freq_base_swa says otherwise. attn_logit_softcapping is read for Gemma 2 only (Gemma 3 has none).
  void add_gemma_keys(ojson& c, std::optional<int64_t> key_length) const {
    const bool gemma3 = std::string(arch_->gguf) == "gemma3";
    const int64_t hidden = require_int(key("embedding_length"));
    if (!key_length) c["head_dim"] = hidden / n_head_;  // llama.cpp's default; Gemma's configs say 256
    const int64_t head_dim = c["head_dim"].get<int64_t>();
    c["query_pre_attn_scalar"] =
        require_int(key("block_count")) == arch_->gemma_27b_blocks ? hidden / n_head_ : head_dim;
    // Gemma 2: absent is llama.cpp's and Gemma2Config's 4096; Gemma 3: llama.cpp requires it.
    const auto window = positive_int(key("attention.sliding_window"));
    if (!window && gemma3)
      fail(origin_, ": GGUF metadata key '", key("attention.sliding_window"), "' is missing");
    if (window) c["sliding_window"] = *window;
    if (!gemma3)  // absent: 50, llama.cpp's and Gemma2Config's default
      if (auto cap = positive_float(key("attn_logit_softcapping"))) c["attn_logit_softcapping"] = *cap;
    if (auto cap = positive_float(key("final_logit_softcapping"))) c["final_logit_softcapping"] = *cap;
    if (gemma3)
      if (auto base = positive_float(key("rope.freq_base_swa"))) c["rope_local_base_freq"] = *base;
  }

  // Phi-3 and GLM-4: the rotary part from rope.dimension_count (HF's partial_rotary_factor). Absent,
  // llama.cpp rotates the whole head: Phi3Config's default factor (1), but not Glm4Config's (0.5), so GLM-4
  // always says it.
  void add_partial_rotary(ojson& c, std::optional<int64_t> key_length) const {
    const int64_t head_dim = key_length.value_or(require_int(key("embedding_length")) / n_head_);
    const auto rot = g_->get_int(key("rope.dimension_count"));
    if (rot && *rot != head_dim) {
      const double factor = static_cast<double>(*rot) / static_cast<double>(head_dim);
      if (*rot <= 0 || *rot > head_dim || *rot % 2 != 0 ||
          static_cast<int64_t>(static_cast<double>(head_dim) * factor) != *rot)
        fail(origin_, ": ", key("rope.dimension_count"), " is ", *rot,
             ", which is no rotary part of a head of ", head_dim, " (expected an even size up to it)");
      c["partial_rotary_factor"] = factor;
    } else if (arch_->layout == Layout::kGlm4) {
      c["partial_rotary_factor"] = 1.0;
    }
  }

  // Phi-3: sliding_window 0 meaning none (llama.cpp's converter writes 0 for Phi-4, whose config has null).
  void add_phi3_window(ojson& c) const {
    if (auto w = g_->get_int(key("attention.sliding_window"))) {
      if (*w < 0)
        fail(origin_, ": ", key("attention.sliding_window"), " is ", *w, ", expected 0 (none) or more");
      if (*w > 0) c["sliding_window"] = *w;
    }
  }

  // Only linear scaling has a metadata form; llama3-style scaling is stored as the
  // rope_freqs.weight tensor, which is reported in unmapped_tensors().
  // rope.scaling.*: linear, or yarn (its factor, original_context_length and the beta_fast / beta_slow
  // llama.cpp reads, defaults 32 and 1 as Transformers' too). Transformers' truncate is not in the metadata:
  // gpt-oss's configs say false (GptOssConfig's hub checkpoints), the others take Transformers' default.
  void add_rope_scaling(ojson& c) const {
    const auto type = g_->get_string(key("rope.scaling.type"));
    if (!type || *type == "none") return;
    const auto factor = finite_float(key("rope.scaling.factor"));
    if (*type == "yarn" && factor) {
      ojson r = {{"rope_type", "yarn"}, {"factor", *factor}};
      r["original_max_position_embeddings"] = require_int(key("rope.scaling.original_context_length"));
      if (auto v = finite_float(key("rope.scaling.yarn_beta_fast"))) r["beta_fast"] = *v;
      if (auto v = finite_float(key("rope.scaling.yarn_beta_slow"))) r["beta_slow"] = *v;
      if (auto v = finite_float(key("rope.scaling.attn_factor")); v && *v != 1.0)
        fail(origin_, ": ", key("rope.scaling.attn_factor"), " is ", *v,
             ": a yarn attention factor other than Transformers' own is not supported");
      if (arch_->moe == Moe::kGptOss) r["truncate"] = false;
      c["rope_scaling"] = r;
      return;
    }
    if (*type != "linear" || !factor)
      fail(origin_, ": rope scaling '", printable(*type),
           "' in GGUF metadata is not supported (supported: linear, yarn)");
    c["rope_scaling"] = {{"type", "linear"}, {"factor", *factor}};
  }

  // Qwen3.5's linear attention as llama.cpp's converter writes it: ssm.conv_kernel, ssm.state_size (the key
  // head size), ssm.group_count (key heads), ssm.time_step_rank (value heads), ssm.inner_size (value heads x
  // value head size); the layer types from attention.recurrent_layers, else full_attention_interval. The
  // rope's mrope sections change nothing for text (equal position streams); rope.dimension_count is
  // partial_rotary_factor (add_partial_rotary).
  void add_qwen35_keys(ojson& c) const {
    const int64_t kernel = require_int(key("ssm.conv_kernel")), dk = require_int(key("ssm.state_size"));
    const int64_t hk = require_int(key("ssm.group_count")), hv = require_int(key("ssm.time_step_rank"));
    const int64_t inner = require_int(key("ssm.inner_size"));
    if (hk <= 0 || hv <= 0 || hv % hk != 0 || inner <= 0 || inner % hv != 0)
      fail(origin_, ": ", key("ssm.group_count"), " ", hk, ", ", key("ssm.time_step_rank"), " ", hv, " and ",
           key("ssm.inner_size"), " ", inner,
           " are inconsistent (value heads a multiple of key heads, the inner size of value heads)");
    c["linear_conv_kernel_dim"] = kernel;
    c["linear_key_head_dim"] = dk;
    c["linear_num_key_heads"] = hk;
    c["linear_num_value_heads"] = hv;
    c["linear_value_head_dim"] = inner / hv;
    const int64_t blocks = layers_;
    if (auto rec = g_->get_bool_array(key("attention.recurrent_layers"))) {
      if (static_cast<int64_t>(rec->size()) < blocks)
        fail(origin_, ": ", key("attention.recurrent_layers"), " has ", rec->size(), " entries for ", blocks,
             " blocks");
      ojson types = ojson::array();
      for (int64_t l = 0; l < blocks; ++l)
        types.push_back((*rec)[static_cast<size_t>(l)] ? "linear_attention" : "full_attention");
      c["layer_types"] = types;
    } else {
      c["full_attention_interval"] = require_int(key("full_attention_interval"));
    }
  }

  // gpt-oss: the sliding layers' window (llama.cpp slides the even blocks over it, as GptOssConfig's default
  // layer_types do); its clamped SwiGLU's alpha 1.702 and limit 7 are llama.cpp's constants and
  // GptOssConfig's defaults, so no key is written.
  void add_gpt_oss_keys(ojson& c) const {
    c["sliding_window"] = require_int(key("attention.sliding_window"));
  }

  std::shared_ptr<GgufFile> g_;
  std::string origin_;
  const ArchSpec* arch_ = nullptr;
  int64_t n_head_ = 0, n_head_kv_ = 0;
  int64_t layers_ = 0;  // decoder blocks (read_layer_count)
  bool next() const { return std::string(arch_->gguf) == "qwen3next"; }
  bool moe_ = false;  // read as a mixture of experts (read_experts)
  int64_t n_expert_ = 0, n_expert_used_ = 0, n_ff_exp_ = 0, n_ff_shexp_ = 0;
  std::map<int64_t, ExpertBlock> expert_blocks_;  // block -> its expert tensors
  std::set<int64_t> dense_blocks_;                // blocks with ffn_gate / ffn_up / ffn_down
  std::vector<int64_t> dense_layers_;             // of a MoE file: the blocks without experts, ascending
  std::map<std::string, Mapping> map_;            // HF name -> GGUF tensor
  std::vector<TensorMeta> metas_;                 // sorted by HF name
  std::vector<std::string> unmapped_;
  std::string config_, generation_config_;
};

// Gemma: llama.cpp's converter stores every RMSNorm weight as 1 + weight (llama.cpp scales by it as is),
// where HF stores the weight and its Gemma models add 1. The norms are given back as HF stores them (the
// stored value minus 1, in float32, as Transformers' GGUF loader does), so the Gemma models add 1 once
// whatever the checkpoint's format; (v - 1) + 1 is v again in float32 for any v in [0.5, 2].
// A copy of float tensor `t` (tensor `name` of `origin`) with `f` applied to every value in float32.
template <class F>
Tensor map_floats(const Tensor& t, const std::string& origin, const std::string& name, F f) {
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    fail(origin, ": tensor '", printable(name), "' loads as ", dtype_name(t.dtype),
         "; it must be a float type");
  std::vector<float> v(static_cast<size_t>(t.numel()));
  convert(t.data, t.dtype, v.data(), DType::F32, t.numel());
  for (float& x : v) x = f(x);
  Tensor out = Tensor::empty(t.dtype, t.shape);  // t may be a read-only view of the mapping
  convert(v.data(), DType::F32, out.data, out.dtype, out.numel());
  return out;
}

class GemmaGgufSource final : public GgufSource {
 public:
  using GgufSource::GgufSource;
  Tensor load(const std::string& name, DType dtype) const override {
    Tensor t = GgufSource::load(name, dtype);
    if (!ends_with(name, "norm.weight")) return t;
    return map_floats(t, origin(), name, [](float x) { return x - 1.0f; });
  }
};

// Qwen3.5 as llama.cpp's converter writes it: every (1 + weight) RMSNorm stored as 1 + weight (the
// linear attention's plain output norm as is), A_log as -exp(A_log), and the linear attention's value heads
// tiled over the key heads (linear_tiled_value_heads: the model reads them in that order, so no tensor is
// reordered, block-quantised ones included). The norms and A_log are given back as HF stores them (in
// float32: (v - 1) + 1 is v again for v in [0.5, 2]; log(-a) then exp is A_log's exp to within an ulp).
class Qwen35GgufSource final : public GgufSource {
 public:
  // next: qwen3next, whose value heads stay in Transformers' grouped order and whose in_proj_qkvz is split.
  Qwen35GgufSource(std::shared_ptr<GgufFile> g, bool next) : GgufSource(std::move(g)), next_(next) {}
  bool linear_tiled_value_heads() const override { return !next_; }
  bool linear_split_qkvz() const override { return next_; }
  Tensor load(const std::string& name, DType dtype) const override {
    Tensor t = GgufSource::load(name, dtype);
    const bool a_log = ends_with(name, ".linear_attn.A_log");
    const bool norm = ends_with(name, "norm.weight") && !ends_with(name, "linear_attn.norm.weight");
    if (norm) return map_floats(t, origin(), name, [](float x) { return x - 1.0f; });
    if (!a_log) return t;
    return map_floats(t, origin(), name, [&](float x) {
      if (!(x < 0.0f))
        fail(origin(), ": tensor '", printable(name), "' holds ", x,
             "; llama.cpp stores -exp(A_log), which is negative");
      return std::log(-x);
    });
  }

 private:
  bool next_;
};

}  // namespace

std::unique_ptr<WeightSource> open_gguf(const std::string& path) { return open_gguf(GgufFile::open(path)); }

std::unique_ptr<WeightSource> open_gguf(std::shared_ptr<GgufFile> file) {
  const auto arch = file->get_string("general.architecture");
  const ArchSpec* spec = arch ? find_arch(*arch) : nullptr;
  if (spec && spec->layout == Layout::kGemma) return std::make_unique<GemmaGgufSource>(std::move(file));
  if (spec && spec->layout == Layout::kQwen35)
    return std::make_unique<Qwen35GgufSource>(std::move(file), std::string(spec->gguf) == "qwen3next");
  return std::make_unique<GgufSource>(std::move(file));
}

}  // namespace tessera::io
