// Tokenizer: loading tokenizer.json / tokenizer_config.json / GGUF metadata
// and the encode/decode pipeline (HF order: added tokens on raw text ->
// normalize -> added tokens on normalized text -> pre-tokenize -> BPE ->
// post-process).
#include "tessera/tokenizer.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

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

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json parse_json(std::string_view text, const std::string& name) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    fail(name, ": malformed JSON: ", e.what());
  }
}

const json* field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

bool get_bool(const json& obj, const char* key, bool dflt) {
  const json* v = field(obj, key);
  return v ? v->get<bool>() : dflt;
}

// A token id: an integer in [0, 2^31); anything else is an input error
// (a float or huge number must not reach a narrowing cast).
int32_t get_id(const json& v, const std::string& name, const char* what) {
  if (!v.is_number_integer()) fail(name, ": ", what, " must be an integer, got ", v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < 0 || x > INT32_MAX) fail(name, ": ", what, " ", x, " is out of range");
  return static_cast<int32_t>(x);
}

// Sequences nest; bound the recursion so hostile files cannot exhaust the stack.
constexpr int kMaxDepth = 32;
void check_depth(int depth, const std::string& name) {
  if (depth > kMaxDepth) fail(name, ": components nested deeper than ", kMaxDepth, " levels");
}

std::string type_of(const json& node, const std::string& name, const char* what) {
  const json* t = field(node, "type");
  if (!t || !t->is_string()) fail(name, ": ", what, " has no \"type\" string");
  return t->get<std::string>();
}

// ---------------------------------------------------------------- normalizer
void parse_normalizer(const json& node, const std::string& name, Normalizer& out, int depth = 0) {
  check_depth(depth, name);
  const std::string type = type_of(node, name, "normalizer");
  if (type == "Sequence") {
    for (const json& n : node.at("normalizers")) parse_normalizer(n, name, out, depth + 1);
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
    fail(name, ": normalizer type '", type, "' is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Sequence)");
  }
}

// ------------------------------------------------------------- pre-tokenizer
SplitBehavior parse_behavior(const std::string& b, const std::string& name) {
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  fail(name, ": Split behavior '", b, "' is unknown");
}

void parse_pre_tokenizer(const json& node, const std::string& name, PreTokenizer& out, int depth = 0) {
  check_depth(depth, name);
  const std::string type = type_of(node, name, "pre_tokenizer");
  if (type != "Sequence" && out.byte_level) {
    fail(name, ": pre_tokenizer '", type, "' after ByteLevel is not supported");
  }
  PreTokStep step;
  if (type == "Sequence") {
    for (const json& n : node.at("pretokenizers")) parse_pre_tokenizer(n, name, out, depth + 1);
    return;
  } else if (type == "Split") {
    const json& pat = node.at("pattern");
    std::string re;
    if (const json* r = field(pat, "Regex")) {
      re = r->get<std::string>();
    } else if (const json* s = field(pat, "String")) {
      re = regex_quote(s->get<std::string>());
    } else {
      fail(name, ": Split pattern must be {\"Regex\": ...} or {\"String\": ...}");
    }
    step.regex = std::make_shared<Regex>(re, name + ": pre_tokenizer Split");
    step.behavior = parse_behavior(node.at("behavior").get<std::string>(), name);
    step.invert = get_bool(node, "invert", false);
  } else if (type == "Digits") {
    step.regex = std::make_shared<Regex>(get_bool(node, "individual_digits", false) ? "\\p{N}" : "\\p{N}+",
                                         name + ": pre_tokenizer Digits");
  } else if (type == "ByteLevel") {
    step.kind = PreTokStep::Kind::kByteLevel;
    step.add_prefix_space = get_bool(node, "add_prefix_space", true);
    if (get_bool(node, "use_regex", true)) step.regex = std::make_shared<Regex>(gpt2_split_regex(), "GPT-2 regex");
    out.byte_level = true;
  } else {
    fail(name, ": pre_tokenizer type '", type, "' is not supported (supported: Split, ByteLevel, Digits, Sequence)");
  }
  out.steps.push_back(std::move(step));
}

// ------------------------------------------------------------------- decoder
Tokenizer::Impl::Decoder parse_decoder(const json* node, const std::string& name, int depth = 0) {
  check_depth(depth, name);
  if (node == nullptr) return Tokenizer::Impl::Decoder::kJoinWithSpace;
  const std::string type = type_of(*node, name, "decoder");
  if (type == "ByteLevel") return Tokenizer::Impl::Decoder::kByteLevel;
  if (type == "Sequence") {
    const json& list = node->at("decoders");
    if (list.size() == 1) return parse_decoder(&list[0], name, depth + 1);
  }
  fail(name, ": decoder type '", type, "' is not supported (supported: ByteLevel)");
}

// ------------------------------------------------------------ post-processor
void parse_post_processor(const json& node, const std::string& name, PostProcessor& out, int depth = 0) {
  check_depth(depth, name);
  const std::string type = type_of(node, name, "post_processor");
  if (type == "Sequence") {
    for (const json& p : node.at("processors")) parse_post_processor(p, name, out, depth + 1);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets.
  } else if (type == "TemplateProcessing") {
    PostProcessor t;
    bool seen_seq = false;
    for (const json& item : node.at("single")) {
      if (const json* sp = field(item, "SpecialToken")) {
        const std::string key = sp->at("id").get<std::string>();
        const json* tok = field(node.at("special_tokens"), key.c_str());
        if (!tok) fail(name, ": TemplateProcessing uses special token '", key, "' missing from special_tokens");
        for (const json& id : tok->at("ids")) (seen_seq ? t.suffix : t.prefix).push_back(get_id(id, name, "special token id"));
      } else if (field(item, "Sequence")) {
        if (seen_seq) fail(name, ": TemplateProcessing single template with two sequences");
        seen_seq = true;
      } else {
        fail(name, ": TemplateProcessing item is neither SpecialToken nor Sequence");
      }
    }
    out = std::move(t);
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    out.prefix = {get_id(node.at("cls").at(1), name, "cls id")};
    out.suffix = {get_id(node.at("sep").at(1), name, "sep id")};
  } else {
    fail(name, ": post_processor type '", type, "' is not supported (supported: TemplateProcessing, ByteLevel, "
         "RobertaProcessing, BertProcessing, Sequence)");
  }
}

// --------------------------------------------------------------------- model
std::unique_ptr<BpeModel> parse_model(const json& m, bool byte_level, const std::string& name) {
  const std::string type = m.contains("type") ? m.at("type").get<std::string>() : "BPE";
  if (type != "BPE") fail(name, ": model type '", type, "' is not supported (supported: BPE)");
  if (get_bool(m, "byte_fallback", false)) fail(name, ": BPE byte_fallback=true is not supported");
  if (const json* d = field(m, "dropout"); d && d->get<double>() != 0.0) {
    fail(name, ": BPE dropout=", d->get<double>(), " is not supported (must be null or 0)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json* v = field(m, key); v && !v->get<std::string>().empty()) {
      fail(name, ": BPE ", key, "='", v->get<std::string>(), "' is not supported (must be empty)");
    }
  }
  StringIdMap vocab;
  const json& v = m.at("vocab");
  if (!v.is_object()) fail(name, ": model.vocab must be an object");
  vocab.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it) vocab[it.key()] = get_id(it.value(), name, "vocabulary id");

  std::vector<std::pair<std::string, std::string>> merges;
  if (const json* ms = field(m, "merges")) {
    merges.reserve(ms->size());
    for (const json& mg : *ms) {
      if (mg.is_string()) {
        const std::string s = mg.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          fail(name, ": merge '", s, "' is not of the form 'a b'");
        }
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (mg.is_array() && mg.size() == 2) {
        merges.emplace_back(mg[0].get<std::string>(), mg[1].get<std::string>());
      } else {
        fail(name, ": merge entry ", mg.dump(), " is neither \"a b\" nor [a, b]");
      }
    }
  }
  BpeOptions opts;
  if (const json* u = field(m, "unk_token")) opts.unk_token = u->get<std::string>();
  opts.fuse_unk = get_bool(m, "fuse_unk", false);
  opts.ignore_merges = get_bool(m, "ignore_merges", false);
  opts.byte_level = byte_level;
  return std::make_unique<BpeModel>(std::move(vocab), merges, opts, name);
}

AddedToken parse_added_token(const json& t, const std::string& name) {
  AddedToken a;
  a.id = get_id(t.at("id"), name, "added token id");
  a.content = t.at("content").get<std::string>();
  a.single_word = get_bool(t, "single_word", false);
  a.lstrip = get_bool(t, "lstrip", false);
  a.rstrip = get_bool(t, "rstrip", false);
  a.special = get_bool(t, "special", false);
  a.normalized = get_bool(t, "normalized", !a.special);
  return a;
}

// A token in tokenizer_config.json: a string or an AddedToken dict.
std::optional<std::string> config_token(const json& cfg, const char* key) {
  const json* v = field(cfg, key);
  if (!v) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (const json* c = field(*v, "content"); c && c->is_string()) return c->get<std::string>();
  return std::nullopt;
}

std::string config_chat_template(const json& cfg, const std::string& name) {
  const json* t = field(cfg, "chat_template");
  if (!t) return "";
  if (t->is_string()) return t->get<std::string>();
  if (t->is_array()) {
    for (const json& e : *t) {
      if (e.value("name", "") == "default") return e.at("template").get<std::string>();
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

void Tokenizer::Impl::encode_normalized(std::string_view text, PreTokScratch& st, std::vector<int32_t>& out) const {
  pre.apply(text, st);
  for (const Span& w : st.pieces) model->tokenize(std::string_view(st.buf).substr(w.begin, w.end - w.begin), out);
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
  const json j = parse_json(tokenizer_json, name);
  const std::string cfg_name = name + " (tokenizer_config.json)";
  const json cfg = config_json.empty() ? json::object() : parse_json(config_json, cfg_name);
  auto impl = std::make_shared<Impl>();
  impl->name = name;
  try {
    if (!j.is_object()) fail(name, ": top level must be a JSON object");
    const json* model = field(j, "model");
    if (!model) fail(name, ": missing \"model\"");
    if (const json* t = field(*model, "type"); t && t->get<std::string>() != "BPE") {
      fail(name, ": model type '", t->get<std::string>(), "' is not supported (supported: BPE)");
    }
    if (const json* n = field(j, "normalizer")) parse_normalizer(*n, name, impl->normalizer);
    if (const json* p = field(j, "pre_tokenizer")) parse_pre_tokenizer(*p, name, impl->pre);
    impl->model = parse_model(*model, impl->pre.byte_level, name);
    impl->decoder = parse_decoder(field(j, "decoder"), name);
    if (const json* pp = field(j, "post_processor")) parse_post_processor(*pp, name, impl->post);
    if (const json* at = field(j, "added_tokens")) {
      for (const json& t : *at) {
        AddedToken a = parse_added_token(t, name);
        impl->added_by_id[a.id] = std::move(a);
      }
    }
    // tokenizer_config.json may declare added tokens the json lacks (transformers adds them).
    if (const json* atd = field(cfg, "added_tokens_decoder"); atd && atd->is_object()) {
      for (auto it = atd->begin(); it != atd->end(); ++it) {
        const int32_t id = std::stoi(it.key());
        if (id < 0) fail(cfg_name, ": added_tokens_decoder id ", id, " is negative");
        if (impl->added_by_id.count(id)) continue;
        json t = it.value();
        t["id"] = id;
        impl->added_by_id[id] = parse_added_token(t, name);
      }
    }
    impl->finish_added_tokens();

    auto lookup = [&](const char* key) -> std::optional<int32_t> {
      const auto tok = config_token(cfg, key);
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
    fail(name, ": unexpected structure: ", e.what());
  } catch (const std::invalid_argument& e) {
    fail(name, ": bad number in tokenizer_config.json: ", e.what());
  } catch (const std::out_of_range& e) {
    fail(name, ": number out of range in tokenizer_config.json: ", e.what());
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_json_file(const std::string& tokenizer_json) {
  const std::string text = read_file(tokenizer_json);
  const std::filesystem::path dir = std::filesystem::path(tokenizer_json).parent_path();
  std::string cfg;
  const std::filesystem::path cfg_path = dir / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(cfg_path, ec)) cfg = read_file(cfg_path.string());
  Tokenizer t = from_json_string(text, cfg, tokenizer_json);
  // Newer checkpoints keep the template in its own file, which takes priority (as in transformers).
  const std::filesystem::path jinja = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja, ec)) {
    t.impl_->chat_template = read_file(jinja.string());
  }
  return t;
}

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  const std::filesystem::path p = std::filesystem::path(dir) / "tokenizer.json";
  std::error_code ec;
  if (!std::filesystem::exists(p, ec)) fail(dir, ": no tokenizer.json in this directory");
  return from_json_file(p.string());
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
  const std::string name = "GGUF tokenizer";
  if (d.model != "gpt2") {
    fail(name, ": tokenizer.ggml.model '", d.model, "' is not supported (supported: gpt2)");
  }
  if (d.tokens.empty()) fail(name, ": tokenizer.ggml.tokens is missing or empty");
  if (!d.token_types.empty() && d.token_types.size() != d.tokens.size()) {
    fail(name, ": tokenizer.ggml.token_type has ", d.token_types.size(), " entries, expected ", d.tokens.size());
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

  auto valid_id = [&](std::optional<int32_t> id) -> std::optional<int32_t> {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= d.tokens.size())) {
      fail(name, ": special token id ", *id, " is outside the vocabulary of ", d.tokens.size(), " tokens");
    }
    return id;
  };
  impl->bos = valid_id(d.bos_id);
  impl->eos = valid_id(d.eos_id);
  impl->pad = valid_id(d.pad_id);
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
