// A GGUF of a supported architecture (llama, qwen2, qwen3, gemma2, gemma3, phi3, glm4) seen as a Hugging Face
// checkpoint: config.json derived from the metadata (under the architecture's key prefix) as llama.cpp reads
// it, tensor names mapped to HF's, and for llama the q/k projection rows put back in HF order (the HF->GGUF
// converter interleaves each head's two rotary halves for llama.cpp's rope; see unpermute_rows). The others
// are stored unpermuted (llama.cpp runs them with the NeoX rope, as Transformers does). Mistral has no
// architecture of its own: llama.cpp's converter writes it as llama (no sliding window), and so it loads.
// Gemma's RMSNorm weights are stored as 1 + weight and are given back as HF stores them (GemmaGgufSource).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "io/io_util.h"
#include "io/weight_source.h"
#include "tessera/error.h"

namespace tessera::io {

using ojson = nlohmann::ordered_json;

namespace {

// How an architecture's block tensors are named and laid out.
enum class Layout {
  kLlama,  // attn_norm / ffn_norm before attention / MLP; separate q, k, v and gate, up
  kGemma,  // four norms a block: attn_norm, post_attention_norm, ffn_norm (before the MLP), post_ffw_norm
  kPhi3,   // attn_qkv (q rows, then k, then v) and ffn_up (gate rows, then up), as HF's fused tensors
  kGlm4,   // GLM-4-0414: attn_norm, post_attention_norm (on attention's output), ffn_norm, post_ffw_norm
           // (on the MLP's output); ffn_up holds gate rows, then up, as HF's gate_up_proj
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
};
constexpr ArchSpec kArchs[] = {
    {"llama", "LlamaForCausalLM", "llama", true, true, true},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", false, false,
     false},  // q/k/v biases always (Qwen2Config has no key)
    {"qwen3", "Qwen3ForCausalLM", "qwen3", false, true, false},
    {"gemma2", "Gemma2ForCausalLM", "gemma2", false, true, false, Layout::kGemma, 46},
    {"gemma3", "Gemma3ForCausalLM", "gemma3_text", false, true, false, Layout::kGemma, 62},
    {"phi3", "Phi3ForCausalLM", "phi3", false, false, false, Layout::kPhi3, 0, true},
    // GLM-4's rotary pairs are interleaved in HF's rows as in llama.cpp's normal rope: stored unpermuted.
    {"glm4", "Glm4ForCausalLM", "glm4", false, true, false, Layout::kGlm4, 0, true},
};
const char* const kSupportedArchs = "llama, qwen2, qwen3, gemma2, gemma3, phi3, glm4";

const ArchSpec* find_arch(const std::string& name) {
  for (const ArchSpec& a : kArchs)
    if (name == a.gguf) return &a;
  return nullptr;
}

struct Mapping {
  std::string gguf_name;
  int64_t permute_heads = 0;  // > 0: un-permute rows for this many heads (q: n_head, k: n_head_kv)
};

// "blk.12.attn_q.weight" -> "model.layers.12.self_attn.q_proj.weight"; "" when there is no HF name.
std::string hf_name_for(const std::string& g, Layout layout) {
  const size_t dot = g.rfind('.');
  if (dot == std::string::npos) return "";
  const std::string base = g.substr(0, dot), suffix = g.substr(dot);  // suffix ".weight" / ".bias"
  if (suffix != ".weight" && suffix != ".bias") return "";
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
  static const Parts kGlm4 = {{"post_attention_norm", "post_self_attn_layernorm"},
                              {"ffn_norm", "post_attention_layernorm"},
                              {"post_ffw_norm", "post_mlp_layernorm"},
                              {"ffn_up", "mlp.gate_up_proj"}};
  const std::string part = base.substr(d2 + 1);
  const Parts& own = layout == Layout::kGemma  ? kGemma
                     : layout == Layout::kPhi3 ? kPhi3
                     : layout == Layout::kGlm4 ? kGlm4
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
    if (n_head_ <= 0 || n_head_kv_ <= 0 || n_head_ > (1 << 20) || n_head_ % n_head_kv_ != 0)
      fail(path, ": ", key("attention.head_count"), " ", n_head_, " / ", key("attention.head_count_kv"), " ",
           n_head_kv_, " are inconsistent (both must be positive and the first a multiple of the second)");
    map_tensors();
    build_config();
  }

  const std::vector<TensorMeta>& tensors() const override { return metas_; }
  const TensorMeta* find(const std::string& name) const override {
    auto it = std::lower_bound(metas_.begin(), metas_.end(), name,
                               [](const TensorMeta& m, const std::string& n) { return m.name < n; });
    return it != metas_.end() && it->name == name ? &*it : nullptr;
  }
  Tensor load(const std::string& name, DType dtype) const override {
    auto it = map_.find(name);
    if (it == map_.end()) fail(origin_, ": checkpoint has no tensor named '", printable(name), "'");
    Tensor t = g_->load_tensor(it->second.gguf_name, dtype);
    if (it->second.permute_heads > 0) unpermute_rows(t, it->second.permute_heads);
    return t;
  }
  const std::string& config_json() const override { return config_; }
  const std::string& generation_config_json() const override { return generation_config_; }
  const std::string& origin() const override { return origin_; }
  const std::vector<std::string>& unmapped_tensors() const override { return unmapped_; }
  std::shared_ptr<const GgufFile> gguf() const override { return g_; }

 private:
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

  void map_tensors() {
    for (const GgufTensorInfo& t : g_->tensors()) {
      if (arch_->layout == Layout::kPhi3) check_phi3_tensor(t.name);
      if (arch_->layout == Layout::kGlm4) check_glm4_tensor(t.name);
      const std::string hf = hf_name_for(t.name, arch_->layout);
      if (hf.empty()) {
        unmapped_.push_back(t.name);
        continue;
      }
      Mapping m{t.name, 0};
      if (arch_->permuted_qk && t.name.find(".attn_q.") != std::string::npos) m.permute_heads = n_head_;
      if (arch_->permuted_qk && t.name.find(".attn_k.") != std::string::npos) m.permute_heads = n_head_kv_;
      if (m.permute_heads > 0 && t.shape[0] % (2 * m.permute_heads) != 0)
        fail(origin_, ": tensor '", printable(t.name), "' has ", t.shape[0], " rows, not a multiple of 2 x ",
             m.permute_heads, " heads");
      if (!map_.emplace(hf, m).second) fail(origin_, ": two tensors map to '", hf, "'");
      metas_.push_back(TensorMeta{hf, t.shape, t.type_name, origin_});
    }
    std::sort(metas_.begin(), metas_.end(), [](auto& a, auto& b) { return a.name < b.name; });
  }

  // Phi-3 as llama.cpp's converter writes it from HF's fused qkv_proj / gate_up_proj. llama.cpp also reads
  // separate q/k/v projections for phi3, which no converted checkpoint has and Phi3ForCausalLM has no names
  // for; the longrope factors of the 128k variants are Phi3's longrope scaling, not implemented.
  void check_phi3_tensor(const std::string& name) const {
    for (const char* part : {".attn_q.", ".attn_k.", ".attn_v.", ".ffn_gate."})
      if (name.find(part) != std::string::npos)
        fail(origin_, ": tensor '", printable(name),
             "': a phi3 GGUF with separate q/k/v or gate projections is not supported (Phi3ForCausalLM "
             "reads the fused blk.N.attn_qkv and blk.N.ffn_up, as llama.cpp's converter writes them)");
    if (name.rfind("rope_factors_", 0) == 0)
      fail(origin_, ": tensor '", printable(name),
           "': Phi-3's longrope scaling (the 128k variants) is not supported (supported: the default rope)");
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
    c["architectures"] = {arch_->hf_class};
    c["model_type"] = arch_->model_type;
    c["hidden_size"] = require_int(key("embedding_length"));
    c["intermediate_size"] = require_int(key("feed_forward_length"));
    c["num_hidden_layers"] = require_int(key("block_count"));
    check_against_tensors(*embd);
    c["num_attention_heads"] = n_head_;
    c["num_key_value_heads"] = n_head_kv_;
    const auto key_length = g_->get_int(key("attention.key_length"));
    if (key_length) c["head_dim"] = *key_length;
    // Glm4Config's head_dim default is 128, llama.cpp's hidden / heads: say which.
    if (!key_length && arch_->layout == Layout::kGlm4)
      c["head_dim"] = c["hidden_size"].get<int64_t>() / n_head_;
    check_head_dims(key_length);
    if (arch_->layout == Layout::kGemma)
      c["hidden_activation"] = "gelu_pytorch_tanh";  // llama.cpp's GELU (tanh) for Gemma
    else
      c["hidden_act"] = "silu";
    c["rms_norm_eps"] = require_float(key("attention.layer_norm_rms_epsilon"));
    c["rope_theta"] = finite_float(key("rope.freq_base")).value_or(10000.0);
    add_rope_scaling(c);
    c["max_position_embeddings"] = require_int(key("context_length"));
    const auto n_tokens =
        g_->has("tokenizer.ggml.tokens") ? g_->array_size("tokenizer.ggml.tokens") : std::nullopt;
    c["vocab_size"] = n_tokens ? static_cast<int64_t>(*n_tokens) : embd->shape[0];
    c["tie_word_embeddings"] = g_->find_tensor("output.weight") == nullptr;
    if (arch_->bias_keys) c["attention_bias"] = g_->find_tensor("blk.0.attn_q.bias") != nullptr;
    if (arch_->mlp_bias_key) c["mlp_bias"] = g_->find_tensor("blk.0.ffn_up.bias") != nullptr;
    if (arch_->layout == Layout::kGemma) add_gemma_keys(c, key_length);
    if (arch_->partial_rotary) add_partial_rotary(c, key_length);
    if (arch_->layout == Layout::kPhi3) add_phi3_window(c);
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
    const int64_t ffn = require_int(key("feed_forward_length"));
    const bool fused_up = arch_->layout == Layout::kPhi3 || arch_->layout == Layout::kGlm4;
    const int64_t up_rows = fused_up ? 2 * ffn : ffn;  // phi3, glm4: gate and up rows
    if (const GgufTensorInfo* up = g_->find_tensor("blk.0.ffn_up.weight");
        up && up->shape.size() == 2 && up->shape[0] != up_rows)
      fail(origin_, ": ", key("feed_forward_length"), " is ", ffn, " but blk.0.ffn_up.weight is ",
           shape_str(up->shape));
    if (ffn <= 0) fail(origin_, ": ", key("feed_forward_length"), " is ", ffn, ", expected a positive size");
    const int64_t ctx = require_int(key("context_length"));
    if (ctx <= 0) fail(origin_, ": ", key("context_length"), " is ", ctx, ", expected a positive length");
    if (auto base = finite_float(key("rope.freq_base")); base && *base <= 0)
      fail(origin_, ": ", key("rope.freq_base"), " is ", *base, ", expected a positive rotary base");
    if (const double eps = require_float(key("attention.layer_norm_rms_epsilon")); eps < 0)
      fail(origin_, ": ", key("attention.layer_norm_rms_epsilon"), " is ", eps,
           ", expected a non-negative epsilon");
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
  void add_rope_scaling(ojson& c) const {
    const auto type = g_->get_string(key("rope.scaling.type"));
    if (!type || *type == "none") return;
    const auto factor = finite_float(key("rope.scaling.factor"));
    if (*type != "linear" || !factor)
      fail(origin_, ": rope scaling '", printable(*type),
           "' in GGUF metadata is not supported (supported: linear)");
    c["rope_scaling"] = {{"type", "linear"}, {"factor", *factor}};
  }

  std::shared_ptr<GgufFile> g_;
  std::string origin_;
  const ArchSpec* arch_ = nullptr;
  int64_t n_head_ = 0, n_head_kv_ = 0;
  std::map<std::string, Mapping> map_;  // HF name -> GGUF tensor
  std::vector<TensorMeta> metas_;       // sorted by HF name
  std::vector<std::string> unmapped_;
  std::string config_, generation_config_;
};

// Gemma: llama.cpp's converter stores every RMSNorm weight as 1 + weight (llama.cpp scales by it as is),
// where HF stores the weight and its Gemma models add 1. The norms are given back as HF stores them (the
// stored value minus 1, in float32, as Transformers' GGUF loader does), so the Gemma models add 1 once
// whatever the checkpoint's format; (v - 1) + 1 is v again in float32 for any v in [0.5, 2].
class GemmaGgufSource final : public GgufSource {
 public:
  using GgufSource::GgufSource;
  Tensor load(const std::string& name, DType dtype) const override {
    Tensor t = GgufSource::load(name, dtype);
    const std::string suffix = "norm.weight";
    if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      return t;
    if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
      fail(origin(), ": tensor '", printable(name), "' loads as ", dtype_name(t.dtype),
           "; a Gemma norm weight must be a float type");
    std::vector<float> v(static_cast<size_t>(t.numel()));
    convert(t.data, t.dtype, v.data(), DType::F32, t.numel());
    for (float& x : v) x -= 1.0f;
    Tensor out = Tensor::empty(t.dtype, t.shape);  // t may be a read-only view of the mapping
    convert(v.data(), DType::F32, out.data, out.dtype, out.numel());
    return out;
  }
};

}  // namespace

std::unique_ptr<WeightSource> open_gguf(const std::string& path) { return open_gguf(GgufFile::open(path)); }

std::unique_ptr<WeightSource> open_gguf(std::shared_ptr<GgufFile> file) {
  const auto arch = file->get_string("general.architecture");
  const ArchSpec* spec = arch ? find_arch(*arch) : nullptr;
  if (spec && spec->layout == Layout::kGemma) return std::make_unique<GemmaGgufSource>(std::move(file));
  return std::make_unique<GgufSource>(std::move(file));
}

}  // namespace tessera::io
