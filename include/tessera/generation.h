// Generation settings and results with Hugging Face Transformers semantics.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera {

struct GenerationConfig {
  int max_new_tokens = 20;
  bool do_sample = false;
  float temperature = 1.0f;
  int top_k = 50;  // 0 disables (as in Transformers, applied only when sampling)
  float top_p = 1.0f;
  float min_p = 0.0f;  // 0 disables
  float repetition_penalty = 1.0f;
  std::optional<uint64_t> seed;  // unset: a fresh random seed per call
  std::vector<int32_t> eos_token_id;  // generation stops for a row when it emits any of these
  std::optional<int32_t> pad_token_id;  // written after a row finished; defaults to the first eos id
  std::string cache_implementation = "static";  // "static" (one decode shape) or "dynamic" (grows in chunks)
  bool disable_compile = false;  // plan every step afresh instead of reusing compiled executables

  // Reads generation_config.json contents (unknown keys ignored); `origin` names the file in errors.
  static GenerationConfig from_json(const std::string& json_text, const std::string& origin);
  // Throws Error naming the field when a value is out of range.
  void validate() const;
};

struct CompileReport {
  int compiles = 0;        // shapes compiled by the backend
  int hits = 0;            // in-memory cache hits
  int disk_hits = 0;       // shapes loaded from the on-disk compile cache instead of compiling
  double compile_seconds = 0, first_compile_seconds = 0, load_seconds = 0;
  std::vector<std::string> keys;    // the shape keys compiled or loaded, in order
  std::vector<std::string> misses;  // why each new key was not in memory ("<key>: new key" / plugin changed / ...)
};

struct GenerateOutput {
  // Prompt (as given, padding included) followed by the new tokens, one row per batch entry.
  std::vector<std::vector<int32_t>> sequences;
  int prompt_tokens = 0;  // per row (the padded length)
  int new_tokens = 0;     // decode steps taken (max over rows)
  double prefill_seconds = 0, decode_seconds = 0;
  double prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
  CompileReport compiles;  // counters of this call (compiles and cache hits)
  int prefill_len = 0;     // the prompt bucket the prefill ran at (>= prompt_tokens)
  bool device_sampling = false;  // logits processing + sampling ran inside the compiled step
  // Bytes between host and device during the decode steps (PJRT devices; 0 on the native cpu backend).
  uint64_t decode_h2d_bytes = 0, decode_d2h_bytes = 0;
  int decode_steps = 0;  // decode steps run (new_tokens - 1 unless stopped early)
};

}  // namespace tessera
