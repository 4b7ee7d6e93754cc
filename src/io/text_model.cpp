// Multimodal checkpoints whose language model we run: the hub's Qwen3.5 files are
// Qwen3_5ForConditionalGeneration (config.json's text_config; weights under model.language_model., a vision
// tower under model.visual. and multi-token-prediction layers under mtp., which a text model never reads);
// Gemma 4's are Gemma4ForConditionalGeneration (vision and audio towers beside model.language_model.).
// with_text_model presents such a checkpoint as its text model: the text config as config.json, the language
// model's weights under the text model's names, the rest left out.
#include <algorithm>
#include <vector>
#include <nlohmann/json.hpp>

#include "io/json_util.h"
#include "io/weight_source.h"
#include "tessera/error.h"

namespace tessera::io {
namespace {

struct TextModel {
  const char* wrapper;                // config.json architectures[0]
  const char* text;                   // the text model's architecture
  const char* prefix;                 // its weights' prefix in the wrapper ("model." in the text model)
  std::vector<const char*> skipped;   // prefixes of weights a text model does not read
  bool tie_default;                   // the wrapper config class's tie_word_embeddings default
};

const TextModel kTextModels[] = {
    {"Qwen3_5ForConditionalGeneration",
     "Qwen3_5ForCausalLM",
     "model.language_model.",
     {"model.visual.", "mtp."},
     false},
    {"Qwen3_5MoeForConditionalGeneration",
     "Qwen3_5MoeForCausalLM",
     "model.language_model.",
     {"model.visual.", "mtp."},
     false},
    // Gemma 4 (E2B / E4B / 26B-A4B / 31B): vision and audio towers and their projections into the text model.
    {"Gemma4ForConditionalGeneration",
     "Gemma4ForCausalLM",
     "model.language_model.",
     {"model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio."},
     true},
};

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

class TextModelSource : public DerivedSource {
 public:
  TextModelSource(std::unique_ptr<WeightSource> inner, const TextModel& t, std::string config)
      : DerivedSource(std::move(inner)), prefix_(t.prefix), config_(std::move(config)) {
    for (const TensorMeta& m : inner_->tensors()) {
      if (std::any_of(t.skipped.begin(), t.skipped.end(),
                      [&](const char* p) { return starts_with(m.name, p); }))
        continue;
      TensorMeta out = m;
      if (starts_with(m.name, t.prefix)) out.name = "model." + m.name.substr(prefix_.size());
      metas_.push_back(std::move(out));
    }
    std::sort(metas_.begin(), metas_.end(),
              [](const TensorMeta& a, const TensorMeta& b) { return a.name < b.name; });
  }
  const std::vector<TensorMeta>& tensors() const override { return metas_; }
  const TensorMeta* find(const std::string& name) const override { return find_sorted(metas_, name); }
  Tensor load(const std::string& name, DType dtype) const override {
    if (!find(name)) fail(origin(), ": missing tensor '", name, "'");
    const std::string stored = starts_with(name, "model.") && !inner_->find(name)
                                   ? prefix_ + name.substr(std::string("model.").size())
                                   : name;
    return inner_->load(stored, dtype);
  }
  const std::string& config_json() const override { return config_; }

 private:
  std::string prefix_;
  std::string config_;
  std::vector<TensorMeta> metas_;
};

}  // namespace

std::unique_ptr<WeightSource> with_text_model(std::unique_ptr<WeightSource> src) {
  if (src->gguf()) return src;
  const std::string origin = src->origin() + "/config.json";
  nlohmann::json j;
  try {
    j = parse_json(src->config_json(), origin);  // depth-bounded
  } catch (const Error&) {
    return src;  // the config parser reports it, naming the file
  }
  if (!j.is_object()) return src;
  const auto arch = j.find("architectures");
  if (arch == j.end() || !arch->is_array() || arch->empty() || !(*arch)[0].is_string()) return src;
  const std::string name = (*arch)[0].get<std::string>();
  for (const TextModel& t : kTextModels) {
    if (name != t.wrapper) continue;
    const auto text = j.find("text_config");
    if (text == j.end() || !text->is_object())
      fail(origin, ": ", name, " without a text_config object; its language model's settings live there");
    nlohmann::json cfg = *text;
    cfg["architectures"] = nlohmann::json::array({t.text});
    // Transformers ties the wrapper's lm_head by the wrapper's own tie_word_embeddings (absent: its config
    // class's default), whatever text_config says.
    const auto tie = j.find("tie_word_embeddings");
    cfg["tie_word_embeddings"] =
        tie != j.end() && tie->is_boolean() ? tie->get<bool>() : t.tie_default;
    // The wrapper's settings that the text model reads when its own config leaves them out.
    for (const char* k : {"dtype", "torch_dtype", "bos_token_id", "eos_token_id", "pad_token_id"}) {
      const auto top = j.find(k);
      if (top == j.end() || top->is_null()) continue;
      const auto own = cfg.find(k);
      if (own == cfg.end() || own->is_null())
        cfg[k] = *top;
      else if (*own != *top)
        fail(origin, ": field '", k, "' is ", top->dump(), " but text_config.", k, " is ", own->dump(),
             "; which one the language model uses is ambiguous");
    }
    return std::make_unique<TextModelSource>(std::move(src), t, cfg.dump());
  }
  return src;
}

}  // namespace tessera::io
