// Generation settings and results with Hugging Face Transformers semantics.
#pragma once
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tessera {

struct GenerationOverrides;
class Constraint;  // tessera/constraint.h

// The effective settings of one generate() call, resolved as Transformers' generate() resolves them: the
// caller's settings, then the model's generation_config.json, then Transformers' global defaults (the values
// below).
// The most draft tokens one speculative step verifies per row (GenerationConfig::prompt_lookup_num_tokens).
inline constexpr int kMaxDraftTokens = 32;

struct GenerationConfig {
  // Length, as Transformers: max_new_tokens wins when set; otherwise max_length caps prompt + new tokens,
  // except the global default max_length (20), which means 20 new tokens (capped at max_position_embeddings).
  std::optional<int> max_new_tokens;  // unset: max_length decides
  int max_length = 20;
  bool max_length_is_default =
      true;  // max_length came from the global defaults, not from a file or the caller
  bool do_sample = false;
  float temperature = 1.0f;
  int top_k = 50;  // 0 disables (as in Transformers, applied only when sampling)
  float top_p = 1.0f;
  float min_p = 0.0f;  // 0 disables (Transformers' unset min_p)
  float repetition_penalty = 1.0f;
  std::optional<uint64_t> seed;                 // unset: a fresh random seed per call
  std::vector<int32_t> eos_token_id;            // generation stops for a row when it emits any of these
  std::optional<int32_t> pad_token_id;          // written after a row finished; defaults to the first eos id
  std::optional<int32_t> bos_token_id;          // informational (prompts are given as ids)
  std::string cache_implementation = "static";  // "static" (one decode shape) or "dynamic" (grows in chunks)
  bool disable_compile = false;  // plan every step afresh instead of reusing compiled executables
  // Constrained decoding (tessera/constraint.h): every row's tokens keep this constraint satisfiable, and a
  // row ends (FinishReason::Eos) once it is complete. Rows sample on the host (the logits come back), so a
  // PJRT device samples constrained rows there; null: unconstrained.
  std::shared_ptr<const Constraint> constraint;
  // Speculative decoding by prompt lookup (Transformers' names): each step, up to prompt_lookup_num_tokens
  // draft tokens are copied from where the row's last n-gram (max_matching_ngram_size tokens down to 1)
  // occurred before, in its prompt or output, and verified with its next token in one step. The tokens are
  // those of decoding without it, greedy and seeded alike (each draft is kept only while it equals the token
  // chosen from that position's logits, computed as a one-token step computes them). 0: off. Used where the
  // backend verifies in one step (the native cpu backend: Capabilities::shared_cache_rows); elsewhere the
  // row decodes one token per step.
  int prompt_lookup_num_tokens = 0;
  int max_matching_ngram_size = 0;  // 0: Transformers' default, 2
  // Speculative decoding with an assistant (draft) model (CausalLM::generate's `assistant`): the most draft
  // tokens it proposes per step (Transformers' default 20; the length then adapts to what is confirmed).
  int num_assistant_tokens = 20;

  // generation_config.json contents over the global defaults (unknown keys ignored); `origin` names the file.
  static GenerationConfig from_json(const std::string& json_text, const std::string& origin);
  // `defaults` (e.g. CausalLM::generation_config()) with every field `overrides` sets replaced.
  static GenerationConfig merged(const GenerationConfig& defaults, const GenerationOverrides& overrides);
  // Throws Error naming the field when a value is out of range.
  void validate() const;
  // The first invalid field and what is wrong with it ({"top_p", "must be in (0, 1], got 0"}); nullopt if
  // none.
  std::optional<std::pair<std::string, std::string>> invalid_field() const;
  // New tokens to generate after a prompt of `prompt_len` tokens (padding included), as Transformers'
  // _prepare_generated_length computes max_length; throws Error when the prompt already reaches max_length.
  int new_token_budget(int prompt_len, int64_t max_position_embeddings) const;
  // The pad id generate() writes after a row finished: pad_token_id, else the first eos id, else none.
  std::optional<int32_t> effective_pad_token_id() const;
};

// Settings given explicitly (by a caller, or by a generation_config.json); unset fields keep the value
// beneath.
struct GenerationOverrides {
  std::optional<int> max_new_tokens, max_length, top_k;
  std::optional<bool> do_sample;
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<uint64_t> seed;
  std::optional<std::vector<int32_t>> eos_token_id;
  std::optional<int32_t> pad_token_id, bos_token_id;
  std::optional<std::string> cache_implementation;
  std::optional<bool> disable_compile;
  std::optional<int> prompt_lookup_num_tokens, max_matching_ngram_size, num_assistant_tokens;

  // The fields a generation_config.json (or, for a checkpoint without one, its config.json, as Transformers'
  // GenerationConfig.from_model_config reads it) sets; null counts as unset. Every field is type- and
  // range-checked; errors name `origin` and the field.
  static GenerationOverrides from_json(const std::string& json_text, const std::string& origin);
};

namespace detail {
template <typename T>
struct is_std_function : std::false_type {};
template <typename R, typename... A>
struct is_std_function<std::function<R(A...)>> : std::true_type {};
}  // namespace detail

// A streaming callback, called as each new token of a row is chosen: `on_token(row, token)` (generate(): the
// batch row; SlotBatch: the slot). It may return nothing, or a bool: false stops that row after this token
// (the token is kept; the row then ends as at an eos, and generate() pads it), so a server can cancel a
// request and a command line can stop on a stop string. Any callable of (int, int32_t) converts to it, as
// does nullptr (no callback) and an empty std::function.
class TokenCallback {
 public:
  TokenCallback() = default;
  TokenCallback(std::nullptr_t) {}  // NOLINT(google-explicit-constructor): nullptr means no callback
  template <typename F>
  requires(std::invocable<F&, int, int32_t> && !std::same_as<std::decay_t<F>, TokenCallback> &&
           !std::same_as<std::decay_t<F>, std::nullptr_t>)
      TokenCallback(
          F f) {  // NOLINT(google-explicit-constructor): a lambda is passed where a callback is taken
    if constexpr (detail::is_std_function<F>::value || std::is_pointer_v<F>)
      if (!f) return;  // an empty std::function or a null function pointer: no callback
    using R = std::invoke_result_t<F&, int, int32_t>;
    if constexpr (std::is_void_v<R>) {
      fn_ = [f = std::move(f)](int row, int32_t token) mutable {
        f(row, token);
        return true;
      };
    } else {
      static_assert(std::is_convertible_v<R, bool>,
                    "a token callback returns void or bool (false: stop the row)");
      fn_ = [f = std::move(f)](int row, int32_t token) mutable { return static_cast<bool>(f(row, token)); };
    }
  }
  explicit operator bool() const { return static_cast<bool>(fn_); }
  // Calls the callback; true: the row goes on (also when there is no callback).
  bool operator()(int row, int32_t token) const { return !fn_ || fn_(row, token); }

 private:
  std::function<bool(int, int32_t)> fn_;
};

// Why a sequence ended.
enum class FinishReason : uint8_t {
  None,     // still running
  Eos,      // it produced one of GenerationConfig::eos_token_id
  Length,   // it reached its new-token budget (max_new_tokens / max_length)
  Stopped,  // the caller stopped it (a TokenCallback returned false)
  Error,    // the model produced a non-finite logit for it (SlotBatch::step threw naming the slot)
};
const char* finish_reason_name(FinishReason r);  // "running", "eos", "length", "stopped", "error"

struct CompileReport {
  int compiles = 0;   // shapes compiled by the backend
  int hits = 0;       // in-memory cache hits
  int disk_hits = 0;  // shapes loaded from the on-disk compile cache instead of compiling
  double compile_seconds = 0, first_compile_seconds = 0, load_seconds = 0;
  std::vector<std::string> keys;  // the shape keys compiled or loaded, in order
  std::vector<std::string>
      misses;  // why each new key was not in memory ("<key>: new key" / plugin changed / ...)
};

struct GenerateOutput {
  // Prompt (as given, padding included) followed by the new tokens, one row per batch entry.
  std::vector<std::vector<int32_t>> sequences;
  int prompt_tokens = 0;  // per row (the padded length)
  int new_tokens = 0;     // decode steps taken (max over rows)
  double prefill_seconds = 0, decode_seconds = 0;
  double prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
  CompileReport compiles;        // counters of this call (compiles and cache hits)
  int prefill_len = 0;           // the prompt bucket the prefill ran at (>= prompt_tokens)
  bool device_sampling = false;  // logits processing + sampling ran inside the compiled step
  // Bytes between host and device during the decode steps (PJRT devices; 0 on the native cpu backend).
  uint64_t decode_h2d_bytes = 0, decode_d2h_bytes = 0;
  int decode_steps = 0;                      // decode steps run (new_tokens - 1 unless stopped early)
  std::vector<FinishReason> finish_reasons;  // per row: why it ended (Length when the budget ran out)
  // Prompt lookup (GenerationConfig::prompt_lookup_num_tokens): draft tokens proposed over all rows, and
  // those the model confirmed (tokens beyond one per decode step). decode_tokens_per_s then counts the
  // tokens produced, not steps x rows.
  int64_t draft_tokens = 0, accepted_tokens = 0;
};

}  // namespace tessera
