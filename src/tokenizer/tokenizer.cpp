// Tokenizer: loading tokenizer.json / tokenizer_config.json / GGUF metadata
// and the encode/decode pipeline (HF order: added tokens on raw text ->
// normalize -> added tokens on normalized text -> pre-tokenize -> BPE ->
// post-process).
#include "tessera/tokenizer.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "io/io_util.h"
#include "io/json_util.h"
#include "tessera/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/unicode_util.h"

namespace tessera {

using json = nlohmann::json;
using namespace tok;

struct Tokenizer::Impl {
  std::string name;  // file name for messages
  Normalizer normalizer;
  PreTokenizer pre;
  std::unique_ptr<BpeModel> model;
  AddedMatcher raw_matcher;   // added tokens with normalized == false
  AddedMatcher norm_matcher;  // added tokens with normalized == true (patterns normalized)
  std::unordered_map<int32_t, AddedToken> added_by_id;
  StringIdMap added_by_content;
  PostProcessor post;
  enum class Decoder { kByteLevel, kJoinWithSpace } decoder = Decoder::kJoinWithSpace;
  std::optional<int32_t> bos, eos, pad;
  std::string chat_template;
  int32_t vocab_size = 0;

  void finish_added_tokens();
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  void encode_normalized(std::string_view text, PreTokScratch& st, std::vector<int32_t>& out) const;
  bool token_bytes(int32_t id, bool skip_special, std::string& out) const;
};

namespace {

// Every read below names the file and the JSON path of the field (e.g.
// `tokenizer.json: pre_tokenizer.pretokenizers[1].pattern: ...`), so a wrong type
// in a hostile or hand-edited file never surfaces as a raw nlohmann message.
std::string key_path(const std::string& path, const char* key) {
  return path.empty() ? key : path + "." + key;
}
std::string index_path(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }
std::string member_path(const std::string& path, const std::string& key) {
  return path + "[\"" + io::printable(key, 80) + "\"]";
}

[[noreturn]] void type_error(const std::string& file, const std::string& path, const json& v,
                             const char* expected) {
  fail(file, ": ", path, ": expected ", expected, ", got a JSON ", v.type_name());
}

// obj[key], nullptr when absent or null (HF writes null for "not set").
const json* field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

const json& required(const json& obj, const char* key, const std::string& file, const std::string& path) {
  if (!obj.is_object()) type_error(file, path, obj, "an object");
  const json* v = field(obj, key);
  if (!v) fail(file, ": ", key_path(path, key), " is missing");
  return *v;
}

const json& required_array(const json& obj, const char* key, const std::string& file,
                           const std::string& path) {
  const json& v = required(obj, key, file, path);
  if (!v.is_array()) type_error(file, key_path(path, key), v, "an array");
  return v;
}

const std::string& as_string(const json& v, const std::string& file, const std::string& path) {
  if (!v.is_string()) type_error(file, path, v, "a string");
  return v.get_ref<const std::string&>();
}

std::string required_string(const json& obj, const char* key, const std::string& file,
                            const std::string& path) {
  return as_string(required(obj, key, file, path), file, key_path(path, key));
}

std::optional<std::string> optional_string(const json& obj, const char* key, const std::string& file,
                                           const std::string& path) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  return as_string(*v, file, key_path(path, key));
}

bool get_bool(const json& obj, const char* key, bool dflt, const std::string& file, const std::string& path) {
  const json* v = field(obj, key);
  if (!v) return dflt;
  if (!v->is_boolean()) type_error(file, key_path(path, key), *v, "true or false");
  return v->get<bool>();
}

// A token id: an integer in [0, 2^31); anything else is an input error
// (a float or huge number must not reach a narrowing cast).
bool id_ok(const json& v, int32_t* out) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > INT32_MAX) return false;
  } else if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
    return false;
  }
  *out = static_cast<int32_t>(v.get<int64_t>());
  return true;
}
int32_t get_id(const json& v, const std::string& file, const std::string& path) {
  int32_t id = 0;
  if (id_ok(v, &id)) return id;
  if (!v.is_number_integer())
    fail(file, ": ", path, ": token id must be an integer, got ", io::printable(v.dump(), 80));
  fail(file, ": ", path, ": token id ", v.dump(), " is out of range [0, 2^31)");
}

// A decimal token id used as an object key (tokenizer_config.json added_tokens_decoder).
int32_t id_from_key(const std::string& key, const std::string& file, const std::string& path) {
  bool ok = !key.empty() && key.size() <= 10;
  int64_t x = 0;
  for (char c : key) {
    if (c < '0' || c > '9') ok = false;
    if (ok) x = x * 10 + (c - '0');
  }
  if (!ok || x > INT32_MAX)
    fail(file, ": ", member_path(path, key), ": key must be a token id (0 to 2^31-1)");
  return static_cast<int32_t>(x);
}

// Sequences nest; bound the recursion so hostile files cannot exhaust the stack.
constexpr int kMaxDepth = 32;
void check_depth(int depth, const std::string& name) {
  if (depth > kMaxDepth) fail(name, ": components nested deeper than ", kMaxDepth, " levels");
}

std::string type_of(const json& node, const std::string& name, const std::string& path) {
  if (!node.is_object()) type_error(name, path, node, "an object");
  const json* t = field(node, "type");
  if (!t || !t->is_string()) fail(name, ": ", path, " has no \"type\" string");
  return t->get<std::string>();
}

// ---------------------------------------------------------------- normalizer
void parse_normalizer(const json& node, const std::string& name, const std::string& path, Normalizer& out,
                      int depth = 0) {
  check_depth(depth, name);
  const std::string type = type_of(node, name, path);
  if (type == "Sequence") {
    const json& list = required_array(node, "normalizers", name, path);
    for (size_t i = 0; i < list.size(); ++i)
      parse_normalizer(list[i], name, index_path(key_path(path, "normalizers"), i), out, depth + 1);
  } else if (type == "NFC") {
    out.steps.push_back(Normalizer::Kind::kNFC);
  } else if (type == "NFD") {
    out.steps.push_back(Normalizer::Kind::kNFD);
  } else if (type == "NFKC") {
    out.steps.push_back(Normalizer::Kind::kNFKC);
  } else if (type == "NFKD") {
    out.steps.push_back(Normalizer::Kind::kNFKD);
  } else if (type == "Lowercase") {
    out.steps.push_back(Normalizer::Kind::kLowercase);
  } else {
    fail(name, ": normalizer type '", io::printable(type),
         "' is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Sequence)");
  }
}

// ------------------------------------------------------------- pre-tokenizer
SplitBehavior parse_behavior(const std::string& b, const std::string& name) {
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  fail(name, ": Split behavior '", io::printable(b), "' is unknown");
}

void parse_pre_tokenizer(const json& node, const std::string& name, const std::string& path,
                         PreTokenizer& out, int depth = 0) {
  check_depth(depth, name);
  const std::string type = type_of(node, name, path);
  if (type != "Sequence" && out.byte_level) {
    fail(name, ": pre_tokenizer '", io::printable(type), "' after ByteLevel is not supported");
  }
  PreTokStep step;
  if (type == "Sequence") {
    const json& list = required_array(node, "pretokenizers", name, path);
    for (size_t i = 0; i < list.size(); ++i)
      parse_pre_tokenizer(list[i], name, index_path(key_path(path, "pretokenizers"), i), out, depth + 1);
    return;
  } else if (type == "Split") {
    const json& pat = required(node, "pattern", name, path);
    const std::string pat_path = key_path(path, "pattern");
    std::string re;
    if (const json* r = field(pat, "Regex")) {
      re = as_string(*r, name, key_path(pat_path, "Regex"));
    } else if (const json* s = field(pat, "String")) {
      re = regex_quote(as_string(*s, name, key_path(pat_path, "String")));
    } else {
      fail(name, ": Split pattern must be {\"Regex\": ...} or {\"String\": ...}");
    }
    step.regex = std::make_shared<Regex>(re, name + ": pre_tokenizer Split");
    step.behavior = parse_behavior(required_string(node, "behavior", name, path), name);
    step.invert = get_bool(node, "invert", false, name, path);
  } else if (type == "Digits") {
    step.regex =
        std::make_shared<Regex>(get_bool(node, "individual_digits", false, name, path) ? "\\p{N}" : "\\p{N}+",
                                name + ": pre_tokenizer Digits");
  } else if (type == "ByteLevel") {
    step.kind = PreTokStep::Kind::kByteLevel;
    step.add_prefix_space = get_bool(node, "add_prefix_space", true, name, path);
    if (get_bool(node, "use_regex", true, name, path))
      step.regex = std::make_shared<Regex>(gpt2_split_regex(), "GPT-2 regex");
    out.byte_level = true;
  } else {
    fail(name, ": pre_tokenizer type '", io::printable(type),
         "' is not supported (supported: Split, ByteLevel, Digits, Sequence)");
  }
  out.steps.push_back(std::move(step));
}

// ------------------------------------------------------------------- decoder
Tokenizer::Impl::Decoder parse_decoder(const json* node, const std::string& name, const std::string& path,
                                       int depth = 0) {
  check_depth(depth, name);
  if (node == nullptr) return Tokenizer::Impl::Decoder::kJoinWithSpace;
  const std::string type = type_of(*node, name, path);
  if (type == "ByteLevel") return Tokenizer::Impl::Decoder::kByteLevel;
  if (type == "Sequence") {
    const json& list = required_array(*node, "decoders", name, path);
    if (list.size() == 1)
      return parse_decoder(&list[0], name, index_path(key_path(path, "decoders"), 0), depth + 1);
  }
  fail(name, ": decoder type '", io::printable(type), "' is not supported (supported: ByteLevel)");
}

// ------------------------------------------------------------ post-processor
void parse_post_processor(const json& node, const std::string& name, const std::string& path,
                          PostProcessor& out, int depth = 0) {
  check_depth(depth, name);
  const std::string type = type_of(node, name, path);
  if (type == "Sequence") {
    const json& list = required_array(node, "processors", name, path);
    for (size_t i = 0; i < list.size(); ++i)
      parse_post_processor(list[i], name, index_path(key_path(path, "processors"), i), out, depth + 1);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets.
  } else if (type == "TemplateProcessing") {
    PostProcessor t;
    bool seen_seq = false;
    const json& single = required_array(node, "single", name, path);
    const json& specials = required(node, "special_tokens", name, path);
    const std::string sp_path = key_path(path, "special_tokens");
    if (!specials.is_object()) type_error(name, sp_path, specials, "an object");
    for (size_t i = 0; i < single.size(); ++i) {
      const json& item = single[i];
      const std::string item_path = index_path(key_path(path, "single"), i);
      if (const json* sp = field(item, "SpecialToken")) {
        const std::string key = required_string(*sp, "id", name, key_path(item_path, "SpecialToken"));
        const json* tok = field(specials, key.c_str());
        if (!tok)
          fail(name, ": TemplateProcessing uses special token '", io::printable(key),
               "' missing from special_tokens");
        const std::string tok_path = member_path(sp_path, key);
        const json& ids = required_array(*tok, "ids", name, tok_path);
        for (size_t k = 0; k < ids.size(); ++k)
          (seen_seq ? t.suffix : t.prefix)
              .push_back(get_id(ids[k], name, index_path(key_path(tok_path, "ids"), k)));
      } else if (field(item, "Sequence")) {
        if (seen_seq) fail(name, ": TemplateProcessing single template with two sequences");
        seen_seq = true;
      } else {
        fail(name, ": ", item_path, ": TemplateProcessing item is neither SpecialToken nor Sequence");
      }
    }
    out = std::move(t);
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto pair_id = [&](const char* key) {
      const json& v = required(node, key, name, path);
      if (!v.is_array() || v.size() != 2) type_error(name, key_path(path, key), v, "a [token, id] pair");
      return get_id(v[1], name, index_path(key_path(path, key), 1));
    };
    out.prefix = {pair_id("cls")};
    out.suffix = {pair_id("sep")};
  } else {
    fail(name, ": post_processor type '", io::printable(type),
         "' is not supported (supported: TemplateProcessing, ByteLevel, "
         "RobertaProcessing, BertProcessing, Sequence)");
  }
}

// --------------------------------------------------------------------- model
std::unique_ptr<BpeModel> parse_model(const json& m, bool byte_level, const std::string& name) {
  const std::string type = optional_string(m, "type", name, "model").value_or("BPE");
  if (type != "BPE") fail(name, ": model type '", io::printable(type), "' is not supported (supported: BPE)");
  if (get_bool(m, "byte_fallback", false, name, "model"))
    fail(name, ": BPE byte_fallback=true is not supported");
  if (const json* d = field(m, "dropout")) {
    if (!d->is_number()) type_error(name, "model.dropout", *d, "a number or null");
    if (d->get<double>() != 0.0)
      fail(name, ": BPE dropout=", d->get<double>(), " is not supported (must be null or 0)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (auto v = optional_string(m, key, name, "model"); v && !v->empty()) {
      fail(name, ": BPE ", key, "='", io::printable(*v), "' is not supported (must be empty)");
    }
  }
  StringIdMap vocab;
  const json& v = required(m, "vocab", name, "model");
  if (!v.is_object()) fail(name, ": model.vocab must be an object");
  vocab.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it) {
    int32_t id = 0;
    if (!id_ok(it.value(), &id)) get_id(it.value(), name, member_path("model.vocab", it.key()));  // throws
    vocab[it.key()] = id;
  }

  std::vector<std::pair<std::string, std::string>> merges;
  if (const json* ms = field(m, "merges")) {
    if (!ms->is_array()) type_error(name, "model.merges", *ms, "an array");
    merges.reserve(ms->size());
    for (size_t i = 0; i < ms->size(); ++i) {
      const json& mg = (*ms)[i];
      if (mg.is_string()) {
        const std::string& s = mg.get_ref<const std::string&>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          fail(name, ": merge '", io::printable(s), "' is not of the form 'a b'");
        }
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
        merges.emplace_back(mg[0].get<std::string>(), mg[1].get<std::string>());
      } else {
        fail(name, ": ", index_path("model.merges", i), ": merge entry ", io::printable(mg.dump(), 80),
             " is neither \"a b\" nor [a, b]");
      }
    }
  }
  BpeOptions opts;
  opts.unk_token = optional_string(m, "unk_token", name, "model");
  opts.fuse_unk = get_bool(m, "fuse_unk", false, name, "model");
  opts.ignore_merges = get_bool(m, "ignore_merges", false, name, "model");
  opts.byte_level = byte_level;
  return std::make_unique<BpeModel>(std::move(vocab), merges, opts, name);
}

// One added token (tokenizer.json added_tokens[i], or a tokenizer_config.json
// added_tokens_decoder entry whose id comes from its key).
AddedToken parse_added_token(const json& t, std::optional<int32_t> id, const std::string& file,
                             const std::string& path) {
  if (!t.is_object()) type_error(file, path, t, "an object");
  AddedToken a;
  a.id = id ? *id : get_id(required(t, "id", file, path), file, key_path(path, "id"));
  a.content = required_string(t, "content", file, path);
  a.single_word = get_bool(t, "single_word", false, file, path);
  a.lstrip = get_bool(t, "lstrip", false, file, path);
  a.rstrip = get_bool(t, "rstrip", false, file, path);
  a.special = get_bool(t, "special", false, file, path);
  a.normalized = get_bool(t, "normalized", !a.special, file, path);
  return a;
}

// A token in tokenizer_config.json: a string or an AddedToken dict.
std::optional<std::string> config_token(const json& cfg, const char* key, const std::string& file) {
  const json* v = field(cfg, key);
  if (!v) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) return optional_string(*v, "content", file, key);
  type_error(file, key, *v, "a string or an {\"content\": ...} object");
}

std::string config_chat_template(const json& cfg, const std::string& name) {
  const json* t = field(cfg, "chat_template");
  if (!t) return "";
  if (t->is_string()) return t->get<std::string>();
  if (t->is_array()) {
    for (size_t i = 0; i < t->size(); ++i) {
      const json& e = (*t)[i];
      const std::string path = index_path("chat_template", i);
      if (!e.is_object()) type_error(name, path, e, "a {name, template} object");
      if (optional_string(e, "name", name, path).value_or("") == "default")
        return required_string(e, "template", name, path);
    }
    fail(name, ": chat_template list has no entry named 'default'");
  }
  fail(name, ": chat_template must be a string or a list of {name, template}");
}

}  // namespace

// ----------------------------------------------------------------- Impl

void Tokenizer::Impl::finish_added_tokens() {
  raw_matcher = AddedMatcher();
  norm_matcher = AddedMatcher();
  added_by_content.clear();
  // HF registers special tokens first, then the others.
  std::vector<const AddedToken*> order;
  for (const auto& [id, t] : added_by_id) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const AddedToken* a, const AddedToken* b) {
    return a->special != b->special ? a->special : a->id < b->id;
  });
  for (const AddedToken* t : order) {
    added_by_content.emplace(t->content, t->id);
    AddedToken& mut = added_by_id.at(t->id);
    mut.surface = t->content;
    if (t->normalized) {
      std::string normed;
      if (normalizer.apply(t->content, normed)) mut.surface = normed;
      norm_matcher.add(*t, mut.surface);
    } else {
      raw_matcher.add(*t, t->content);
    }
  }
  int32_t max_id = model->max_id();
  for (const auto& [id, t] : added_by_id) max_id = std::max(max_id, id);
  // Distinct ids of the model vocabulary and the added tokens.
  size_t extra = 0;
  for (const auto& [id, t] : added_by_id) {
    if (model->id_to_token(id) == nullptr) ++extra;
  }
  vocab_size = static_cast<int32_t>(model->size() + extra);
}

void Tokenizer::Impl::encode_normalized(std::string_view text, PreTokScratch& st,
                                        std::vector<int32_t>& out) const {
  pre.apply(text, st);
  for (const Span& w : st.pieces)
    model->tokenize(std::string_view(st.buf).substr(w.begin, w.end - w.begin), out);
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  PreTokScratch st;
  std::vector<Segment> raw_segs, norm_segs;
  if (raw_matcher.empty()) {
    raw_segs.push_back({0, text.size(), -1});
  } else {
    raw_matcher.split(text, raw_segs);
  }
  std::string normed;
  for (const Segment& s : raw_segs) {
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    std::string_view piece = text.substr(s.begin, s.end - s.begin);
    if (piece.empty()) continue;
    if (normalizer.apply(piece, normed)) piece = normed;
    if (norm_matcher.empty()) {
      encode_normalized(piece, st, out);
      continue;
    }
    norm_segs.clear();
    norm_matcher.split(piece, norm_segs);
    for (const Segment& n : norm_segs) {
      if (n.id >= 0) {
        out.push_back(n.id);
      } else {
        encode_normalized(piece.substr(n.begin, n.end - n.begin), st, out);
      }
    }
  }
}

bool Tokenizer::Impl::token_bytes(int32_t id, bool skip_special, std::string& out) const {
  const std::string* tok = nullptr;
  if (auto it = added_by_id.find(id); it != added_by_id.end()) {
    if (skip_special && it->second.special) return false;
    tok = &it->second.surface;
  } else {
    tok = model->id_to_token(id);
  }
  if (tok == nullptr) return false;  // unknown ids are skipped, as HF does
  // ByteLevel decoder: a token whose characters are all in the byte alphabet
  // becomes those bytes; any other token is kept as written.
  if (decoder == Decoder::kByteLevel && byte_level_decode(*tok, out)) return true;
  out += *tok;
  return true;
}

// -------------------------------------------------------------- Tokenizer

Tokenizer::Tokenizer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::from_json_string(std::string_view tokenizer_json, std::string_view config_json,
                                      const std::string& name) {
  return from_json_strings(tokenizer_json, config_json, name, name + " (tokenizer_config.json)");
}

Tokenizer Tokenizer::from_json_strings(std::string_view tokenizer_json, std::string_view config_json,
                                       const std::string& name, const std::string& cfg_name) {
  const json j = io::parse_json(tokenizer_json, name);
  const json cfg = config_json.empty() ? json::object() : io::parse_json(config_json, cfg_name);
  auto impl = std::make_shared<Impl>();
  impl->name = name;
  try {
    if (!j.is_object()) fail(name, ": top level must be a JSON object");
    if (!cfg.is_object()) fail(cfg_name, ": top level must be a JSON object, got a JSON ", cfg.type_name());
    const json* model = field(j, "model");
    if (!model) fail(name, ": missing \"model\"");
    if (!model->is_object()) type_error(name, "model", *model, "an object");
    if (auto t = optional_string(*model, "type", name, "model"); t && *t != "BPE") {
      fail(name, ": model type '", io::printable(*t), "' is not supported (supported: BPE)");
    }
    if (const json* n = field(j, "normalizer")) parse_normalizer(*n, name, "normalizer", impl->normalizer);
    if (const json* p = field(j, "pre_tokenizer")) parse_pre_tokenizer(*p, name, "pre_tokenizer", impl->pre);
    impl->model = parse_model(*model, impl->pre.byte_level, name);
    impl->decoder = parse_decoder(field(j, "decoder"), name, "decoder");
    if (const json* pp = field(j, "post_processor"))
      parse_post_processor(*pp, name, "post_processor", impl->post);
    if (const json* at = field(j, "added_tokens")) {
      if (!at->is_array()) type_error(name, "added_tokens", *at, "an array");
      for (size_t i = 0; i < at->size(); ++i) {
        AddedToken a = parse_added_token((*at)[i], std::nullopt, name, index_path("added_tokens", i));
        impl->added_by_id[a.id] = std::move(a);
      }
    }
    // tokenizer_config.json may declare added tokens the json lacks (transformers adds them).
    if (const json* atd = field(cfg, "added_tokens_decoder")) {
      if (!atd->is_object()) type_error(cfg_name, "added_tokens_decoder", *atd, "an object");
      for (auto it = atd->begin(); it != atd->end(); ++it) {
        const int32_t id = id_from_key(it.key(), cfg_name, "added_tokens_decoder");
        AddedToken a =
            parse_added_token(it.value(), id, cfg_name, member_path("added_tokens_decoder", it.key()));
        if (!impl->added_by_id.count(id)) impl->added_by_id[id] = std::move(a);
      }
    }
    impl->finish_added_tokens();

    auto lookup = [&](const char* key) -> std::optional<int32_t> {
      const auto tok = config_token(cfg, key, cfg_name);
      if (!tok) return std::nullopt;
      Tokenizer probe(impl);
      return probe.token_to_id(*tok);
    };
    impl->bos = lookup("bos_token");
    impl->eos = lookup("eos_token");
    impl->pad = lookup("pad_token");
    impl->chat_template = config_chat_template(cfg, cfg_name);
    // add_bos_token/add_eos_token in tokenizer_config.json are deliberately
    // ignored: with a tokenizer.json present, transformers drops them too and
    // the file's post_processor decides (e.g. Llama 3's TemplateProcessing BOS).
  } catch (const json::exception& e) {
    // Every access above is type-checked; this is a last line of defence, not a message source.
    fail(name, ": unexpected structure (", io::printable(io::json_error_text(e), 200), ")");
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_json_file(const std::string& tokenizer_json) {
  const std::string text = io::read_regular_file(tokenizer_json, io::kMaxTokenizerFileBytes);
  const std::string dir = std::filesystem::path(tokenizer_json).parent_path().string();
  std::string cfg;
  const std::string cfg_path = io::path_join(dir, "tokenizer_config.json");
  if (io::path_exists(cfg_path)) cfg = io::read_regular_file(cfg_path, io::kMaxConfigFileBytes);
  Tokenizer t = from_json_strings(text, cfg, tokenizer_json, cfg_path);
  // Newer checkpoints keep the template in its own file, which takes priority (as in transformers).
  const std::string jinja = io::path_join(dir, "chat_template.jinja");
  if (io::path_exists(jinja)) t.impl_->chat_template = io::read_regular_file(jinja, io::kMaxConfigFileBytes);
  return t;
}

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  const std::string p = io::path_join(dir, "tokenizer.json");
  if (!io::path_exists(p)) fail(dir, ": no tokenizer.json in this directory");
  return from_json_file(p);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special_tokens) out.insert(out.end(), impl_->post.prefix.begin(), impl_->post.prefix.end());
  if (utf8_is_valid(text)) {
    impl_->encode_text(text, out);
  } else {
    std::string repaired;
    utf8_repair_append(text, repaired);
    impl_->encode_text(repaired, out);
  }
  if (add_special_tokens) out.insert(out.end(), impl_->post.suffix.begin(), impl_->post.suffix.end());
  return out;
}

std::string Tokenizer::token_bytes(int32_t id, bool skip_special_tokens) const {
  std::string out;
  impl_->token_bytes(id, skip_special_tokens, out);
  return out;
}

bool Tokenizer::decodes_bytes() const { return impl_->decoder == Impl::Decoder::kByteLevel; }

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string bytes;
  bool first = true;
  for (int32_t id : ids) {
    const size_t before = bytes.size();
    if (impl_->decoder == Impl::Decoder::kJoinWithSpace && !first) bytes.push_back(' ');
    if (impl_->token_bytes(id, skip_special_tokens, bytes)) {
      first = false;
    } else {
      bytes.resize(before);
    }
  }
  std::string out;
  utf8_repair_append(bytes, out);
  return out;
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return it->second;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end()) return it->second.surface;
  const std::string* t = impl_->model->id_to_token(id);
  return t ? *t : std::string();
}

std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_token_id() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::pad_token_id() const { return impl_->pad; }
std::string Tokenizer::bos_token() const { return impl_->bos ? id_to_token(*impl_->bos) : std::string(); }
std::string Tokenizer::eos_token() const { return impl_->eos ? id_to_token(*impl_->eos) : std::string(); }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

bool Tokenizer::is_special(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && it->second.special;
}

std::vector<int32_t> Tokenizer::special_token_ids() const {
  std::vector<int32_t> ids;
  for (const auto& [id, t] : impl_->added_by_id) {
    if (t.special) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

// ------------------------------------------------------------------- GGUF

Tokenizer Tokenizer::from_gguf(const GgufTokenizerData& d) {
  const std::string name = d.source.empty() ? "GGUF tokenizer" : d.source + " (GGUF tokenizer)";
  if (d.model != "gpt2") {
    fail(name, ": tokenizer.ggml.model '", d.model, "' is not supported (supported: gpt2)");
  }
  if (d.tokens.empty()) fail(name, ": tokenizer.ggml.tokens is missing or empty");
  if (d.tokens.size() > static_cast<size_t>(INT32_MAX))
    fail(name, ": tokenizer.ggml.tokens has ", d.tokens.size(),
         " entries, more than 32-bit token ids can index");
  if (!d.token_types.empty() && d.token_types.size() != d.tokens.size()) {
    fail(name, ": tokenizer.ggml.token_type has ", d.token_types.size(), " entries, expected ",
         d.tokens.size());
  }
  auto impl = std::make_shared<Impl>();
  impl->name = name;
  // Pre-tokenizer: the split regex transformers' GGUF converter picks for this
  // name, else GPT-2's ByteLevel with its own regex.
  const std::string split = gguf_pre_tokenizer_regex(d.pre);
  if (!split.empty()) {
    PreTokStep s;
    s.regex = std::make_shared<Regex>(split, name + ": pre-tokenizer '" + d.pre + "'");
    impl->pre.steps.push_back(std::move(s));
    PreTokStep b;
    b.kind = PreTokStep::Kind::kByteLevel;
    impl->pre.steps.push_back(std::move(b));
  } else {
    PreTokStep b;
    b.kind = PreTokStep::Kind::kByteLevel;
    b.regex = std::make_shared<Regex>(gpt2_split_regex(), "GPT-2 regex");
    impl->pre.steps.push_back(std::move(b));
  }
  impl->pre.byte_level = true;
  impl->decoder = Impl::Decoder::kByteLevel;

  // Tokens outside the byte alphabet are respelled byte by byte; a later
  // duplicate wins, as in the converter's dict.
  const ByteLevelTable& bl = byte_level_table();
  auto in_alphabet = [&](const std::string& t) {
    if (!utf8_is_valid(t)) return false;
    for (size_t i = 0; i < t.size();) {
      size_t len = 0;
      const uint32_t cp = utf8_decode_at(t, i, &len);
      if (cp >= bl.cp_to_byte.size() || bl.cp_to_byte[cp] < 0) return false;
      i += len;
    }
    return true;
  };
  StringIdMap vocab;
  vocab.reserve(d.tokens.size());
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    const std::string& t = d.tokens[i];
    vocab[in_alphabet(t) ? t : byte_level_encode(t)] = static_cast<int32_t>(i);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(d.merges.size());
  for (const std::string& m : d.merges) {
    const size_t sp = m.find(' ');
    if (sp == std::string::npos || m.find(' ', sp + 1) != std::string::npos) {
      fail(name, ": tokenizer.ggml.merges entry '", m, "' is not of the form 'a b'");
    }
    merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  BpeOptions opts;
  opts.byte_level = true;
  impl->model = std::make_unique<BpeModel>(std::move(vocab), merges, opts, name);

  // Control tokens (type 3) spelled in the byte alphabet become special added
  // tokens; user-defined ones (type 4) plain added tokens.
  for (size_t i = 0; i < d.token_types.size(); ++i) {
    const std::string& t = d.tokens[i];
    AddedToken a;
    a.content = t;
    if (d.token_types[i] == 3 && in_alphabet(t)) {
      a.special = true;
    } else if (d.token_types[i] != 4 || !impl->model->token_to_id(t)) {
      continue;
    }
    const auto id = impl->model->token_to_id(t);
    a.id = id ? *id : static_cast<int32_t>(i);
    if (!impl->added_by_id.count(a.id)) impl->added_by_id[a.id] = std::move(a);
  }
  impl->finish_added_tokens();

  auto valid_id = [&](std::optional<int32_t> id, const char* key) -> std::optional<int32_t> {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= d.tokens.size())) {
      fail(name, ": ", key, " ", *id, " is outside the vocabulary of ", d.tokens.size(), " tokens");
    }
    return id;
  };
  impl->bos = valid_id(d.bos_id, "tokenizer.ggml.bos_token_id");
  impl->eos = valid_id(d.eos_id, "tokenizer.ggml.eos_token_id");
  impl->pad = valid_id(d.pad_id, "tokenizer.ggml.padding_token_id");
  if (d.add_bos.value_or(false) && impl->bos) impl->post.prefix = {*impl->bos};
  if (d.add_eos.value_or(false) && impl->eos) impl->post.suffix = {*impl->eos};
  impl->chat_template = d.chat_template;
  return Tokenizer(std::move(impl));
}

// ---------------------------------------------------------- StreamDecoder

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(&tok), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::push(int32_t id) {
  const size_t before = pending_.size();
  if (tok_->impl_->decoder == Tokenizer::Impl::Decoder::kJoinWithSpace && !first_) pending_.push_back(' ');
  if (!tok_->impl_->token_bytes(id, skip_special_, pending_)) {
    pending_.resize(before);
    return "";
  }
  first_ = false;
  // Emit everything up to a trailing sequence that more bytes could complete.
  const size_t cut = utf8_incomplete_tail(pending_);
  std::string out;
  utf8_repair_append(std::string_view(pending_).substr(0, cut), out);
  pending_.erase(0, cut);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  utf8_repair_append(pending_, out);
  pending_.clear();
  return out;
}

}  // namespace tessera
