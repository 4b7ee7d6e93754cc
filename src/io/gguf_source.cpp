// A GGUF of a supported architecture (llama, qwen2, qwen3) seen as a Hugging Face checkpoint: config.json
// derived from the metadata (under the architecture's key prefix), tensor names mapped to HF's, and for llama
// the q/k projection rows put back in HF order (the HF->GGUF converter interleaves each head's two rotary
// halves for llama.cpp's rope; see unpermute_rows). Qwen2 and Qwen3 are stored unpermuted (llama.cpp runs
// them with the NeoX rope, as Transformers does).
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

// What differs between the GGUF architectures read here; the metadata keys are "<gguf>.<name>".
struct ArchSpec {
  const char* gguf;        // general.architecture
  const char* hf_class;    // config.json architectures[0]
  const char* model_type;  // config.json model_type
  bool permuted_qk;        // q/k rows stored interleaved (llama)
  bool bias_keys;          // the config class has attention_bias (and, llama, mlp_bias)
  bool mlp_bias_key;
};
constexpr ArchSpec kArchs[] = {
    {"llama", "LlamaForCausalLM", "llama", true, true, true},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", false, false,
     false},  // q/k/v biases always (Qwen2Config has no key)
    {"qwen3", "Qwen3ForCausalLM", "qwen3", false, true, false},
};
const char* const kSupportedArchs = "llama, qwen2, qwen3";

struct Mapping {
  std::string gguf_name;
  int64_t permute_heads = 0;  // > 0: un-permute rows for this many heads (q: n_head, k: n_head_kv)
};

// "blk.12.attn_q.weight" -> "model.layers.12.self_attn.q_proj.weight"; "" when there is no HF name.
std::string hf_name_for(const std::string& g) {
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
  static const std::pair<const char*, const char*> kParts[] = {
      {"attn_norm", "input_layernorm"},    {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},      {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"}, {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"}, {"ffn_norm", "post_attention_layernorm"},
      {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
  };
  const std::string part = base.substr(d2 + 1);
  for (const auto& [from, to] : kParts)
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
    for (const ArchSpec& a : kArchs)
      if (*arch == a.gguf) arch_ = &a;
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
      const std::string hf = hf_name_for(t.name);
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
    if (auto kl = g_->get_int(key("attention.key_length"))) c["head_dim"] = *kl;
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
    if (const GgufTensorInfo* up = g_->find_tensor("blk.0.ffn_up.weight");
        up && up->shape.size() == 2 && up->shape[0] != ffn)
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

}  // namespace

std::unique_ptr<WeightSource> open_gguf(const std::string& path) { return open_gguf(GgufFile::open(path)); }

std::unique_ptr<WeightSource> open_gguf(std::shared_ptr<GgufFile> file) {
  return std::make_unique<GgufSource>(std::move(file));
}

}  // namespace tessera::io
