// The server's reasoning parsers (src/serve/reasoning.*) against goldens made by the references
// (tools/make_reasoning_goldens.py): openai-harmony's parser over real o200k_harmony tokens, and Qwen3
// completions built from their parts and tokenized by the real Qwen3 tokenizer. Every case is also fed in
// pieces, checking that what has come out at each token (or byte) boundary is a prefix of the final reasoning
// and content, so a stream never sends markup it would have to take back. Then the engine over the default
// model with a parser, and the auto choice over the chat-template corpus (transformers' renders).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "default_model.h"
#include "serve/engine.h"
#include "serve/reasoning.h"
#include "serve/tool_calls.h"
#include "tessera/auto_tokenizer.h"
#include "tessera/error.h"
#include "tessera/model.h"

namespace tessera {
namespace {

using nlohmann::json;
using serve::Channel;
using serve::Segment;

json fixture(const std::string& rel) {
  std::ifstream f(std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/" + rel);
  EXPECT_TRUE(f.good()) << rel;
  return json::parse(f);
}

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

struct Tok {
  int32_t id;
  std::string bytes;
  bool special;
};

std::vector<Tok> tokens(const json& c) {
  std::vector<Tok> out;
  for (const json& t : c["tokens"])
    out.push_back({t["id"].get<int32_t>(), unhex(t["hex"]), t["special"].get<bool>()});
  return out;
}

struct Split {
  std::string reasoning, content;
  void add(const std::vector<Segment>& segs) {
    for (const Segment& s : segs) {
      EXPECT_FALSE(s.text.empty());
      (s.channel == Channel::Reasoning ? reasoning : content) += s.text;
    }
  }
};

// Runs `parser` over `toks`; after each token, what came out must be a prefix of `want` (the final split).
// Returns the final split and each token's text.
Split run(serve::ReasoningParser& parser, const std::vector<Tok>& toks, const Split& want,
          std::vector<std::string>* per_token = nullptr) {
  Split got;
  for (size_t i = 0; i < toks.size(); ++i) {
    std::vector<Segment> segs;
    parser.push(toks[i].id, toks[i].bytes, toks[i].special, segs);
    got.add(segs);
    if (per_token) {
      std::string t;
      for (const Segment& s : segs) t += s.text;
      per_token->push_back(t);
    }
    EXPECT_TRUE(want.reasoning.starts_with(got.reasoning)) << "after token " << i << ": " << got.reasoning;
    EXPECT_TRUE(want.content.starts_with(got.content)) << "after token " << i << ": " << got.content;
  }
  std::vector<Segment> segs;
  parser.finish(segs);
  got.add(segs);
  return got;
}

serve::HarmonyTokens harmony_ids(const json& meta) {
  const json& m = meta["markers"];
  serve::HarmonyTokens t;
  t.start = m["<|start|>"];
  t.channel = m["<|channel|>"];
  t.message = m["<|message|>"];
  t.end = m["<|end|>"];
  t.return_ = m["<|return|>"];
  t.call = m["<|call|>"];
  t.constrain = m["<|constrain|>"];
  return t;
}

TEST(ServeReasoning, HarmonyMatchesOpenAiHarmonysParser) {
  const json g = fixture("reasoning/harmony.json");
  ASSERT_GE(g["cases"].size(), 15u);
  const serve::HarmonyTokens ids = harmony_ids(g["meta"]);
  const std::set<int32_t> eos(g["meta"]["eos"].begin(), g["meta"]["eos"].end());
  for (const json& c : g["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    // The server's rule over the reference's messages: analysis is reasoning, the rest content; where the
    // reference fails, the completion from after the last message end on is content, as decoded.
    Split want;
    for (const json& m : c["messages"])
      (m["channel"] == "analysis" ? want.reasoning : want.content) += m["text"].get<std::string>();
    if (c.contains("error")) want.content += c["raw_text"].get<std::string>();
    const std::vector<Tok> toks = tokens(c);
    auto parser = serve::make_harmony_parser(ids, eos);
    std::vector<std::string> per_token;
    const Split got = run(*parser, toks, want, &per_token);
    EXPECT_EQ(got.reasoning, want.reasoning);
    EXPECT_EQ(got.content, want.content);
    if (c.contains("deltas")) {  // the reference streamed it: the same text at the same token
      ASSERT_EQ(per_token.size(), c["deltas"].size());
      for (size_t i = 0; i < per_token.size(); ++i)
        EXPECT_EQ(per_token[i], c["deltas"][i]["delta"].get<std::string>()) << "token " << i;
    }
  }
}

TEST(ServeReasoning, HarmonyOutOfFormatTextIsContentAndNeverHeldLong) {
  const json g = fixture("reasoning/harmony.json");
  const serve::HarmonyTokens ids = harmony_ids(g["meta"]);
  auto text = [](const std::string& s) { return Tok{1000, s, false}; };
  auto mark = [](int32_t id, const char* s) { return Tok{id, s, true}; };
  {  // stray text after a message, then a well-formed message again
    const std::vector<Tok> toks = {mark(ids.channel, "<|channel|>"),
                                   text("final"),
                                   mark(ids.message, "<|message|>"),
                                   text("x"),
                                   mark(ids.end, "<|end|>"),
                                   text("stray"),
                                   mark(ids.start, "<|start|>"),
                                   text("assistant"),
                                   mark(ids.channel, "<|channel|>"),
                                   text("analysis"),
                                   mark(ids.message, "<|message|>"),
                                   text("t"),
                                   mark(ids.end, "<|end|>"),
                                   mark(ids.start, "<|start|>"),
                                   text("assistant"),
                                   mark(ids.channel, "<|channel|>"),
                                   text("final"),
                                   mark(ids.message, "<|message|>"),
                                   text("y"),
                                   mark(ids.return_, "<|return|>")};
    auto p = serve::make_harmony_parser(ids);
    const Split got = run(*p, toks, {"t", "xstrayy"});
    EXPECT_EQ(got.reasoning, "t");
    EXPECT_EQ(got.content, "xstrayy");
  }
  {  // a model that ignores the format: its text comes out as content once it cannot be a header
    const std::string line = "This is a long answer written without any harmony header at all. ";
    std::vector<Tok> toks;
    std::string all;
    for (int i = 0; i < 8; ++i) {
      toks.push_back(text(line));
      all += line;
    }
    auto p = serve::make_harmony_parser(ids);
    std::string early;
    for (size_t i = 0; i < toks.size(); ++i) {
      std::vector<Segment> segs;
      p->push(toks[i].id, toks[i].bytes, false, segs);
      for (const Segment& s : segs) {
        EXPECT_EQ(s.channel, Channel::Content);
        early += s.text;
      }
    }
    EXPECT_GE(early.size(), all.size() - 300) << "held back too long";
    std::vector<Segment> segs;
    p->finish(segs);
    for (const Segment& s : segs) early += s.text;
    EXPECT_EQ(early, all);
  }
  {  // a header cut by an end marker: the header is content, the next message parses
    const std::vector<Tok> toks = {mark(ids.channel, "<|channel|>"),
                                   text("ana"),
                                   mark(ids.end, "<|end|>"),
                                   mark(ids.start, "<|start|>"),
                                   text("assistant"),
                                   mark(ids.channel, "<|channel|>"),
                                   text("final"),
                                   mark(ids.message, "<|message|>"),
                                   text("ok")};
    auto p = serve::make_harmony_parser(ids);
    const Split got = run(*p, toks, {"", "<|channel|>anaok"});
    EXPECT_EQ(got.content, "<|channel|>anaok");
    EXPECT_EQ(got.reasoning, "");
  }
}

TEST(ServeReasoning, Qwen3ThinkBlocksAtEveryTokenAndByteBoundary) {
  const json g = fixture("reasoning/qwen3.json");
  ASSERT_GE(g["cases"].size(), 8u);
  const serve::ThinkTokens think{g["meta"]["think"]["open"].get<int32_t>(),
                                 g["meta"]["think"]["close"].get<int32_t>()};
  for (const json& c : g["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const Split want{c["reasoning"], c["content"]};
    const bool open = c["prompt_opens_thinking"];
    {  // the real tokens
      auto p = serve::make_qwen3_parser(think, open);
      const Split got = run(*p, tokens(c), want);
      EXPECT_EQ(got.reasoning, want.reasoning);
      EXPECT_EQ(got.content, want.content);
    }
    // The text alone (no tag tokens: a vocabulary without them), one byte at a time, and cut in two at every
    // byte.
    const std::string text = c["text"];
    {
      std::vector<Tok> bytes;
      for (char ch : text) bytes.push_back({-1, std::string(1, ch), false});
      auto p = serve::make_qwen3_parser({}, open);
      const Split got = run(*p, bytes, want);
      EXPECT_EQ(got.reasoning, want.reasoning);
      EXPECT_EQ(got.content, want.content);
    }
    for (size_t k = 0; k <= text.size(); ++k) {
      auto p = serve::make_qwen3_parser({}, open);
      const Split got = run(*p, {{-1, text.substr(0, k), false}, {-1, text.substr(k), false}}, want);
      ASSERT_EQ(got.reasoning, want.reasoning) << "cut at " << k;
      ASSERT_EQ(got.content, want.content) << "cut at " << k;
    }
  }
}

// Gemma 4's thought channel at the start of the output is reasoning, the rest content, at every cut, as text
// alone or with <|channel> / <channel|> as single tokens; text that only looks like the channel later on, or
// an output that never opens it, is content. Its template picks the format, and its non-thinking generation
// prompt already closes an empty channel.
TEST(ServeReasoning, Gemma4ThoughtChannel) {
  struct Case {
    std::string text, reasoning, content;
  };
  const Case cases[] = {
      {"<|channel>thought\nThe user adds.<channel|>4", "\nThe user adds.", "4"},
      {"  <|channel>thought\nx<channel|>\nDone.", "\nx", "\nDone."},
      {"Just 4.", "", "Just 4."},
      {"4 <|channel>thought no<channel|>", "", "4 <|channel>thought no<channel|>"},
      {"<|channel>thought\nnever closed", "\nnever closed", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const Split want{c.reasoning, c.content};
    for (size_t k = 0; k <= c.text.size(); ++k) {
      auto p = serve::make_gemma4_parser({});
      const Split got = run(*p, {{-1, c.text.substr(0, k), false}, {-1, c.text.substr(k), false}}, want);
      ASSERT_EQ(got.reasoning, want.reasoning) << "cut at " << k;
      ASSERT_EQ(got.content, want.content) << "cut at " << k;
    }
    // <|channel> and <channel|> as tokens 7 and 8 (special: their text is the tag's).
    std::vector<Tok> toks;
    for (size_t i = 0; i < c.text.size();) {
      if (c.text.compare(i, 10, "<|channel>") == 0) {
        toks.push_back({7, "<|channel>", true});
        i += 10;
      } else if (c.text.compare(i, 10, "<channel|>") == 0) {
        toks.push_back({8, "<channel|>", true});
        i += 10;
      } else {
        toks.push_back({-1, c.text.substr(i, 1), false});
        ++i;
      }
    }
    auto p = serve::make_gemma4_parser({7, 8});
    const Split got = run(*p, toks, want);
    EXPECT_EQ(got.reasoning, want.reasoning);
    EXPECT_EQ(got.content, want.content);
  }
  const json g = fixture("chat_template/gemma4.json");
  EXPECT_EQ(serve::choose_reasoning_format("", g["template"].get<std::string>()),
            serve::ReasoningFormat::Gemma4);
  EXPECT_EQ(serve::choose_reasoning_format("Gemma4ForCausalLM", ""), serve::ReasoningFormat::Gemma4);
  EXPECT_EQ(serve::reasoning_format_from_name("gemma4"), serve::ReasoningFormat::Gemma4);
}

TEST(ServeReasoning, AutoChoiceAndOpenThinkingFromTheTemplateCorpus) {
  const json corpus = fixture("chat_template/corpus.json");
  int seen = 0;
  for (const json& t : corpus["templates"]) {
    const std::string name = t["name"], tmpl = t["template"];
    if (name == "openai-gpt-oss-120b.jinja" || name == "unsloth-gpt-oss-20b.jinja") {
      EXPECT_EQ(serve::choose_reasoning_format("", tmpl), serve::ReasoningFormat::Harmony) << name;
      EXPECT_TRUE(t["cases"][0]["expected"].get<std::string>().ends_with("<|start|>assistant")) << name;
      ++seen;
    }
    if (name == "Qwen-Qwen3-0.6B.jinja" || name == "Qwen-Qwen3-4B-Thinking-2507.jinja") {
      EXPECT_EQ(serve::choose_reasoning_format("Qwen3ForCausalLM", tmpl), serve::ReasoningFormat::Qwen3)
          << name;
      // transformers' render with a generation prompt: the thinking model's template opens the block.
      const std::string prompt = t["cases"][0]["expected"];
      EXPECT_EQ(serve::prompt_opens_thinking(prompt), name == "Qwen-Qwen3-4B-Thinking-2507.jinja") << prompt;
      ++seen;
    }
    if (name == "LiquidAI-LFM2.5-350M.jinja") {
      EXPECT_EQ(serve::choose_reasoning_format("Lfm2ForCausalLM", tmpl), serve::ReasoningFormat::None);
      ++seen;
    }
  }
  EXPECT_EQ(seen, 5);
  EXPECT_EQ(serve::choose_reasoning_format("GptOssForCausalLM", ""), serve::ReasoningFormat::Harmony);
  EXPECT_EQ(serve::reasoning_format_from_name("qwen3"), serve::ReasoningFormat::Qwen3);
  EXPECT_FALSE(serve::reasoning_format_from_name("auto"));
  // enable_thinking false (Qwen3's template): the prompt closes the empty block it writes.
  EXPECT_FALSE(serve::prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_TRUE(serve::prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
}

// The engine with a parser over the default model (SmolLM2, which never writes <think>): a prompt that opened
// the block makes all of the text reasoning, one that did not all of it content, each equal to the text
// without a parser; streamed pieces add up; a stop string cuts the reasoning as it cuts content.
TEST(ServeReasoning, EngineSendsTheReasoningChannelApart) {
  std::string path;
  try {
    path = cli::find_default_model();
  } catch (const Error&) {
    GTEST_SKIP() << "SmolLM2 GGUF not installed (scripts/setup.sh installs it)";
  }
  LoadOptions opt;
  opt.dtype = DType::F32;
  CausalLM model = AutoModelForCausalLM::from_pretrained(path, opt);
  Tokenizer tok = AutoTokenizer::from_pretrained(path);
  serve::EngineOptions eo;
  eo.max_num_seqs = 2;
  eo.max_model_len = 128;
  serve::Engine engine(model, tok, eo);
  engine.start();
  GenerationConfig g = model.generation_config();
  g.do_sample = false;
  g.max_new_tokens = 12;
  const std::vector<int32_t> prompt = tok.encode("The capital of France is", true);
  struct Out {
    std::string text, reasoning, finish;
    size_t logprobs = 0;
    int tokens = 0;
  };
  auto run_one = [&](serve::ReasoningFormat f, bool open, std::vector<std::string> stop = {}) {
    serve::EngineRequest r{prompt, g, std::move(stop), true, 0, f, open};
    auto s = engine.submit(std::move(r));
    Out o;
    for (int i = 0; i < 600; ++i) {
      serve::StreamUpdate u = s->wait(std::chrono::milliseconds(100));
      o.text += u.text;
      o.reasoning += u.reasoning;
      o.logprobs += u.logprobs.size();
      if (u.done) {
        o.finish = u.finish_reason;
        o.tokens = u.completion_tokens;
        break;
      }
    }
    return o;
  };
  const Out plain = run_one(serve::ReasoningFormat::None, false);
  ASSERT_EQ(plain.finish, "length");
  ASSERT_GT(plain.text.size(), 8u);
  const Out content = run_one(serve::ReasoningFormat::Qwen3, false);
  EXPECT_EQ(content.text, plain.text);
  EXPECT_EQ(content.reasoning, "");
  const Out thought = run_one(serve::ReasoningFormat::Qwen3, true);
  EXPECT_EQ(thought.reasoning, plain.text);
  EXPECT_EQ(thought.text, "");
  EXPECT_EQ(thought.logprobs, static_cast<size_t>(thought.tokens));
  const std::string stop = plain.text.substr(4, 3);
  const Out cut = run_one(serve::ReasoningFormat::Qwen3, true, {stop});
  EXPECT_EQ(cut.finish, "stop");
  EXPECT_EQ(cut.reasoning, plain.text.substr(0, plain.text.find(stop)));
  // Harmony needs its markers: SmolLM2's vocabulary has none, so the request is refused up front.
  EXPECT_THROW(engine.submit({prompt, g, {}, true, -1, serve::ReasoningFormat::Harmony, false}), Error);
  engine.drain(std::chrono::milliseconds(5000));
}

TEST(ServeReasoning, HarmonyToolCallsAreOpenAiHarmonysFunctionMessages) {
  // With tools, a message to functions.NAME comes out in the canonical form ToolCallParser(Harmony) reads:
  // the calls are the reference's messages to functions (name, arguments), the content the others'.
  const json g = fixture("reasoning/harmony.json");
  const serve::HarmonyTokens ids = harmony_ids(g["meta"]);
  const std::set<int32_t> eos(g["meta"]["eos"].begin(), g["meta"]["eos"].end());
  int with_calls = 0;
  for (const json& c : g["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    Split want, raw;  // raw: the parser's output, calls in canonical form
    std::vector<serve::ToolCall> calls;
    for (const json& m : c["messages"]) {
      const std::string recipient = m["recipient"].is_string() ? m["recipient"].get<std::string>() : "";
      const std::string text = m["text"].get<std::string>();
      if (recipient.rfind("functions.", 0) == 0) {
        calls.push_back({recipient.substr(10), json::parse(text).dump()});
        raw.content += "<|channel|>commentary to=" + recipient + "<|message|>" + text + "<|call|>";
      } else {
        (m["channel"] == "analysis" ? want.reasoning : want.content) += text;
        (m["channel"] == "analysis" ? raw.reasoning : raw.content) += text;
      }
    }
    if (c.contains("error")) continue;  // malformed completions: covered as content by the test above
    auto parser = serve::make_harmony_parser(ids, eos, true);
    const Split got = run(*parser, tokens(c), raw, nullptr);
    EXPECT_EQ(got.reasoning, want.reasoning);
    EXPECT_EQ(got.content, raw.content);
    serve::ToolCallParser tp(serve::ToolCallFormat::Harmony);
    serve::ToolCallParser::Output a = tp.push(got.content), b = tp.finish();
    EXPECT_EQ(a.content + b.content, want.content);
    for (auto& x : b.calls) a.calls.push_back(std::move(x));
    ASSERT_EQ(a.calls.size(), calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(a.calls[i].name, calls[i].name);
      EXPECT_EQ(a.calls[i].arguments, calls[i].arguments);
    }
    with_calls += !calls.empty();
  }
  EXPECT_GE(with_calls, 2);
}

}  // namespace
}  // namespace tessera
