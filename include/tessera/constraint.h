// Constrained decoding: a JSON schema, a regular expression or a grammar that every token a row produces must
// keep satisfiable. Each step the row's allowed tokens (a bitmask over the vocabulary) are computed on the
// host and every other logit is set to -inf before the row samples, so greedy and sampled rows alike only
// ever produce text the constraint accepts; a row whose constraint is complete (nothing more may follow)
// ends, and one that runs out of tokens ends at its budget (FinishReason::Length).
//
// The grammar engine is llguidance (https://github.com/guidance-ai/llguidance), loaded at run time from its
// PyPI wheel (`pip install llguidance`: llguidance/_lib.abi3.so, whose C API is what llama.cpp and
// mistral.rs link); nothing of it is linked, so a build and a run without it only lose constrained decoding.
//
//   tessera::ConstraintVocabulary vocab(tokenizer, model.config().vocab_size, config.eos_token_id);
//   config.constraint = vocab.compile(tessera::ConstraintKind::JsonSchema, R"({"type": "object"})");
//   model.generate(ids, {}, config);
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

class Tokenizer;

enum class ConstraintKind {
  JsonSchema,  // a JSON schema (draft 2020-12 as llguidance takes it: its unsupported keywords are errors)
  JsonObject,  // any JSON object (OpenAI's response_format json_object)
  Regex,       // a regular expression (Rust regex syntax) the whole output must match
  Grammar,     // a Lark grammar in llguidance's dialect (a GBNF grammar: convert it with
               // llguidance.gbnf_to_lark)
};
const char* constraint_kind_name(ConstraintKind k);  // "json_schema", "json_object", "regex", "grammar"

// Where the llguidance library is and which version it is. Process-wide. Unless a program names a file
// (set_library), the library is looked for as llguidance/_lib*.so under each Python site-packages root the
// PJRT plugins are searched in (a .venv beside the program, then the system's).
struct ConstraintLibrary {
  static void set_library(std::optional<std::string> path);  // nullopt: search again
  // The library, loaded on first use; false when it cannot be, with `why` saying where it looked and how to
  // install it.
  static bool available(std::string* why = nullptr);
  static std::string version();  // "" when not available
  static std::string path();     // the file loaded ("" when not available)
};

class Constraint;

// llguidance's view of one tokenizer: each id's bytes (special tokens marked as llguidance expects), the
// model's vocabulary size (ids past the tokenizer's are never allowed) and the end-of-sequence ids a complete
// constraint allows. Building it costs tens of milliseconds for a 150k vocabulary: build one per model and
// compile every constraint with it. Thread-safe once built.
class ConstraintVocabulary {
 public:
  // Throws Error when llguidance is not available (naming where it looked), when the tokenizer does not
  // decode byte-wise, or when `model_vocab` is smaller than the tokenizer's vocabulary.
  ConstraintVocabulary(const Tokenizer& tokenizer, int64_t model_vocab, const std::vector<int32_t>& eos_ids);
  ~ConstraintVocabulary();

  // Compiles `text` of `kind`; throws Error with llguidance's message (e.g. an unsupported schema keyword)
  // when it cannot be. Constraints are immutable and shareable: each row that uses one starts from its
  // initial state.
  std::shared_ptr<const Constraint> compile(ConstraintKind kind, std::string_view text) const;
  int64_t vocab_size() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

class Constraint {
 public:
  ConstraintKind kind() const;
  const std::string& source() const;  // the text it was compiled from
  int64_t vocab_size() const;         // of the vocabulary it was compiled for
  double compile_seconds() const;

  struct Impl;
  explicit Constraint(std::unique_ptr<Impl> impl);
  ~Constraint();
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
