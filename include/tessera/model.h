// The model API, shaped like Transformers':
//   auto model = tessera::AutoModelForCausalLM::from_pretrained("HuggingFaceTB/SmolLM2-135M", {.dtype = DType::BF16});
//   auto out = model.generate({ids}, {}, cfg);
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/generation.h"
#include "tessera/tensor.h"

namespace tessera {

struct LoadOptions {
  std::optional<DType> dtype;        // unset: the checkpoint's torch_dtype (GGUF: bfloat16)
  std::string device_map = "cpu";    // "cpu" or "auto" (today both mean the native CPU backend)
  // Called after each tensor is loaded: (tensors done, tensors total).
  std::function<void(size_t, size_t)> progress;
};

struct ModelInfo {
  std::string architecture, origin, device;
  DType dtype = DType::F32;
  int64_t num_layers = 0, hidden_size = 0, vocab_size = 0, max_position_embeddings = 0;
  size_t weight_bytes = 0;  // bytes of weights as held by the backend
};

class CausalLM {
 public:
  CausalLM(CausalLM&&) noexcept;
  CausalLM& operator=(CausalLM&&) noexcept;
  ~CausalLM();

  // input_ids: rows of equal length (left-padded); attention_mask: same shape with 0 for padding, or empty for
  // all ones. Returns prompt + new tokens per row.
  GenerateOutput generate(const std::vector<std::vector<int32_t>>& input_ids,
                          const std::vector<std::vector<int32_t>>& attention_mask, const GenerationConfig& config);
  // Streaming variant: `on_token(row, token)` is called as each new token is chosen.
  GenerateOutput generate(const std::vector<std::vector<int32_t>>& input_ids,
                          const std::vector<std::vector<int32_t>>& attention_mask, const GenerationConfig& config,
                          const std::function<void(int, int32_t)>& on_token);
  // Logits for every position of one sequence: [ids.size(), vocab] row-major.
  std::vector<float> forward(const std::vector<int32_t>& ids);

  const GenerationConfig& generation_config() const;  // defaults from generation_config.json
  const ModelInfo& info() const;
  CompileReport compile_stats() const;  // totals since load

  struct Impl;
  explicit CausalLM(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

struct AutoModelForCausalLM {
  // `path`: a model directory, a .gguf file, or a repo id resolved offline in the Hugging Face cache.
  static CausalLM from_pretrained(const std::string& path, const LoadOptions& options = {});
};

}  // namespace tessera
