// A checkpoint seen through Hugging Face names and layouts, whatever the file
// format (safetensors directory, sharded safetensors, GGUF). Models only ever
// talk to this interface.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::io {

class GgufFile;

struct TensorMeta {
  std::string name;         // HF name, e.g. "model.layers.0.self_attn.q_proj.weight"
  Shape shape;              // HF layout, e.g. [out_features, in_features] for Linear weights
  std::string stored_type;  // as stored: "F32", "BF16", "F16", "Q4_1", ...
  std::string file;         // path of the file that holds it (for error messages)
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Every tensor in the checkpoint, sorted by name.
  virtual const std::vector<TensorMeta>& tensors() const = 0;
  // nullptr when absent.
  virtual const TensorMeta* find(const std::string& name) const = 0;
  // Loads `name` as `dtype` (F32/BF16/F16). Zero-copy view into the mapped file
  // when the stored dtype already equals `dtype`; otherwise converted or
  // dequantised. Throws Error naming the file and tensor when absent.
  virtual Tensor load(const std::string& name, DType dtype) const = 0;
  // The model description in Hugging Face config.json form (for GGUF: derived from metadata).
  virtual const std::string& config_json() const = 0;
  // generation_config.json contents, or "" when the checkpoint has none.
  virtual const std::string& generation_config_json() const = 0;
  // Where the checkpoint came from (directory or .gguf path).
  virtual const std::string& origin() const = 0;
  // Tensors in the file that have no Hugging Face name and are left out of
  // tensors() (e.g. GGUF "rope_freqs.weight"); empty for safetensors.
  virtual const std::vector<std::string>& unmapped_tensors() const {
    static const std::vector<std::string> kNone;
    return kNone;
  }
  // The underlying GGUF file (for its metadata, e.g. the tokenizer), or nullptr.
  virtual std::shared_ptr<const GgufFile> gguf() const { return nullptr; }
  // The linear-attention layers' value heads are stored tiled over the key heads (value head h reads key head
  // h % key heads), as llama.cpp's converter reorders them, instead of grouped (h / (value heads / key
  // heads)) as Hugging Face stores them: DecoderConfig::linear_tiled_value_heads.
  virtual bool linear_tiled_value_heads() const { return false; }
  // Qwen3-Next's fused in_proj_qkvz stored as Qwen3.5's in_proj_qkv and in_proj_z (llama.cpp's qwen3next
  // GGUF): DecoderConfig::linear_split_qkvz.
  virtual bool linear_split_qkvz() const { return false; }
};

// A view of another source with other tensors (renamed, assembled, left out): everything but the tensors
// (their list, lookup and loading) is the inner source's.
class DerivedSource : public WeightSource {
 public:
  explicit DerivedSource(std::unique_ptr<WeightSource> inner) : inner_(std::move(inner)) {}
  const std::string& config_json() const override { return inner_->config_json(); }
  const std::string& generation_config_json() const override { return inner_->generation_config_json(); }
  const std::string& origin() const override { return inner_->origin(); }
  const std::vector<std::string>& unmapped_tensors() const override { return inner_->unmapped_tensors(); }
  std::shared_ptr<const GgufFile> gguf() const override { return inner_->gguf(); }
  bool linear_tiled_value_heads() const override { return inner_->linear_tiled_value_heads(); }
  bool linear_split_qkvz() const override { return inner_->linear_split_qkvz(); }

 protected:
  std::unique_ptr<WeightSource> inner_;
};

// The entry of `sorted` (sorted by name, as WeightSource::tensors()) named `name`, or nullptr.
const TensorMeta* find_sorted(const std::vector<TensorMeta>& sorted, const std::string& name);
// Whether a tensor stored as `stored_type` ("F32", "BF16", "F16", "Q4_K", ...) loads as `dt` without any
// conversion (a view of the file's bytes).
bool loads_as_stored(const std::string& stored_type, DType dt);

// A directory with config.json and model.safetensors or model.safetensors.index.json.
std::unique_ptr<WeightSource> open_safetensors_dir(const std::string& dir);
// A GGUF file of the llama architecture; names, layouts (q/k un-permuted) and config mapped to HF's.
std::unique_ptr<WeightSource> open_gguf(const std::string& path);
// The same view over an already parsed GGUF (e.g. GgufFile::parse of an in-memory image).
std::unique_ptr<WeightSource> open_gguf(std::shared_ptr<GgufFile> file);
// `src` seen with mixture-of-experts weights in Transformers 5's fused layout (mlp.gate.weight,
// mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]) when it stores one tensor per expert
// (Qwen-MoE's mlp.experts.<e>.{gate,up,down}_proj, Mixtral's block_sparse_moe.experts.<e>.{w1,w3,w2} and
// block_sparse_moe.gate): the stacked tensors are assembled at load. `src` itself when it stores none.
std::unique_ptr<WeightSource> with_fused_experts(std::unique_ptr<WeightSource> src);
// `src` seen as the language model of a multimodal checkpoint (Qwen3_5ForConditionalGeneration: its
// text_config as config.json, model.language_model.* as model.*, the vision tower and the multi-token-
// prediction layers left out); `src` itself for any other checkpoint.
std::unique_ptr<WeightSource> with_text_model(std::unique_ptr<WeightSource> src);
// Dispatches on the argument: a .gguf file, or a directory (after HF-cache resolution, see hf_cache.h).
std::unique_ptr<WeightSource> open_checkpoint(const std::string& path);

}  // namespace tessera::io
