// Tool calls in the models' own formats (src/serve/tool_calls.h): the streaming parser per format on
// realistic outputs (single and parallel calls, text around them, unicode and nested arguments, malformed and
// unfinished calls, marker-looking text in prose), each result the same for every split of the text into
// pieces; goldens from vLLM's and Transformers' own parsers (tools/make_tool_call_goldens.py); the format
// chosen from a chat template; and the grammars that force a call, compiled by llguidance and driven with
// the tokens of real texts, on the default model's tokenizer (SmolLM2) and on a tiny Llama-3 tokenizer given
// Mistral's and Llama's marker tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "default_model_util.h"
#include "generation/constraint_state.h"
#include "golden_util.h"
#include "serve/tool_calls.h"
#include "tessera/auto_tokenizer.h"
#include "tessera/constraint.h"
#include "tessera/error.h"

using namespace tessera;
using nlohmann::json;
using serve::ToolCall;
using serve::ToolCallFormat;
using serve::ToolCallParser;

namespace {

struct Parsed {
  std::string content;
  std::vector<ToolCall> calls;
};

Parsed parse_pieces(ToolCallFormat f, const std::vector<std::string_view>& pieces) {
  ToolCallParser p(f);
  Parsed r;
  auto add = [&](ToolCallParser::Output o) {
    r.content += o.content;
    for (auto& c : o.calls) r.calls.push_back(std::move(c));
  };
  for (std::string_view piece : pieces) add(p.push(piece));
  add(p.finish());
  return r;
}

struct Want {
  std::string name;
  std::string arguments;  // JSON text
};

std::string show(const Parsed& p) {
  std::string s = "content " + json(p.content).dump() + ", calls [";
  for (const auto& c : p.calls) s += c.name + " " + c.arguments + "; ";
  return s + "]";
}

::testing::AssertionResult same(const Parsed& got, const std::string& content,
                                const std::vector<Want>& calls) {
  bool ok = got.content == content && got.calls.size() == calls.size();
  for (size_t i = 0; ok && i < calls.size(); ++i) {
    json args = json::parse(got.calls[i].arguments, nullptr, false);
    ok = got.calls[i].name == calls[i].name && args.is_object() && args == json::parse(calls[i].arguments) &&
         got.calls[i].arguments == args.dump();  // compact
  }
  if (ok) return ::testing::AssertionSuccess();
  Parsed want{content, {}};
  for (const auto& c : calls) want.calls.push_back({c.name, c.arguments});
  return ::testing::AssertionFailure() << "got " << show(got) << "\nwant " << show(want);
}

// The text whole, split in two at every byte, and in 1-byte pieces: the same content and calls each time.
void expect_parse(ToolCallFormat f, const std::string& text, const std::string& content,
                  const std::vector<Want>& calls) {
  SCOPED_TRACE(std::string(serve::tool_call_format_name(f)) + ": " + json(text).dump());
  EXPECT_TRUE(same(parse_pieces(f, {text}), content, calls)) << "whole";
  for (size_t i = 0; i <= text.size(); ++i) {
    const std::string_view t = text;
    auto r = same(parse_pieces(f, {t.substr(0, i), t.substr(i)}), content, calls);
    if (!r) {
      ADD_FAILURE() << "split at " << i << ": " << r.message();
      break;
    }
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(std::string_view(text).substr(i, 1));
  EXPECT_TRUE(same(parse_pieces(f, bytes), content, calls)) << "1-byte pieces";
}

const std::string kWeather = R"({"name": "get_weather", "arguments": {"city": "Paris"}})";
const std::string kTime = R"({"name": "get_time", "arguments": {}})";
const std::string kProse = "The weather in Paris is sunny today, around 21 degrees.";
const Want kWeatherCall{"get_weather", R"({"city": "Paris"})"};
const Want kTimeCall{"get_time", "{}"};

}  // namespace

// ---------------------------------------------------------------- Hermes (Qwen2.5 / Qwen3 / Hermes)

TEST(ToolCallHermes, CallsAndTheTextAroundThem) {
  const auto H = ToolCallFormat::Hermes;
  expect_parse(H, "<tool_call>\n" + kWeather + "\n</tool_call>", "", {kWeatherCall});
  // Parallel calls, as the template joins them (one newline), and whitespace after the last one.
  expect_parse(H, "<tool_call>\n" + kWeather + "\n</tool_call>\n<tool_call>\n" + kTime + "\n</tool_call>\n",
               "", {kWeatherCall, kTimeCall});
  // Qwen3: text (after its think block) before the first call stays content, its whitespace included.
  expect_parse(H, "I'll check the weather for you.\n\n<tool_call>\n" + kWeather + "\n</tool_call>",
               "I'll check the weather for you.\n\n", {kWeatherCall});
  // Text between and after calls.
  expect_parse(
      H,
      "First:<tool_call>" + kWeather + "</tool_call>\nthen:\n<tool_call>" + kTime + "</tool_call>\n\nDone.",
      "First:\nthen:\n\n\nDone.", {kWeatherCall, kTimeCall});
  // Whitespace inside the tags, compact JSON, other key order, "parameters".
  expect_parse(
      H, "<tool_call>  \n\t{\"arguments\":{\"city\":\"Paris\"},\"name\":\"get_weather\"}  \n</tool_call>", "",
      {kWeatherCall});
  expect_parse(H, R"(<tool_call>{"name": "get_weather", "parameters": {"city": "Paris"}}</tool_call>)", "",
               {kWeatherCall});
  expect_parse(H, kProse, kProse, {});
  expect_parse(H, "", "", {});
}

TEST(ToolCallHermes, ArgumentsUnicodeNestedAndAsAString) {
  const auto H = ToolCallFormat::Hermes;
  // Non-ASCII arguments come out as UTF-8 (escaped or not in the output), compact, keys sorted.
  const std::string unicode =
      R"(<tool_call>{"name": "get_weather", "arguments": {"note": "café ☕ 😀", "city": "\u6771\u4eac"}}</tool_call>)";
  expect_parse(H, unicode, "", {{"get_weather", R"({"city": "東京", "note": "café ☕ 😀"})"}});
  EXPECT_EQ(parse_pieces(H, {unicode}).calls.at(0).arguments, "{\"city\":\"東京\",\"note\":\"café ☕ 😀\"}");
  const std::string nested =
      R"({"filter": {"tags": ["a", "b"], "range": {"min": 1, "max": 2.5}}, "exact": true, "limit": null})";
  expect_parse(H, "<tool_call>\n{\"name\": \"search\", \"arguments\": " + nested + "}\n</tool_call>", "",
               {{"search", nested}});
  // Arguments given as a string holding the object.
  expect_parse(H, R"(<tool_call>{"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}</tool_call>)",
               "", {kWeatherCall});
  // A closing tag inside a string argument is part of the string.
  expect_parse(H, R"(<tool_call>{"name": "echo", "arguments": {"text": "a </tool_call> b"}}</tool_call>)", "",
               {{"echo", R"({"text": "a </tool_call> b"})"}});
  // No arguments at all: an empty object.
  expect_parse(H, R"(<tool_call>{"name": "get_time"}</tool_call>)", "", {kTimeCall});
}

TEST(ToolCallHermes, MalformedAndUnfinishedCallsAreContent) {
  const auto H = ToolCallFormat::Hermes;
  for (const std::string& text : {
           std::string(R"(<tool_call>{"name": "get_weather", "arguments": {"city": Paris}}</tool_call>)"),
           std::string(R"(<tool_call>{"arguments": {"city": "Paris"}}</tool_call>)"),       // no name
           std::string(R"(<tool_call>{"name": "", "arguments": {}}</tool_call>)"),          // empty name
           std::string(R"(<tool_call>{"name": "f", "arguments": ["Paris"]}</tool_call>)"),  // not an object
           std::string(R"(<tool_call>{"name": "f", "arguments": "Paris"}</tool_call>)"),  // string, no object
           std::string(R"(<tool_call>{"name": "f", "arguments": {"a": 1}</tool_call>)"),  // a brace short
           std::string(
               R"(<tool_call>{"name": "f", "arguments": {}} trailing</tool_call>)"),     // text in the tags
           std::string(R"(<tool_call>["get_weather", {"city": "Paris"}]</tool_call>)"),  // not an object
           std::string(
               "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par"),  // cut off
           std::string("Sure.\n<tool_call>\n"),
           std::string("Sure.\n<tool_ca"),
       })
    expect_parse(H, text, text, {});
  // A marker-looking string in prose.
  const std::string prose =
      "Wrap each call in <tool_call> tags, e.g. <tool_call>name</tool_call>, then stop.";
  expect_parse(H, prose, prose, {});
  // A malformed call before a good one: the good one is still a call.
  expect_parse(H, "<tool_call>\n{oops}\n</tool_call>\n<tool_call>\n" + kWeather + "\n</tool_call>",
               "<tool_call>\n{oops}\n</tool_call>\n", {kWeatherCall});
  // An object left open by a new call: the first is content.
  expect_parse(H, "<tool_call>{\"name\": \"f\", <tool_call>" + kTime + "</tool_call>",
               "<tool_call>{\"name\": \"f\", ", {kTimeCall});
  // A complete call whose closing tag never came (the output ended) still counts.
  expect_parse(H, "<tool_call>\n" + kWeather + "\n", "", {kWeatherCall});
  expect_parse(H, "<tool_call>\n" + kWeather + "\n</tool_c", "", {kWeatherCall});
}

TEST(ToolCallHermes, ProseFlowsOutAtOnceAndOnlyAPossibleMarkerWaits) {
  ToolCallParser p(ToolCallFormat::Hermes);
  EXPECT_EQ(p.push("Hello, wor").content, "Hello, wor");
  EXPECT_EQ(p.push("ld <tool").content, "ld ");
  EXPECT_EQ(p.push("box> is not it <").content, "<toolbox> is not it ");
  auto o = p.push("tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_");
  EXPECT_EQ(o.content, "");
  EXPECT_TRUE(o.calls.empty());
  o = p.push("call>");
  ASSERT_EQ(o.calls.size(), 1u);  // the piece that completes a call gives it
  EXPECT_EQ(o.calls[0].name, "get_time");
  EXPECT_EQ(o.calls[0].arguments, "{}");
  EXPECT_EQ(p.push("\n").content, "");  // after a call: whitespace waits to see what follows
  EXPECT_EQ(p.push("Bye").content, "\nBye");
  auto f = p.finish();
  EXPECT_EQ(f.content, "");
  EXPECT_TRUE(f.calls.empty());
}

// ---------------------------------------------------------------- Llama 3.x JSON

TEST(ToolCallLlama3Json, CallsOnlyWhenTheOutputStartsWithOne) {
  const auto L = ToolCallFormat::Llama3Json;
  const std::string w = R"({"name": "get_weather", "parameters": {"city": "Paris"}})";
  const std::string t = R"({"name": "get_time", "parameters": {}})";
  expect_parse(L, w, "", {kWeatherCall});
  expect_parse(L, "<|python_tag|>" + w, "", {kWeatherCall});
  expect_parse(L, "\n <|python_tag|> " + w + "\n", "", {kWeatherCall});
  expect_parse(L, w + "; " + t, "", {kWeatherCall, kTimeCall});
  expect_parse(L, "<|python_tag|>" + w + ";" + t + "\n" + w, "", {kWeatherCall, kTimeCall, kWeatherCall});
  // "arguments" as the key; Llama 3.2's {"type": "function", ...}.
  expect_parse(L, R"({"name": "get_weather", "arguments": {"city": "Paris"}})", "", {kWeatherCall});
  expect_parse(L, R"({"type": "function", "name": "get_weather", "parameters": {"city": "Paris"}})", "",
               {kWeatherCall});
  expect_parse(
      L, R"({"name": "search", "parameters": {"q": "東京 café", "opts": {"n": [1, 2.5, null], "x": false}}})",
      "", {{"search", R"({"q": "東京 café", "opts": {"n": [1, 2.5, null], "x": false}})"}});
  // Text after the calls stays content.
  expect_parse(L, w + "\n\nThis gets the weather.", "\n\nThis gets the weather.", {kWeatherCall});
  expect_parse(L, w + "; and then", "; and then", {kWeatherCall});
  expect_parse(L, w + "; {\"nope\": 1}", "; {\"nope\": 1}", {kWeatherCall});
}

TEST(ToolCallLlama3Json, EverythingElseIsContent) {
  const auto L = ToolCallFormat::Llama3Json;
  for (const std::string& text : {
           kProse,
           std::string(
               R"(Sure! {"name": "get_weather", "parameters": {"city": "Paris"}})"),  // not at the start
           std::string(R"({"city": "Paris", "temperature": 21})"),                    // JSON, not a call
           std::string(R"({"name": "Bob", "age": 42})"),                              // no parameters
           std::string(R"({"name": "get_weather", "parameters": "Paris"})"),
           std::string(R"({"name": "get_weather", "parameters": {city: "Paris"}})"),    // bad JSON
           std::string(R"({"name": "get_weather", "parameters": {"city": "Par)"),       // cut off
           std::string("<|python_tag|>brave_search.call(query=\"weather in Paris\")"),  // built-in tool
           std::string("<|python_tag|>"),
           std::string("  \n"),
       })
    expect_parse(L, text, text, {});
  // Prose flows out as soon as it cannot be a call.
  ToolCallParser p(L);
  EXPECT_EQ(p.push("  ").content, "");
  EXPECT_EQ(p.push("<|py").content, "");
  EXPECT_EQ(p.push("thon").content, "");
  EXPECT_EQ(p.push("!").content, "  <|python!");
  EXPECT_EQ(p.push(" {\"name\"").content, " {\"name\"");
}

// ---------------------------------------------------------------- Mistral

TEST(ToolCallMistral, ArrayAndNameArgsForms) {
  const auto M = ToolCallFormat::Mistral;
  // Older tokenizers: a JSON array after [TOOL_CALLS].
  expect_parse(M, "[TOOL_CALLS] [" + kWeather + "]", "", {kWeatherCall});
  expect_parse(M, "[TOOL_CALLS][" + kWeather + ", " + kTime + "]", "", {kWeatherCall, kTimeCall});
  expect_parse(M,
               R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1B2c3D4e"}])",
               "", {kWeatherCall});
  expect_parse(M, R"([TOOL_CALLS][{"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}])", "",
               {kWeatherCall});
  // v11+: NAME[ARGS]{...}, repeated for parallel calls; [CALL_ID] too.
  expect_parse(M, R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"})", "", {kWeatherCall});
  expect_parse(M, R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{})", "",
               {kWeatherCall, kTimeCall});
  expect_parse(M, R"([TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{"city": "Paris"})", "", {kWeatherCall});
  expect_parse(M, R"([TOOL_CALLS]search[ARGS]{"q": "東京", "f": {"tags": ["a"], "n": 2}})", "",
               {{"search", R"({"q": "東京", "f": {"tags": ["a"], "n": 2}})"}});
  // Text before a call, and after it.
  expect_parse(M, R"(Let me look that up.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"})",
               "Let me look that up.", {kWeatherCall});
  expect_parse(M, "[TOOL_CALLS][" + kWeather + "]\n\nOne moment.", "\n\nOne moment.", {kWeatherCall});
  expect_parse(M, kProse, kProse, {});
}

TEST(ToolCallMistral, MalformedAndUnfinishedCallsAreContent) {
  const auto M = ToolCallFormat::Mistral;
  for (const std::string& text : {
           std::string(
               R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}])"),  // unbalanced
           std::string(R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": Paris}}])"),
           std::string(R"([TOOL_CALLS][{"arguments": {"city": "Paris"}}])"),
           std::string(R"([TOOL_CALLS][])"),
           std::string(R"([TOOL_CALLS]get_weather[ARGS]{"city": Paris})"),
           std::string(R"([TOOL_CALLS]get_weather[ARGS]["Paris"])"),
           std::string(R"([TOOL_CALLS]get_weather[ARGS]{"city": "Pa)"),  // cut off
           std::string("[TOOL_CALLS]get_weather"),
           std::string("[TOOL_CALLS]"),
           std::string("[TOOL_CA"),
           std::string("The [TOOL_CALLS] token starts a call; [1] and [TOOL] do not."),
       })
    expect_parse(M, text, text, {});
  ToolCallParser p(M);
  EXPECT_EQ(p.push("see [1] and [TOOL").content, "see [1] and ");
  EXPECT_EQ(p.push("S]").content, "[TOOLS]");
}

// ---------------------------------------------------------------- Pythonic (Llama 4, Gemma 3)

TEST(ToolCallPythonic, ACallListIsCalls) {
  const auto P = ToolCallFormat::Pythonic;
  expect_parse(P, R"([get_weather(city="Paris")])", "", {kWeatherCall});
  expect_parse(P, "[get_weather(city='Paris', days=3), get_time()]", "",
               {{"get_weather", R"({"city": "Paris", "days": 3})"}, kTimeCall});
  expect_parse(P, "\n [ get_weather( city = 'Paris' , ) ,\n get_time( ) , ] \n", "",
               {kWeatherCall, kTimeCall});  // whitespace and trailing commas, as Python allows
  // Python literals to JSON.
  expect_parse(
      P,
      "[search(q='café \\'東京\\'', n=-3, x=2.5, e=1e3, t=True, f=False, z=None, l=[1, 'a', [True]], "
      "d={'k': {\"n\": None}}, esc=\"a\\nb\\u00e9\\\\\")]",
      "",
      {{"search",
        R"({"q": "café '東京'", "n": -3, "x": 2.5, "e": 1000.0, "t": true, "f": false, "z": null,
                     "l": [1, "a", [true]], "d": {"k": {"n": null}}, "esc": "a\nbé\\"})"}});
  expect_parse(P, "[web.search(query=\"x\"), get-time()]", "",
               {{"web.search", R"({"query": "x"})"}, {"get-time", "{}"}});
  // Llama 4's wrapper.
  expect_parse(P, R"(<|python_start|>[get_weather(city="Paris")]<|python_end|>)", "", {kWeatherCall});
}

TEST(ToolCallPythonic, AnythingButAWholeCallListIsContent) {
  const auto P = ToolCallFormat::Pythonic;
  for (const std::string& text : {
           kProse,
           std::string("[1] Paris is the capital of France."),
           std::string("[]"),
           std::string("[get_weather(\"Paris\")]"),                      // positional
           std::string("[get_weather(city=\"Paris\", city=\"Rome\")]"),  // repeated
           std::string("[get_weather(city=paris)]"),                     // a name is not a literal
           std::string("[get_weather(city=\"Paris\")] and that's it"),   // text after
           std::string("Sure: [get_weather(city=\"Paris\")]"),           // text before
           std::string("[get_weather(city=\"Par"),                       // cut off
           std::string("[get_weather(city=\"Paris\")"),
           std::string("[get_weather(days=1e)]"),
           std::string("<|python_start|>"),
       })
    expect_parse(P, text, text, {});
  ToolCallParser p(P);
  EXPECT_EQ(p.push("\n[get_weather(").content, "");  // may be a call list: held until decided
  EXPECT_EQ(p.push("city: Paris").content, "\n[get_weather(city: Paris");
  ToolCallParser q(P);
  EXPECT_EQ(q.push("Hello").content, "Hello");
}

// ---------------------------------------------------------------- GLM-4.5 / 4.6

TEST(ToolCallGlm4, ArgKeyValueCalls) {
  const auto G = ToolCallFormat::Glm4;
  expect_parse(G,
               "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
               "", {kWeatherCall});
  // GLM-4.7 writes it without newlines; several calls; text before.
  expect_parse(
      G,
      "Let me check.\n<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"
      "\n<tool_call>get_time\n</tool_call>",
      "Let me check.\n", {kWeatherCall, kTimeCall});
  // Values that parse as JSON are JSON; others are strings, verbatim.
  expect_parse(
      G,
      "<tool_call>search\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>f</arg_key>\n"
      "<arg_value>{\"lang\": \"fr\", \"n\": [1]}</arg_value>\n<arg_key>exact</arg_key>\n"
      "<arg_value>true</arg_value>\n<arg_key>q</arg_key>\n<arg_value>東京 is \"big\"</arg_value>\n"
      "<arg_key>quoted</arg_key>\n<arg_value>\"x\"</arg_value>\n</tool_call>",
      "", {{"search", R"({"days": 3, "f": {"lang": "fr", "n": [1]}, "exact": true, "q": "東京 is \"big\"",
                              "quoted": "x"})"}});
  for (const std::string& text : {
           std::string(
               "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"),  // open
           std::string(
               "<tool_call>\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"),  // no
                                                                                                     // name
           std::string("<tool_call>get_weather\n<arg_key>city</arg_key>\nParis\n</tool_call>"),
           std::string("<tool_call>get weather</tool_call>"),
           kProse,
       })
    expect_parse(G, text, text, {});
}

// ---------------------------------------------------------------- Gemma 4

// The calls as Gemma 4's own chat template writes an assistant turn's tool_calls (the chat-template golden,
// rendered by Transformers): what the model is trained to write.
TEST(ToolCallGemma4, TheCallsItsTemplateWrites) {
  const auto G = ToolCallFormat::Gemma4;
  const json golden = tessera::golden::load_json(std::string(TESSERA_SOURCE_DIR) +
                                                 "/tests/fixtures/chat_template/gemma4.json");
  std::string rendered;
  for (const auto& c : golden["cases"])
    if (c["name"] == "tool_calls_gen") rendered = c["expected"].get<std::string>();
  const size_t b = rendered.find("<|tool_call>"), e = rendered.rfind("<tool_call|>");
  ASSERT_NE(b, std::string::npos);
  const std::string calls = rendered.substr(b, e + std::string("<tool_call|>").size() - b);
  expect_parse(
      G, calls, "",
      {{"get_weather", R"({"city": "Zürich", "unit": "celsius"})"}, {"add", R"({"a": 2, "b": 3.5})"}});
  // Text before; nested objects and arrays, booleans, null (None), quoted keys, whitespace, a string holding
  // the syntax's own delimiters.
  expect_parse(G, "Checking.<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>", "Checking.",
               {kWeatherCall});
  expect_parse(G,
               "<|tool_call>call:search{ f : {lang:<|\"|>fr<|\"|>,n:[1, -2.5e3]} , exact:true,none:None,"
               "<|\"|>q k<|\"|>:<|\"|>a, {b}: [c]<|\"|>,z:null,e:{},l:[]}<tool_call|>\n",
               "", {{"search", R"({"f": {"lang": "fr", "n": [1, -2500.0]}, "exact": true, "none": null,
                                   "q k": "a, {b}: [c]", "z": null, "e": {}, "l": []})"}});
  expect_parse(G, "<|tool_call>call:get_time{}<tool_call|>", "", {kTimeCall});
}

TEST(ToolCallGemma4, AnythingMalformedIsContent) {
  const auto G = ToolCallFormat::Gemma4;
  for (const std::string& text : {
           kProse,
           std::string("<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}"),         // never closed
           std::string("<|tool_call>get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>"),  // no call:
           std::string("<|tool_call>call:get_weather{city:Paris}<tool_call|>"),         // a bare word
           std::string("<|tool_call>call:get_weather{city:<|\"|>Paris}<tool_call|>"),   // unclosed string
           std::string("<|tool_call>call:get_weather[1]<tool_call|>"),                  // not an object
           std::string("<|tool_call>call:get weather{}<tool_call|>"),
           std::string("<|tool_call>call:{}<tool_call|>"),
           std::string("<|tool_call>call:f{a:1}} <tool_call|>"),
       })
    expect_parse(G, text, text, {});
}

TEST(ToolCallNone, EverythingIsContentAtOnce) {
  ToolCallParser p(ToolCallFormat::None);
  EXPECT_EQ(p.push("<tool_call>\n" + kWeather).content, "<tool_call>\n" + kWeather);
  EXPECT_EQ(p.push("\n</tool_call>").content, "\n</tool_call>");
  EXPECT_EQ(p.finish().content, "");
  expect_parse(ToolCallFormat::None, "[TOOL_CALLS][" + kWeather + "]", "[TOOL_CALLS][" + kWeather + "]", {});
}

// ---------------------------------------------------------------- any text, any split

TEST(ToolCallSplits, RandomTextsParseTheSameHoweverSplitAndLoseNothingWithoutCalls) {
  // Texts made of the formats' pieces (markers, partial markers, JSON and Python bits, whole calls, prose):
  // whole, in two at every byte, in 1-byte pieces and in random pieces, the same content and calls; with no
  // call found, the content is the text.
  const std::vector<std::string> bits = {
      "<tool_call>",
      "</tool_call>",
      "<tool",
      "\n",
      " ",
      "{",
      "}",
      "\"name\"",
      ": ",
      "\"get_time\"",
      ", ",
      "\"arguments\"",
      "\"parameters\"",
      "{}",
      "[TOOL_CALLS]",
      "[ARGS]",
      "[TOOL",
      "get_time",
      "[",
      "]",
      "(",
      ")",
      "=",
      "'x'",
      "\"",
      "1",
      "True",
      "<|python_tag|>",
      "<|python_start|>",
      "<|python_end|>",
      ";",
      "<arg_key>",
      "</arg_key>",
      "<arg_value>",
      "</arg_value>",
      "text",
      "é",
      "<",
      "\\",
      "<tool_call>\n" + kTime + "\n</tool_call>",
      "[TOOL_CALLS]get_time[ARGS]{}",
      "[TOOL_CALLS][" + kTime + "]",
      R"({"name": "get_time", "parameters": {}})",
      "[get_time()]",
      "get_time(a=1)",
      "<tool_call>get_time\n<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>"};
  const std::vector<std::string> python_bits = {
      ", get_time()", ", f(a='x', b=[1, {\"k\": None}])", ", g()", " ", "\n", " ", ",", "(", ")", "'", "x"};
  std::mt19937 rng(20250101);
  for (ToolCallFormat f : {ToolCallFormat::Hermes, ToolCallFormat::Llama3Json, ToolCallFormat::Mistral,
                           ToolCallFormat::Pythonic, ToolCallFormat::Glm4, ToolCallFormat::None}) {
    int with_calls = 0;
    for (int n = 0; n < 150; ++n) {
      std::string text;
      const size_t parts = 1 + rng() % 8;
      // Llama's and Pythonic's calls must open the output (and Pythonic's end it): half the texts do.
      const bool lead = n % 2 == 0;
      const std::vector<std::string>& from = f == ToolCallFormat::Pythonic && lead ? python_bits : bits;
      if (lead && f == ToolCallFormat::Llama3Json) text = R"({"name": "get_time", "parameters": {}})";
      if (lead && f == ToolCallFormat::Pythonic) text = "[get_time()";
      for (size_t k = 0; k < parts; ++k) text += from[rng() % from.size()];
      if (lead && f == ToolCallFormat::Pythonic) text += "]";
      const Parsed whole = parse_pieces(f, {text});
      std::vector<Want> calls;
      for (const auto& c : whole.calls) calls.push_back({c.name, c.arguments});
      if (calls.empty()) {
        EXPECT_EQ(whole.content, text) << serve::tool_call_format_name(f);
      }
      with_calls += !calls.empty();
      expect_parse(f, text, whole.content, calls);
      std::vector<std::string_view> pieces;
      for (size_t at = 0; at < text.size();) {
        const size_t len = std::min(text.size() - at, 1 + static_cast<size_t>(rng() % 7));
        pieces.push_back(std::string_view(text).substr(at, len));
        at += len;
      }
      EXPECT_TRUE(same(parse_pieces(f, pieces), whole.content, calls)) << json(text).dump();
    }
    if (f != ToolCallFormat::None) {
      EXPECT_GT(with_calls, 10) << serve::tool_call_format_name(f);
    }
  }
}

// ---------------------------------------------------------------- goldens

TEST(ToolCallGoldens, MatchVllmAndTransformersParsers) {
  // Produced by tools/make_tool_call_goldens.py with vLLM's tool parsers and Transformers' response parser.
  // Content is compared trimmed: Transformers strips it, and vLLM returns none when only whitespace.
  std::ifstream f(std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/tool_calls/goldens.json");
  ASSERT_TRUE(f) << "tests/fixtures/tool_calls/goldens.json";
  std::stringstream ss;
  ss << f.rdbuf();
  const json goldens = json::parse(ss.str());
  ASSERT_GE(goldens.size(), 30u);
  auto trim = [](std::string s) {
    const char* ws = " \t\r\n";
    s.erase(0, s.find_first_not_of(ws) == std::string::npos ? s.size() : s.find_first_not_of(ws));
    s.erase(s.find_last_not_of(ws) + 1);
    return s;
  };
  std::set<std::string> formats, sources;
  for (const json& g : goldens) {
    const std::string text = g["text"];
    SCOPED_TRACE(g["source"].get<std::string>() + ": " + json(text).dump());
    auto f = serve::tool_call_format_from_name(g["format"]);
    ASSERT_TRUE(f.has_value()) << g["format"];
    formats.insert(g["format"]);
    sources.insert(g["source"].get<std::string>().substr(0, 4));
    const Parsed got = parse_pieces(*f, {text});
    EXPECT_EQ(trim(got.content), trim(g["content"]));
    ASSERT_EQ(got.calls.size(), g["calls"].size());
    for (size_t i = 0; i < got.calls.size(); ++i) {
      EXPECT_EQ(got.calls[i].name, g["calls"][i]["name"]);
      EXPECT_EQ(json::parse(got.calls[i].arguments), g["calls"][i]["arguments"]);
    }
  }
  EXPECT_EQ(formats.size(), 5u);
  EXPECT_EQ(sources, (std::set<std::string>{"tran", "vllm"}));
}

// ---------------------------------------------------------------- choosing a format

TEST(ToolCallFormatChoice, FromTheTemplateThenTheArchitecture) {
  using F = ToolCallFormat;
  const json gemma4 = tessera::golden::load_json(std::string(TESSERA_SOURCE_DIR) +
                                                 "/tests/fixtures/chat_template/gemma4.json");
  EXPECT_EQ(serve::choose_tool_call_format("Gemma4ForCausalLM", ""), F::Gemma4);
  EXPECT_EQ(serve::choose_tool_call_format("LlamaForCausalLM", gemma4["template"].get<std::string>()),
            F::Gemma4);
  EXPECT_EQ(serve::tool_call_format_from_name("gemma4"), F::Gemma4);
  EXPECT_EQ(serve::choose_tool_call_format("Qwen3ForCausalLM",
                                           "{{- '<tool_call>\\n{\"name\": \"' }}{{ tool_call.name }}"),
            F::Hermes);
  EXPECT_EQ(serve::choose_tool_call_format("Glm4MoeForCausalLM",
                                           "<tool_call>{{ tc.name }}\n<arg_key>{{ k }}</arg_key>"),
            F::Glm4);
  EXPECT_EQ(
      serve::choose_tool_call_format("MistralForCausalLM", "{{ '[TOOL_CALLS]' }}{{ tool_calls|tojson }}"),
      F::Mistral);
  EXPECT_EQ(
      serve::choose_tool_call_format(
          "LlamaForCausalLM",
          "{{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name "
          "and its value}.' }}"),
      F::Llama3Json);
  EXPECT_EQ(serve::choose_tool_call_format("LlamaForCausalLM", "{{- '<|python_tag|>' + tool_call.name }}"),
            F::Llama3Json);
  EXPECT_EQ(
      serve::choose_tool_call_format(
          "Llama4ForConditionalGeneration",
          "[func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)]"),
      F::Pythonic);
  // A Hermes-tuned Mistral: the template wins over the architecture.
  EXPECT_EQ(serve::choose_tool_call_format("MistralForCausalLM", "<tool_call>\n{{ tool_call | tojson }}"),
            F::Hermes);
  // No calls in the template: the family's format.
  EXPECT_EQ(serve::choose_tool_call_format("Qwen2ForCausalLM", ""), F::Hermes);
  EXPECT_EQ(serve::choose_tool_call_format("Qwen3MoeForCausalLM", ""), F::Hermes);
  EXPECT_EQ(serve::choose_tool_call_format("MixtralForCausalLM", ""), F::Mistral);
  EXPECT_EQ(serve::choose_tool_call_format("Glm4MoeForCausalLM", ""), F::Glm4);
  EXPECT_EQ(
      serve::choose_tool_call_format("LlamaForCausalLM", "{% if tools %}{{ tools | tojson }}{% endif %}"),
      F::Llama3Json);
  EXPECT_EQ(serve::choose_tool_call_format("LlamaForCausalLM", "<|im_start|>{{ m.content }}"), F::Hermes);
  EXPECT_EQ(serve::choose_tool_call_format("Phi3ForCausalLM", ""), F::Hermes);
  for (F f : {F::None, F::Hermes, F::Llama3Json, F::Mistral, F::Pythonic, F::Glm4})
    EXPECT_EQ(serve::tool_call_format_from_name(serve::tool_call_format_name(f)), f);
  EXPECT_STREQ(serve::tool_call_format_name(F::Glm4), "glm45");
  EXPECT_STREQ(serve::tool_call_format_name(F::Llama3Json), "llama3_json");
  EXPECT_FALSE(serve::tool_call_format_from_name("auto").has_value());
}

// ---------------------------------------------------------------- grammars that force a call

namespace {

using tessera::test_models::smollm2_path;

std::vector<serve::ToolSpec> tools() {
  return {
      {"get_weather", json::parse(R"({"type": "object", "properties": {"city": {"type": "string"},
          "days": {"type": "integer", "minimum": 1}, "metric": {"type": "boolean"}}, "required": ["city"],
          "additionalProperties": false})")},
      {"get_time", json::object()},
  };
}

// Consumes the tokens of `text` (ids joined from each piece's encoding); the matcher's error, "" if none.
std::string drive(generation::ConstraintMatcher& m, const Tokenizer& tok,
                  const std::vector<std::string>& pieces) {
  for (const std::string& piece : pieces)
    for (int32_t id : tok.encode(piece)) {
      m.consume(id);
      if (!m.error().empty()) return m.error();
    }
  return "";
}

// The text is a complete output of the constraint: every token accepted, then the end.
::testing::AssertionResult completes(const std::shared_ptr<const Constraint>& c, const Tokenizer& tok,
                                     const std::vector<std::string>& pieces, int32_t eos) {
  generation::ConstraintMatcher m(c);
  if (std::string e = drive(m, tok, pieces); !e.empty())
    return ::testing::AssertionFailure() << "refused: " << e;
  if (m.done()) return ::testing::AssertionSuccess();  // nothing more may follow: the row ends there
  m.consume(eos);
  if (!m.error().empty()) return ::testing::AssertionFailure() << "cannot end there: " << m.error();
  if (!m.done()) return ::testing::AssertionFailure() << "not done after the end";
  return ::testing::AssertionSuccess();
}

// Some token of the text is refused, or the text cannot end where it does.
::testing::AssertionResult refused(const std::shared_ptr<const Constraint>& c, const Tokenizer& tok,
                                   const std::vector<std::string>& pieces, int32_t eos) {
  generation::ConstraintMatcher m(c);
  if (!drive(m, tok, pieces).empty()) return ::testing::AssertionSuccess();
  if (m.done()) return ::testing::AssertionFailure() << "accepted";
  m.consume(eos);
  if (!m.error().empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "accepted";
}

std::vector<ToolCall> parse_back(ToolCallFormat f, const std::vector<std::string>& pieces,
                                 std::string* content) {
  std::string text;
  for (const auto& p : pieces) text += p;
  Parsed r = parse_pieces(f, {text});
  *content = r.content;
  return r.calls;
}

#define REQUIRE_LLGUIDANCE() \
  if (std::string why; !ConstraintLibrary::available(&why)) FAIL() << why

// The tiny Llama-3 tokenizer of tests/fixtures with extra special tokens (Mistral's or Llama's markers).
Tokenizer tiny_with(const std::vector<std::string>& specials) {
  const std::string dir = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/tokenizer/tiny_llama3/";
  auto read = [](const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  json t = json::parse(read(dir + "tokenizer.json"));
  int id = 0;
  for (const auto& a : t["added_tokens"]) id = std::max(id, a["id"].get<int>() + 1);
  for (const auto& s : specials)
    t["added_tokens"].push_back({{"id", id++},
                                 {"content", s},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", true}});
  return Tokenizer::from_json_string(t.dump(), read(dir + "tokenizer_config.json"), "tiny_llama3+tools");
}

}  // namespace

TEST(ToolCallGrammar, HermesOnSmolLM2) {
  const std::string path = smollm2_path();
  if (path.empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed (scripts/setup.sh installs it)";
  REQUIRE_LLGUIDANCE();
  const Tokenizer tok = AutoTokenizer::from_pretrained(path);
  ConstraintVocabulary vocab(tok, 49152, {2});
  const auto H = ToolCallFormat::Hermes;
  const std::string g1 = serve::tool_call_grammar(H, tools(), false, tok);
  const std::string gn = serve::tool_call_grammar(H, tools(), true, tok);
  auto one = vocab.compile(ConstraintKind::Grammar, g1);
  auto many = vocab.compile(ConstraintKind::Grammar, gn);
  const std::string w = R"(<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}
</tool_call>)";
  const std::string t = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(completes(one, tok, {w}, 2)) << g1;
  EXPECT_TRUE(completes(one, tok, {t}, 2));
  EXPECT_TRUE(completes(many, tok, {w}, 2)) << gn;
  EXPECT_TRUE(completes(many, tok, {w, "\n", t, "\n", w}, 2));
  std::string content;
  auto calls = parse_back(H, {w, "\n", t}, &content);
  EXPECT_EQ(content, "");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, R"({"city":"Paris","days":3})");
  EXPECT_EQ(calls[1].name, "get_time");
  EXPECT_EQ(calls[1].arguments, "{}");
  // Nothing else: another function, a wrong type, a missing or unknown argument, text around the call, a
  // second call when only one is asked for.
  for (const auto& c : {one, many}) {
    EXPECT_TRUE(
        refused(c, tok, {"<tool_call>\n{\"name\": \"get_stock\", \"arguments\": {}}\n</tool_call>"}, 2));
    EXPECT_TRUE(refused(c, tok,
                        {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                         "\"days\": \"3\"}}\n</tool_call>"},
                        2));
    EXPECT_TRUE(refused(
        c, tok, {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 3}}\n</tool_call>"}, 2));
    EXPECT_TRUE(refused(c, tok,
                        {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                         "\"country\": \"FR\"}}\n</tool_call>"},
                        2));
    EXPECT_TRUE(refused(c, tok, {w, " Done."}, 2));
    EXPECT_TRUE(refused(c, tok, {"Sure. ", w}, 2));
    EXPECT_TRUE(refused(
        c, tok, {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"}, 2));
  }
  EXPECT_TRUE(refused(one, tok, {w, "\n", t}, 2));
  // A schema with definitions: its $ref still resolves inside the grammar's schema.
  std::vector<serve::ToolSpec> with_defs = tools();
  with_defs.push_back(
      {"convert", json::parse(R"({"type": "object", "properties": {"to": {"$ref": "#/$defs/Unit"},
      "from": {"$ref": "#/definitions/Unit"}}, "required": ["to"], "additionalProperties": false,
      "$defs": {"Unit": {"enum": ["celsius", "fahrenheit"]}}, "definitions": {"Unit": {"enum": ["K"]}}})")});
  auto defs = vocab.compile(ConstraintKind::Grammar, serve::tool_call_grammar(H, with_defs, false, tok));
  EXPECT_TRUE(completes(
      defs, tok, {"<tool_call>\n{\"name\": \"convert\", \"arguments\": {\"to\": \"celsius\"}}\n</tool_call>"},
      2));
  EXPECT_TRUE(completes(defs, tok,
                        {"<tool_call>\n{\"name\": \"convert\", \"arguments\": {\"from\": \"K\", \"to\": "
                         "\"celsius\"}}\n</tool_call>"},
                        2));
  EXPECT_TRUE(refused(
      defs, tok, {"<tool_call>\n{\"name\": \"convert\", \"arguments\": {\"to\": \"kelvin\"}}\n</tool_call>"},
      2));
  EXPECT_TRUE(completes(defs, tok, {w}, 2));
  // JSON whitespace is bounded (24 characters in a row).
  const std::string lead = "<tool_call>\n{\"name\":", tail = "\"get_time\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(completes(one, tok, {lead + std::string(24, ' ') + tail}, 2));
  EXPECT_TRUE(refused(one, tok, {lead + std::string(25, ' ') + tail}, 2));
}

TEST(ToolCallGrammar, PythonicOnSmolLM2) {
  const std::string path = smollm2_path();
  if (path.empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed (scripts/setup.sh installs it)";
  REQUIRE_LLGUIDANCE();
  const Tokenizer tok = AutoTokenizer::from_pretrained(path);
  ConstraintVocabulary vocab(tok, 49152, {2});
  const auto P = ToolCallFormat::Pythonic;
  const std::string g1 = serve::tool_call_grammar(P, tools(), false, tok);
  auto one = vocab.compile(ConstraintKind::Grammar, g1);
  auto many = vocab.compile(ConstraintKind::Grammar, serve::tool_call_grammar(P, tools(), true, tok));
  EXPECT_TRUE(completes(one, tok, {R"([get_weather(city="Paris", days=3, metric=True)])"}, 2)) << g1;
  EXPECT_TRUE(completes(one, tok, {R"([get_weather(city="Paris")])"}, 2));
  EXPECT_TRUE(completes(one, tok, {"[get_time()]"}, 2));
  EXPECT_TRUE(completes(many, tok, {R"([get_weather(city="Paris", metric=False), get_time()])"}, 2));
  std::string content;
  auto calls = parse_back(P, {R"([get_weather(city="Paris", days=3, metric=True), get_time()])"}, &content);
  EXPECT_EQ(content, "");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, R"({"city":"Paris","days":3,"metric":true})");
  EXPECT_EQ(calls[1].name, "get_time");
  for (const auto& c : {one, many}) {
    EXPECT_TRUE(refused(c, tok, {"[get_stock()]"}, 2));
    EXPECT_TRUE(refused(c, tok, {R"([get_weather(city="Paris", days="3")])"}, 2));
    EXPECT_TRUE(refused(c, tok, {R"([get_weather(city="Paris", days=0)])"}, 2));  // minimum 1
    EXPECT_TRUE(refused(c, tok, {"[get_weather(days=3)]"}, 2));
    EXPECT_TRUE(refused(c, tok, {R"([get_weather(city="Paris", country="FR")])"}, 2));
    EXPECT_TRUE(refused(c, tok, {R"([get_weather(city="Paris")] ok)"}, 2));
  }
  EXPECT_TRUE(refused(one, tok, {R"([get_weather(city="Paris"), get_time()])"}, 2));
}

TEST(ToolCallGrammar, SpecialTokenFormatsNeedTheirTokens) {
  const std::string path = smollm2_path();
  if (path.empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed (scripts/setup.sh installs it)";
  const Tokenizer tok = AutoTokenizer::from_pretrained(path);
  auto message = [&](ToolCallFormat f) {
    try {
      serve::tool_call_grammar(f, tools(), false, tok);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(ToolCallFormat::Mistral).find("[TOOL_CALLS]"), std::string::npos)
      << message(ToolCallFormat::Mistral);
  EXPECT_NE(message(ToolCallFormat::Llama3Json).find("<|python_tag|>"), std::string::npos);
  EXPECT_NE(message(ToolCallFormat::Glm4).find("glm45"), std::string::npos);
  EXPECT_NE(message(ToolCallFormat::None).find("none"), std::string::npos);
  EXPECT_THROW(serve::tool_call_grammar(ToolCallFormat::Hermes, {}, false, tok), Error);
}

TEST(ToolCallGrammar, MistralAndLlamaWithTheirSpecialTokens) {
  REQUIRE_LLGUIDANCE();
  {  // v11+: [TOOL_CALLS]NAME[ARGS]{...}
    const Tokenizer tok = tiny_with({"[TOOL_CALLS]", "[ARGS]", "<|python_tag|>"});
    ConstraintVocabulary vocab(tok, tok.vocab_size(), {1});
    const std::string g = serve::tool_call_grammar(ToolCallFormat::Mistral, tools(), true, tok);
    EXPECT_NE(g.find("<[" + std::to_string(*tok.token_to_id("[ARGS]")) + "]>"), std::string::npos) << g;
    auto c = vocab.compile(ConstraintKind::Grammar, g);
    const std::string w = R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"})",
                      t = "[TOOL_CALLS]get_time[ARGS]{}";
    EXPECT_TRUE(completes(c, tok, {w}, 1)) << g;
    EXPECT_TRUE(completes(c, tok, {w, t}, 1));
    EXPECT_TRUE(refused(c, tok, {"[TOOL_CALLS", "]get_time[ARGS]{}"}, 1));  // the marker spelled out
    EXPECT_TRUE(refused(c, tok, {"[TOOL_CALLS]get_weather[ARGS]{\"city\": 1}"}, 1));
    EXPECT_TRUE(refused(c, tok, {"[TOOL_CALLS]get_stock[ARGS]{}"}, 1));
    std::string content;
    auto calls = parse_back(ToolCallFormat::Mistral, {w, t}, &content);
    ASSERT_EQ(calls.size(), 2u);
    EXPECT_EQ(calls[0].arguments, R"({"city":"Paris"})");

    const std::string gl = serve::tool_call_grammar(ToolCallFormat::Llama3Json, tools(), true, tok);
    auto l = vocab.compile(ConstraintKind::Grammar, gl);
    const std::string lw =
        R"(<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}})";
    EXPECT_TRUE(completes(l, tok, {lw}, 1)) << gl;
    EXPECT_TRUE(completes(l, tok, {lw, R"(; {"name": "get_time", "parameters": {}})"}, 1));
    EXPECT_TRUE(refused(l, tok, {R"({"name": "get_weather", "parameters": {"city": "Paris"}})"}, 1));
    EXPECT_TRUE(
        refused(l, tok, {R"(<|python_tag|>{"name": "get_weather", "arguments": {"city": "Paris"}})"}, 1));
    calls =
        parse_back(ToolCallFormat::Llama3Json, {lw, R"(; {"name": "get_time", "parameters": {}})"}, &content);
    EXPECT_EQ(content, "");
    ASSERT_EQ(calls.size(), 2u);
    EXPECT_EQ(calls[0].arguments, R"({"city":"Paris","days":2})");
  }
  {  // older: [TOOL_CALLS] then an array
    const Tokenizer tok = tiny_with({"[TOOL_CALLS]"});
    ConstraintVocabulary vocab(tok, tok.vocab_size(), {1});
    auto one = vocab.compile(ConstraintKind::Grammar,
                             serve::tool_call_grammar(ToolCallFormat::Mistral, tools(), false, tok));
    const std::string w = R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}])";
    EXPECT_TRUE(completes(one, tok, {w}, 1));
    EXPECT_TRUE(refused(one, tok,
                        {R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, )"
                         R"({"name": "get_time", "arguments": {}}])"},
                        1));
    std::string content;
    auto calls = parse_back(ToolCallFormat::Mistral, {w}, &content);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].name, "get_weather");
  }
}

TEST(ToolCallGrammar, HarmonyWithItsSpecialTokens) {
  REQUIRE_LLGUIDANCE();
  const Tokenizer tok = tiny_with(
      {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>"});
  ConstraintVocabulary vocab(tok, tok.vocab_size(), {*tok.token_to_id("<|call|>")});
  const std::string g = serve::tool_call_grammar(ToolCallFormat::Harmony, tools(), true, tok);
  auto c = vocab.compile(ConstraintKind::Grammar, g);
  const int32_t call = *tok.token_to_id("<|call|>");
  const std::string w =
      R"(<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>)";
  EXPECT_TRUE(completes(c, tok, {w}, call)) << g;
  EXPECT_TRUE(completes(
      c, tok, {"<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|>"}, call));
  // One call a turn, to a known function, with valid arguments, and the markers as tokens.
  EXPECT_TRUE(refused(c, tok, {w, w}, call));
  EXPECT_TRUE(refused(
      c, tok, {"<|channel|>commentary to=functions.get_stock <|constrain|>json<|message|>{}<|call|>"}, call));
  EXPECT_TRUE(refused(
      c, tok,
      {R"(<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": 3}<|call|>)"},
      call));
  EXPECT_TRUE(refused(c, tok, {"<|channel|>final<|message|>hi<|return|>"}, call));
  // What the harmony reasoning parser makes of such a message (its canonical form) parses back.
  std::string content;
  auto calls = parse_back(ToolCallFormat::Harmony,
                          {"Let me look. ", "<|channel|>commentary to=functions.get_weather<|message|>",
                           R"({"city": "Paris"})", "<|call|>"},
                          &content);
  EXPECT_EQ(content, "Let me look. ");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, R"({"city":"Paris"})");
  // Unfinished or malformed: content, verbatim.
  const std::string cut = R"(<|channel|>commentary to=functions.get_weather<|message|>{"city": )";
  calls = parse_back(ToolCallFormat::Harmony, {cut}, &content);
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(content, cut);
  EXPECT_EQ(serve::choose_tool_call_format("GptOssForCausalLM", ""), ToolCallFormat::Harmony);
  EXPECT_EQ(serve::tool_call_format_from_name("harmony"), ToolCallFormat::Harmony);
}
