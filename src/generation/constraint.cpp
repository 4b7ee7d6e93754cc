// Constrained decoding over llguidance's C API, loaded at run time (no header or library at build time: the
// few structs and functions used are declared below as its llguidance.h lays them out).
#include "tessera/constraint.h"

#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backends/pjrt/pjrt_info.h"
#include "generation/constraint_state.h"
#include "tessera/error.h"
#include "tessera/tokenizer.h"

namespace tessera {

namespace {

// ---- llguidance's C ABI (parser/llguidance.h), the parts used here.
struct LlgTokenizer;
struct LlgMatcher;
struct LlgParserLimits {
  size_t max_items_in_row;
  uint64_t initial_lexer_fuel, step_lexer_fuel;
  size_t step_max_items, max_lexer_states, max_grammar_size;
  bool precompute_large_lexemes, verbose_errors;
};
struct LlgConstraintInit {
  const LlgTokenizer* tokenizer;
  uint32_t log_buffer_level, log_stderr_level;
  bool ff_tokens_ok, backtrack_ok;
  LlgParserLimits limits;
};
using LlgTokenizeFn = size_t (*)(const void*, const uint8_t*, size_t, uint32_t*, size_t);
struct LlgTokenizerInitV2 {
  size_t struct_size;
  uint32_t vocab_size;
  uint32_t tok_eos;
  const uint32_t* token_lens;
  const uint8_t* token_bytes;
  const char* tokenizer_json;
  bool tokenize_assumes_string;
  LlgTokenizeFn tokenize_fn;
  bool use_approximate_greedy_tokenize_fn;
  const void* tokenize_user_data;
  const char* const* slices;
  const uint32_t* tok_eos_extra;
  uint32_t tok_eos_extra_count;
};

struct Api {
  void* handle = nullptr;
  std::string path, version, error;
  LlgTokenizer* (*new_tokenizer_v2)(const LlgTokenizerInitV2*, char*, size_t) = nullptr;
  void (*free_tokenizer)(LlgTokenizer*) = nullptr;
  void (*init_defaults)(LlgConstraintInit*, const LlgTokenizer*) = nullptr;
  LlgMatcher* (*new_matcher)(const LlgConstraintInit*, const char*, const char*) = nullptr;
  LlgMatcher* (*clone_matcher)(const LlgMatcher*) = nullptr;
  void (*free_matcher)(LlgMatcher*) = nullptr;
  const char* (*matcher_error)(LlgMatcher*) = nullptr;
  size_t (*mask_byte_size)(const LlgMatcher*) = nullptr;
  int32_t (*compute_mask_into)(LlgMatcher*, uint32_t*, size_t) = nullptr;
  int32_t (*consume_token)(LlgMatcher*, uint32_t) = nullptr;
  bool (*is_stopped)(const LlgMatcher*) = nullptr;
  bool (*is_accepting)(LlgMatcher*) = nullptr;
  const char* (*get_version)() = nullptr;
};

std::mutex& api_mutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::optional<std::string>& chosen_path() {
  static auto* p = new std::optional<std::string>;
  return *p;
}
Api*& loaded_api() {  // never unloaded (matchers may live to the end of the process)
  static Api* api = nullptr;
  return api;
}

constexpr const char* kInstallHint =
    "install it with `pip install llguidance` into the project's .venv (scripts/setup.sh does), or name the "
    "library with TESSERA_LLGUIDANCE=/path/to/llguidance/_lib.abi3.so";

// The wheel's library is a CPython extension: beside the C API it holds a Python module whose references to
// the interpreter's symbols must resolve when it is loaded, although the C API never calls them. In a Python
// process they are there; elsewhere the shared libpython is loaded first (no interpreter is started).
bool ensure_python_symbols(std::string& why) {
  if (::dlsym(RTLD_DEFAULT, "PyBaseObject_Type") != nullptr) return true;
  std::string tried;
  for (int minor = 14; minor >= 8; --minor) {
    const std::string name = "libpython3." + std::to_string(minor) + ".so.1.0";
    if (::dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr) return true;
    tried += (tried.empty() ? "" : ", ") + name;
  }
  why = "llguidance's library needs a shared libpython3 to load (apt-get install libpython3.11); tried " +
        tried;
  return false;
}

template <typename F>
bool sym(Api& a, F& f, const char* name) {
  f = reinterpret_cast<F>(::dlsym(a.handle, name));
  if (f == nullptr) a.error = a.path + ": no symbol " + name + " (an llguidance older than 1.0?)";
  return f != nullptr;
}

Api* load_api(std::string& why) {
  std::lock_guard<std::mutex> lock(api_mutex());
  if (Api* a = loaded_api()) return a;
  std::string path;
  if (chosen_path()) {
    path = *chosen_path();
  } else {
    std::vector<std::string> looked;
    auto found = pjrt::find_in_site_packages({"llguidance/_lib.abi3.so", "llguidance/_lib*.so"}, looked);
    if (!found) {
      std::ostringstream os;
      for (size_t i = 0; i < looked.size(); ++i) os << (i ? ", " : "") << looked[i];
      why = std::string("constrained decoding needs llguidance, which is not installed: ") + kInstallHint +
            " (looked in: " + os.str() + ")";
      return nullptr;
    }
    path = *found;
  }
  if (!ensure_python_symbols(why)) return nullptr;
  auto a = std::make_unique<Api>();
  a->path = path;
  a->handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (a->handle == nullptr) {
    const char* e = ::dlerror();
    why = "llguidance: " + path + ": dlopen failed: " + (e ? e : "unknown error") + " (" + kInstallHint + ")";
    return nullptr;
  }
  const bool ok =
      sym(*a, a->new_tokenizer_v2, "llg_new_tokenizer_v2") &&
      sym(*a, a->free_tokenizer, "llg_free_tokenizer") &&
      sym(*a, a->init_defaults, "llg_constraint_init_set_defaults") &&
      sym(*a, a->new_matcher, "llg_new_matcher") && sym(*a, a->clone_matcher, "llg_clone_matcher") &&
      sym(*a, a->free_matcher, "llg_free_matcher") && sym(*a, a->matcher_error, "llg_matcher_get_error") &&
      sym(*a, a->mask_byte_size, "llg_matcher_get_mask_byte_size") &&
      sym(*a, a->compute_mask_into, "llg_matcher_compute_mask_into") &&
      sym(*a, a->consume_token, "llg_matcher_consume_token") &&
      sym(*a, a->is_stopped, "llg_matcher_is_stopped") &&
      sym(*a, a->is_accepting, "llg_matcher_is_accepting") && sym(*a, a->get_version, "llg_get_version");
  if (!ok) {
    why = "llguidance: " + a->error;
    return nullptr;  // the handle stays open: harmless, and a retry finds the same answer
  }
  a->version = a->get_version() ? a->get_version() : "";
  loaded_api() = a.release();
  return loaded_api();
}

const Api& api() {
  std::string why;
  const Api* a = load_api(why);
  if (a == nullptr) fail(why);
  return *a;
}

const char* constraint_type(ConstraintKind k) {
  switch (k) {
    case ConstraintKind::JsonSchema:
      return "json_schema";
    case ConstraintKind::JsonObject:
      return "json_object";
    case ConstraintKind::Regex:
      return "regex";
    case ConstraintKind::Grammar:
      return "lark";
  }
  return "?";
}

// A JSON schema (json_object: {"type": "object"}) with llguidance's whitespace bounded, unless the schema
// sets its own "x-guidance": at most kJsonWhitespace whitespace characters wherever JSON allows whitespace
// (enough for indented output), so a sampled row cannot spend its whole budget on blank lines inside a
// structure, which unbounded whitespace allows.
constexpr const char* kJsonWhitespace = "[\\x20\\x0A\\x0D\\x09]{1,24}";
std::string json_with_bounded_whitespace(ConstraintKind kind, const std::string& text) {
  if (kind != ConstraintKind::JsonSchema && kind != ConstraintKind::JsonObject) return text;
  nlohmann::json schema;
  if (kind == ConstraintKind::JsonObject) {
    schema = {{"type", "object"}};
  } else {
    try {
      schema = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
      return text;  // llguidance names what is wrong with it
    }
    if (!schema.is_object()) return text;
    generation::drop_no_op_schema_keywords(schema);
  }
  if (!schema.contains("x-guidance")) schema["x-guidance"] = {{"whitespace_pattern", kJsonWhitespace}};
  return schema.dump();
}

}  // namespace

const char* constraint_kind_name(ConstraintKind k) {
  return k == ConstraintKind::Grammar ? "grammar" : constraint_type(k);
}

void ConstraintLibrary::set_library(std::optional<std::string> path) {
  std::lock_guard<std::mutex> lock(api_mutex());
  chosen_path() = std::move(path);
}
bool ConstraintLibrary::available(std::string* why) {
  std::string w;
  const bool ok = load_api(w) != nullptr;
  if (why) *why = w;
  return ok;
}
std::string ConstraintLibrary::version() {
  std::string w;
  const Api* a = load_api(w);
  return a ? a->version : "";
}
std::string ConstraintLibrary::path() {
  std::string w;
  const Api* a = load_api(w);
  return a ? a->path : "";
}

// ---------------------------------------------------------------- vocabulary

struct ConstraintVocabulary::Impl {
  Tokenizer tokenizer;
  int64_t vocab = 0;
  LlgTokenizer* llg = nullptr;
  explicit Impl(const Tokenizer& t) : tokenizer(t) {}
  ~Impl() {
    if (llg) api().free_tokenizer(llg);
  }
};

namespace {
// llguidance's tokenize callback (only bytes, no special tokens; it must not throw across the C boundary).
size_t tokenize_cb(const void* user, const uint8_t* bytes, size_t len, uint32_t* out, size_t out_len) {
  const auto* impl = static_cast<const ConstraintVocabulary::Impl*>(user);
  std::vector<int32_t> ids;
  try {
    ids = impl->tokenizer.encode(std::string_view(reinterpret_cast<const char*>(bytes), len), false);
  } catch (...) {
    return 0;
  }
  for (size_t i = 0; i < ids.size() && i < out_len; ++i) out[i] = static_cast<uint32_t>(ids[i]);
  return ids.size();
}
}  // namespace

ConstraintVocabulary::ConstraintVocabulary(const Tokenizer& tokenizer, int64_t model_vocab,
                                           const std::vector<int32_t>& eos_ids) {
  const Api& a = api();
  if (!tokenizer.decodes_bytes())
    fail(
        "constrained decoding: this tokenizer's decoder is not byte-level, so its tokens' bytes are unknown");
  const int64_t tok_vocab = tokenizer.vocab_size();
  if (model_vocab < tok_vocab)
    fail("constrained decoding: the model's vocabulary (", model_vocab, ") is smaller than the tokenizer's (",
         tok_vocab, ")");
  if (model_vocab > std::numeric_limits<int32_t>::max()) fail("constrained decoding: vocabulary too large");
  auto impl = std::make_shared<Impl>(tokenizer);
  impl->vocab = model_vocab;
  // Each id's bytes; special tokens (and ids the tokenizer does not know) as llguidance marks them: 0xFF then
  // a name, so text never matches them.
  std::vector<uint32_t> lens(static_cast<size_t>(model_vocab));
  std::string bytes;
  for (int64_t id = 0; id < model_vocab; ++id) {
    const auto i = static_cast<int32_t>(id);
    const size_t before = bytes.size();
    std::string b = id < tok_vocab ? tokenizer.token_bytes(i, false) : std::string();
    if (b.empty() || tokenizer.is_special(i)) {
      bytes.push_back('\xff');
      bytes += b.empty() ? "<[" + std::to_string(id) + "]>" : b;
    } else {
      bytes += b;
    }
    lens[static_cast<size_t>(id)] = static_cast<uint32_t>(bytes.size() - before);
  }
  std::vector<uint32_t> eos;
  for (int32_t e : eos_ids)
    if (e >= 0 && e < model_vocab) eos.push_back(static_cast<uint32_t>(e));
  if (eos.empty())
    if (auto e = tokenizer.eos_token_id(); e && *e >= 0 && *e < model_vocab)
      eos.push_back(static_cast<uint32_t>(*e));
  if (eos.empty())
    fail("constrained decoding: the model has no end-of-sequence token to end a constrained row");
  LlgTokenizerInitV2 init{};
  init.struct_size = sizeof init;
  init.vocab_size = static_cast<uint32_t>(model_vocab);
  init.tok_eos = eos[0];
  init.token_lens = lens.data();
  init.token_bytes = reinterpret_cast<const uint8_t*>(bytes.data());
  init.tokenize_assumes_string = true;
  init.tokenize_fn = tokenize_cb;
  init.tokenize_user_data = impl.get();
  init.tok_eos_extra = eos.size() > 1 ? eos.data() + 1 : nullptr;
  init.tok_eos_extra_count = static_cast<uint32_t>(eos.size() - 1);
  char err[1024] = {};
  impl->llg = a.new_tokenizer_v2(&init, err, sizeof err);
  if (impl->llg == nullptr) fail("constrained decoding: llguidance refused the tokenizer: ", err);
  impl_ = std::move(impl);
}

ConstraintVocabulary::~ConstraintVocabulary() = default;
int64_t ConstraintVocabulary::vocab_size() const { return impl_->vocab; }

// ---------------------------------------------------------------- constraints

struct Constraint::Impl {
  std::shared_ptr<ConstraintVocabulary::Impl> vocab;  // outlives the matchers made with it
  ConstraintKind kind = ConstraintKind::JsonSchema;
  std::string source;
  double seconds = 0;
  LlgMatcher* prototype = nullptr;  // the initial state; rows clone it
  ~Impl() {
    if (prototype) api().free_matcher(prototype);
  }
};

Constraint::Constraint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Constraint::~Constraint() = default;
ConstraintKind Constraint::kind() const { return impl_->kind; }
const std::string& Constraint::source() const { return impl_->source; }
int64_t Constraint::vocab_size() const { return impl_->vocab->vocab; }
double Constraint::compile_seconds() const { return impl_->seconds; }

std::shared_ptr<const Constraint> ConstraintVocabulary::compile(ConstraintKind kind,
                                                                std::string_view text) const {
  const Api& a = api();
  if (text.find('\0') != std::string_view::npos)
    fail("constrained decoding: the ", constraint_kind_name(kind), " holds a NUL character");
  auto impl = std::make_unique<Constraint::Impl>();
  impl->vocab = impl_;
  impl->kind = kind;
  impl->source = std::string(text);
  LlgConstraintInit init{};
  a.init_defaults(&init, impl_->llg);
  init.log_stderr_level = 0;  // errors come back through llg_matcher_get_error
  init.log_buffer_level = 0;
  init.limits.verbose_errors = false;  // one-line messages, without the grammar echoed back
  const auto t0 = std::chrono::steady_clock::now();
  const std::string data = json_with_bounded_whitespace(kind, impl->source);
  const char* type = kind == ConstraintKind::Regex     ? "regex"
                     : kind == ConstraintKind::Grammar ? "lark"
                                                       : "json";
  impl->prototype = a.new_matcher(&init, type, data.c_str());
  impl->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (impl->prototype == nullptr) fail("constrained decoding: llguidance returned no matcher");
  if (const char* e = a.matcher_error(impl->prototype)) {
    std::string msg(e);
    for (char& c : msg)
      if (c == '\n' || c == '\r') c = ' ';
    fail("invalid ", constraint_kind_name(kind), ": ", msg);
  }
  return std::make_shared<const Constraint>(std::move(impl));
}

// ---------------------------------------------------------------- a row's state

namespace generation {

namespace {
void drop_no_op(nlohmann::json& schema, int depth) {
  if (!schema.is_object() || depth > 64) return;
  if (auto it = schema.find("uniqueItems"); it != schema.end() && it->is_boolean() && !it->get<bool>())
    schema.erase(it);
  for (const char* k : {"items", "additionalProperties", "not", "if", "then", "else", "contains",
                        "additionalItems", "unevaluatedProperties", "unevaluatedItems", "propertyNames"})
    if (auto it = schema.find(k); it != schema.end()) drop_no_op(*it, depth + 1);
  for (const char* k : {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
    if (auto it = schema.find(k); it != schema.end() && it->is_object())
      for (auto& [name, sub] : it->items()) drop_no_op(sub, depth + 1);
  for (const char* k : {"anyOf", "oneOf", "allOf", "prefixItems"})
    if (auto it = schema.find(k); it != schema.end() && it->is_array())
      for (auto& sub : *it) drop_no_op(sub, depth + 1);
}
}  // namespace

void drop_no_op_schema_keywords(nlohmann::json& schema) { drop_no_op(schema, 0); }

ConstraintMatcher::ConstraintMatcher(std::shared_ptr<const Constraint> c) : constraint_(std::move(c)) {
  const Api& a = api();
  matcher_ = a.clone_matcher(constraint_->impl().prototype);
  if (matcher_ == nullptr) fail("constrained decoding: llguidance could not clone a matcher");
  mask_.assign(a.mask_byte_size(static_cast<const LlgMatcher*>(matcher_)) / sizeof(uint32_t), 0);
}

ConstraintMatcher::~ConstraintMatcher() {
  if (matcher_) api().free_matcher(static_cast<LlgMatcher*>(matcher_));
}

void ConstraintMatcher::compute_mask() {
  const Api& a = api();
  auto* m = static_cast<LlgMatcher*>(matcher_);
  if (a.compute_mask_into(m, mask_.data(), mask_.size() * sizeof(uint32_t)) != 0) {
    // An error state allows nothing but the end: the row stops rather than produce unconstrained text.
    const char* e = a.matcher_error(m);
    error_ = e ? e : "llguidance failed to compute a mask";
    std::fill(mask_.begin(), mask_.end(), 0u);
  }
  ready_ = true;
}

void ConstraintMatcher::apply(float* logits, int64_t vocab) {
  if (!ready_) compute_mask();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t words = std::min<int64_t>(static_cast<int64_t>(mask_.size()), (vocab + 31) / 32);
  for (int64_t w = 0; w < words; ++w) {
    const uint32_t bits = mask_[static_cast<size_t>(w)];
    if (bits == 0xffffffffu) continue;
    const int64_t end = std::min<int64_t>(vocab, (w + 1) * 32);
    for (int64_t i = w * 32; i < end; ++i)
      if (!((bits >> (i - w * 32)) & 1u)) logits[i] = kNegInf;
  }
  for (int64_t i = words * 32; i < vocab; ++i) logits[i] = kNegInf;
  ready_ = false;
}

void ConstraintMatcher::write_mask(int32_t* dst, int64_t words) {
  if (!ready_) compute_mask();
  const int64_t n = std::min<int64_t>(words, static_cast<int64_t>(mask_.size()));
  std::memcpy(dst, mask_.data(), static_cast<size_t>(n) * sizeof(uint32_t));
  std::fill(dst + n, dst + words, 0);
  ready_ = false;
}

bool ConstraintMatcher::allows_any() const {
  for (uint32_t w : mask_)
    if (w) return true;
  return false;
}

void ConstraintMatcher::consume(int32_t token) {
  const Api& a = api();
  auto* m = static_cast<LlgMatcher*>(matcher_);
  ready_ = false;
  if (!error_.empty()) return;
  if (a.consume_token(m, static_cast<uint32_t>(token)) != 0) {
    const char* e = a.matcher_error(m);
    error_ = e ? e : "llguidance refused the token";
  }
}

bool ConstraintMatcher::done() const {
  return !error_.empty() || api().is_stopped(static_cast<const LlgMatcher*>(matcher_));
}

}  // namespace generation
}  // namespace tessera
