// The serving engine (src/serve): stop strings held back, OpenAI request checking, and continuous batching on
// the real default model — requests that join a running batch at different times each get exactly what the
// same request gets from generate() alone.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "default_model.h"
#include "serve/engine.h"
#include "serve/openai.h"
#include "tessera/auto_tokenizer.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
using serve::StopMatcher;

namespace {

TEST(ServeStop, HeldBackUntilItCannotMatchAndCutBeforeTheStop) {
  StopMatcher m({"</end>", "STOP"});
  EXPECT_EQ(m.push("hello <"), "hello ");  // "<" may start "</end>"
  EXPECT_EQ(m.push("/e"), "");
  EXPECT_EQ(m.push("x"), "</ex");  // no longer a prefix
  EXPECT_EQ(m.push(" ST"), " ");
  EXPECT_EQ(m.push("OP and more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("after"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(ServeStop, TheEarliestStopWinsAndFlushGivesTheTail) {
  StopMatcher m({"bc", "abcd"});
  EXPECT_EQ(m.push("xxab"), "xx");
  EXPECT_EQ(m.push("c"), "a");  // "bc" completes first
  EXPECT_TRUE(m.stopped());
  StopMatcher n({"zz"});
  EXPECT_EQ(n.push("abz"), "ab");
  EXPECT_FALSE(n.stopped());
  EXPECT_EQ(n.flush(), "z");
  StopMatcher none({});
  EXPECT_EQ(none.push("anything"), "anything");
}

struct Loaded {
  std::string path;
  std::unique_ptr<CausalLM> model;
  std::unique_ptr<Tokenizer> tok;
};

// SmolLM2 (the default model), float32, loaded once for the suite; nullptr when not installed.
Loaded* smollm2() {
  static Loaded* l = []() -> Loaded* {
    std::string path;
    try {
      path = cli::find_default_model();
    } catch (const Error&) {
      return nullptr;
    }
    auto* x = new Loaded;
    x->path = path;
    LoadOptions opt;
    opt.dtype = DType::F32;
    x->model = std::make_unique<CausalLM>(AutoModelForCausalLM::from_pretrained(path, opt));
    x->tok = std::make_unique<Tokenizer>(AutoTokenizer::from_pretrained(path));
    return x;
  }();
  return l;
}

#define REQUIRE_SMOLLM2(l) \
  Loaded* l = smollm2();   \
  if (!l) GTEST_SKIP() << "SmolLM2 GGUF not installed (scripts/setup.sh installs it)"

serve::ServedModel served(Loaded& l) {
  serve::ServedModel m;
  m.name = "smollm2";
  m.tokenizer = l.tok.get();
  m.defaults = l.model->generation_config();
  m.vocab_size = l.model->info().vocab_size;
  return m;
}

int status_of(const std::string& body, serve::Endpoint e, Loaded& l, std::string* param = nullptr) {
  try {
    serve::parse_request(e, body, served(l));
  } catch (const serve::ApiError& err) {
    if (param) *param = err.param;
    return err.status;
  }
  return 200;
}

TEST(ServeOpenAi, EveryBadFieldIsA400NamingIt) {
  REQUIRE_SMOLLM2(l);
  const auto chat = serve::Endpoint::Chat, comp = serve::Endpoint::Completion;
  struct Case {
    serve::Endpoint e;
    std::string body, param;
    int status = 400;
  };
  const std::string m = R"("messages": [{"role": "user", "content": "hi"}])";
  const std::vector<Case> cases = {
      {chat, "{", ""},
      {chat, "[1, 2]", ""},
      {chat, "{}", "messages"},
      {chat, R"({"messages": []})", "messages"},
      {chat, R"({"messages": "hi"})", "messages"},
      {chat, R"({"messages": [{"role": "robot", "content": "hi"}]})", "messages[0].role"},
      {chat, R"({"messages": [{"content": "hi"}]})", "messages[0].role"},
      {chat, R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {chat, R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {chat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type"},
      {chat, R"({"messages": [{"role": "user", "content": "hi", "tool_calls": []}]})",
       "messages[0].tool_calls"},
      {chat, "{" + m + R"(, "tools": [{"type": "function"}]})", "tools[0].function"},
      {chat, "{" + m + R"(, "tools": [{"type": "function", "function": {"name": "a b"}}]})",
       "tools[0].function.name"},
      {chat, "{" + m + R"(, "tool_choice": "required"})", "tool_choice"},
      {chat,
       "{" + m + R"(, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "any"})",
       "tool_choice"},
      {chat, "{" + m + R"(, "tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": {"type": "function", "function": {"name": "g"}}})",
       "tool_choice"},
      {chat, R"({"messages": [{"role": "tool", "content": "42"}]})", "messages[0].tool_call_id"},
      {chat, R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]})",
       "messages[0].tool_calls[0].function.name"},
      {chat, "{" + m + R"(, "response_format": {"type": "json_object"}})", "response_format"},
      {chat, "{" + m + R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})",
       "response_format"},
      {comp, R"({"prompt": "a", "response_format": {"type": "json_object"}})", "response_format"},
      {chat, "{" + m + R"(, "response_format": {"type": 5}})", "response_format.type"},
      {chat, "{" + m + R"(, "response_format": {}})", "response_format.type"},
      {chat, "{" + m + R"(, "response_format": {"type": "text", "strict": true}})", "response_format.strict"},
      {chat, "{" + m + R"(, "response_format": "text"})", "response_format"},
      {chat, "{" + m + R"(, "logprobs": 1})", "logprobs"},
      {chat, "{" + m + R"(, "top_logprobs": 2})", "top_logprobs"},
      {chat, "{" + m + R"(, "logprobs": true, "top_logprobs": 21})", "top_logprobs"},
      {chat, "{" + m + R"(, "echo": true})", "echo"},
      {comp, R"({"prompt": "a", "logprobs": true})", "logprobs"},
      {comp, R"({"prompt": "a", "logprobs": 21})", "logprobs"},
      {comp, R"({"prompt": "a", "top_logprobs": 2})", "top_logprobs"},
      {chat, "{" + m + R"(, "frobnicate": 1})", "frobnicate"},
      {chat, "{" + m + R"(, "max_tokens": 0})", "max_tokens"},
      {chat, "{" + m + R"(, "max_tokens": "10"})", "max_tokens"},
      {chat, "{" + m + R"(, "max_completion_tokens": -3})", "max_completion_tokens"},
      {chat, "{" + m + R"(, "temperature": 3})", "temperature"},
      {chat, "{" + m + R"(, "temperature": "hot"})", "temperature"},
      {chat, "{" + m + R"(, "top_p": 0})", "top_p"},
      {chat, "{" + m + R"(, "top_k": 1.5})", "top_k"},
      {chat, "{" + m + R"(, "min_p": 2})", "min_p"},
      {chat, "{" + m + R"(, "repetition_penalty": 0})", "repetition_penalty"},
      {chat, "{" + m + R"(, "presence_penalty": 0.5})", "presence_penalty"},
      {chat, "{" + m + R"(, "frequency_penalty": 9})", "frequency_penalty"},
      {chat, "{" + m + R"(, "seed": "x"})", "seed"},
      {chat, "{" + m + R"(, "n": 0})", "n"},
      {chat, "{" + m + R"(, "n": 100})", "n"},
      {chat, "{" + m + R"(, "stream": "yes"})", "stream"},
      {chat, "{" + m + R"(, "stream_options": {"include_usage": true}})", "stream_options"},
      {chat, "{" + m + R"(, "stream": true, "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage"},
      {chat, "{" + m + R"(, "stream": true, "stream_options": {"other": 1}})", "stream_options.other"},
      {chat, "{" + m + R"(, "stop": ["a", "b", "c", "d", "e"]})", "stop"},
      {chat, "{" + m + R"(, "stop": [1]})", "stop[0]"},
      {chat, "{" + m + R"(, "stop": ""})", "stop"},
      {chat, "{" + m + R"(, "chat_template_kwargs": []})", "chat_template_kwargs"},
      {chat, "{" + m + R"(, "model": "gpt-4"})", "model", 404},
      {chat, "{" + m + R"(, "model": 3})", "model"},
      {comp, R"({"prompt": "x", "messages": []})", "messages"},
      {comp, "{}", "prompt"},
      {comp, R"({"prompt": ""})", "prompt"},
      {comp, R"({"prompt": []})", "prompt"},
      {comp, R"({"prompt": [1, -2]})", "prompt[1]"},
      {comp, R"({"prompt": [1, 99999999]})", "prompt[1]"},
      {comp, R"({"prompt": ["a", "b"]})", "prompt"},
      {comp, R"({"prompt": {"text": "a"}})", "prompt"},
      {comp, R"({"prompt": "a", "suffix": "b"})", "suffix"},
      {comp, R"({"prompt": "a", "max_completion_tokens": 5})", "max_completion_tokens"},
  };
  for (const auto& c : cases) {
    std::string param;
    EXPECT_EQ(status_of(c.body, c.e, *l, &param), c.status) << c.body;
    EXPECT_EQ(param, c.param) << c.body;
  }
  // What clients send by default is accepted.
  EXPECT_EQ(
      status_of("{" + m + R"(, "logprobs": false, "top_logprobs": 0, "tools": null, "user": "u"})", chat, *l),
      200);
  EXPECT_EQ(status_of(R"({"prompt": [1, 2, 3], "echo": false, "max_tokens": 4, "stop": "x"})", comp, *l),
            200);
  // response_format {"type": "text"} is the API's default: accepted, and it changes nothing.
  const std::string plain = "{" + m + R"(, "max_tokens": 3})";
  const std::string text = "{" + m + R"(, "max_tokens": 3, "response_format": {"type": "text"}})";
  EXPECT_EQ(status_of(text, chat, *l), 200);
  EXPECT_EQ(status_of(R"({"prompt": "a", "response_format": {"type": "text"}})", comp, *l), 200);
  EXPECT_EQ(serve::parse_request(chat, text, served(*l)).prompt,
            serve::parse_request(chat, plain, served(*l)).prompt);
}

// The ApiError parse_request throws for `body` (status 0 when it throws none). Its JSON body must dump.
serve::ApiError api_error(const std::string& body, serve::Endpoint e, Loaded& l) {
  try {
    serve::parse_request(e, body, served(l));
  } catch (const serve::ApiError& err) {
    EXPECT_NO_THROW(serve::error_body(err).dump()) << err.what();
    return err;
  }
  return serve::ApiError(0, "(no error)");
}

#define EXPECT_400_NAMING(err, field)                                                            \
  do {                                                                                           \
    EXPECT_EQ((err).status, 400) << (err).what();                                                \
    EXPECT_EQ((err).param, field) << (err).what();                                               \
    EXPECT_NE(std::string((err).what()).find("'" + std::string(field) + "'"), std::string::npos) \
        << (err).what();                                                                         \
  } while (0)

// A number beyond a double (nlohmann parses 1e999 to infinity and refuses it) is a 400 naming its field and
// what the field must be, never a 500, in every numeric field of either endpoint.
TEST(ServeOpenAi, NumbersThatOverflowADoubleAreA400NamingTheField) {
  REQUIRE_SMOLLM2(l);
  const auto chat = serve::Endpoint::Chat, comp = serve::Endpoint::Completion;
  const std::string m = R"("messages": [{"role": "user", "content": "hi"}])";
  for (const char* field :
       {"max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
        "presence_penalty", "frequency_penalty", "seed", "n", "top_logprobs", "logprobs"})
    for (const char* big : {"1e999", "-1e999", "1E+400"}) {
      const serve::ApiError e = api_error("{" + m + ", \"" + field + "\": " + big + "}", chat, *l);
      EXPECT_400_NAMING(e, field);
      EXPECT_NE(std::string(e.what()).find(big), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("must be"), std::string::npos) << e.what();
    }
  for (const char* field : {"max_tokens", "temperature", "seed", "n", "logprobs"}) {
    const serve::ApiError e = api_error(std::string(R"({"prompt": "a", ")") + field + "\": 1e999}", comp, *l);
    EXPECT_400_NAMING(e, field);
  }
  const serve::ApiError e = api_error("{\"max_tokens\": 1e999, " + m + "}", chat, *l);
  EXPECT_NE(std::string(e.what()).find("'max_tokens' must be an integer"), std::string::npos) << e.what();
  EXPECT_400_NAMING(api_error(R"({"prompt": [1, 1e999]})", comp, *l), "prompt");
  EXPECT_400_NAMING(api_error("{" + m + R"(, "chat_template_kwargs": {"a": [1e999]}})", chat, *l),
                    "chat_template_kwargs");
  // A finite number that is no integer names the field and the value.
  const serve::ApiError f = api_error("{" + m + R"(, "max_tokens": 1e20})", chat, *l);
  EXPECT_400_NAMING(f, "max_tokens");
  EXPECT_NE(std::string(f.what()).find("1e+20"), std::string::npos) << f.what();
  EXPECT_EQ(api_error("[1e999]", chat, *l).status, 400);
}

// Invalid UTF-8 inside a JSON string (a raw 0xFF, the overlong C0 AF for '/', an encoded surrogate, a
// character cut short) is a 400 saying so with the byte offset and the field; the error's JSON dumps (the
// parser's own message quotes the raw bytes, which dump() refused with type_error 316).
TEST(ServeOpenAi, InvalidUtf8IsA400WithTheByteOffset) {
  REQUIRE_SMOLLM2(l);
  const auto chat = serve::Endpoint::Chat, comp = serve::Endpoint::Completion;
  for (const std::string& bad : {std::string("\xFF"), std::string("\xC0\xAF"), std::string("\xED\xA0\x80"),
                                 std::string("\xF0\x9F"), std::string("\x80")}) {
    const std::string body = R"({"messages": [{"role": "user", "content": "caf)" + bad + R"(e"}]})";
    const serve::ApiError e = api_error(body, chat, *l);
    EXPECT_400_NAMING(e, "messages");
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("byte offset " + std::to_string(body.find(bad))), std::string::npos)
        << e.what();
    const serve::ApiError c = api_error(R"({"max_tokens": 2, "prompt": "x)" + bad + R"("})", comp, *l);
    EXPECT_400_NAMING(c, "prompt");
    // In a field name: no field holds it.
    const serve::ApiError k = api_error("{\"a" + bad + R"(": 1, "prompt": "x"})", comp, *l);
    EXPECT_EQ(k.status, 400);
    EXPECT_EQ(k.param, "");
    EXPECT_NE(std::string(k.what()).find("byte offset 3"), std::string::npos) << k.what();
  }
  // Outside a string, a valid character cut by the parser ("last read: '<C3>'") and a raw byte.
  const serve::ApiError j = api_error("{\"prompt\": \xC3\xA9}", comp, *l);
  EXPECT_EQ(j.status, 400);
  EXPECT_NE(std::string(j.what()).find("not valid JSON"), std::string::npos) << j.what();
  EXPECT_EQ(api_error("{\"prompt\": \xFF}", comp, *l).status, 400);
}

// Arrays and objects nested deeper than 64 levels anywhere are refused while parsing (a 400 naming the field
// and the limit), so no recursive code sees them: 100,000 levels of chat_template_kwargs crashed the server
// (a stack overflow). 64 levels in all are fine.
TEST(ServeOpenAi, DeepNestingIsA400NamingTheFieldAndTheLimit) {
  REQUIRE_SMOLLM2(l);
  const auto chat = serve::Endpoint::Chat, comp = serve::Endpoint::Completion;
  const std::string m = R"("messages": [{"role": "user", "content": "hi"}])";
  auto objects = [](int n) {  // n nested objects {"a": {"a": ... 1 ...}}
    std::string s;
    for (int i = 0; i < n; ++i) s += "{\"a\": ";
    s += "1";
    return s + std::string(static_cast<size_t>(n), '}');
  };
  auto arrays = [](int n) {
    return std::string(static_cast<size_t>(n), '[') + std::string(static_cast<size_t>(n), ']');
  };
  const serve::ApiError deep =
      api_error("{" + m + ", \"chat_template_kwargs\": " + objects(100000) + "}", chat, *l);
  EXPECT_400_NAMING(deep, "chat_template_kwargs");
  EXPECT_NE(std::string(deep.what()).find("64"), std::string::npos) << deep.what();
  // The body is level 1; 63 nested objects as chat_template_kwargs fill levels 2..64, 64 reach level 65.
  EXPECT_EQ(
      api_error("{" + m + ", \"max_tokens\": 2, \"chat_template_kwargs\": " + objects(63) + "}", chat, *l)
          .status,
      0);
  EXPECT_400_NAMING(api_error("{" + m + ", \"chat_template_kwargs\": " + objects(64) + "}", chat, *l),
                    "chat_template_kwargs");
  EXPECT_400_NAMING(api_error("{" + m + ", \"tools\": " + arrays(100000) + "}", chat, *l), "tools");
  EXPECT_400_NAMING(api_error("{" + m + ", \"frobnicate\": " + objects(5000) + "}", chat, *l), "frobnicate");
  EXPECT_400_NAMING(
      api_error(R"({"messages": [{"role": "user", "content": )" + arrays(100000) + "}]}", chat, *l),
      "messages");
  EXPECT_400_NAMING(api_error(R"({"prompt": )" + arrays(100000) + "}", comp, *l), "prompt");
  const serve::ApiError body = api_error(arrays(100000), comp, *l);
  EXPECT_EQ(body.status, 400);
  EXPECT_EQ(body.param, "");
  EXPECT_NE(std::string(body.what()).find("the body nests"), std::string::npos) << body.what();
}

TEST(ServeOpenAi, FieldsBecomeTheGenerationConfig) {
  REQUIRE_SMOLLM2(l);
  auto r = serve::parse_request(serve::Endpoint::Chat,
                                R"({"messages": [{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
                                    "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 5,
                                    "min_p": 0.1, "repetition_penalty": 1.2, "seed": 11, "n": 2,
                                    "stream": true, "stream_options": {"include_usage": true},
                                    "stop": ["\n\n", "END"]})",
                                served(*l));
  EXPECT_EQ(r.config.max_new_tokens, 7);
  EXPECT_TRUE(r.max_tokens_given);
  EXPECT_TRUE(r.config.do_sample);
  EXPECT_FLOAT_EQ(r.config.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.config.top_p, 0.9f);
  EXPECT_EQ(r.config.top_k, 5);
  EXPECT_FLOAT_EQ(r.config.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.config.repetition_penalty, 1.2f);
  EXPECT_EQ(r.config.seed, 11u);
  EXPECT_EQ(r.n, 2);
  EXPECT_TRUE(r.stream && r.include_usage);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
  // The prompt is the chat template's rendering, as the CLI's chat renders it.
  const nlohmann::ordered_json msgs = {{{"role", "system"}, {"content", "Be brief."}},
                                       {{"role", "user"}, {"content", "Hi"}}};
  EXPECT_EQ(r.prompt, l->tok->encode(apply_chat_template(*l->tok, msgs, true), false));
  auto g = serve::parse_request(serve::Endpoint::Completion, R"({"prompt": "Hello", "temperature": 0})",
                                served(*l));
  EXPECT_FALSE(g.config.do_sample);
  EXPECT_FALSE(g.max_tokens_given);
  EXPECT_EQ(g.prompt, l->tok->encode("Hello", true));
  EXPECT_FALSE(g.config.eos_token_id.empty());
  // ignore_eos (vLLM's and llama-server's extension): no end-of-sequence token stops it.
  auto e = serve::parse_request(serve::Endpoint::Completion, R"({"prompt": "Hello", "ignore_eos": true})",
                                served(*l));
  EXPECT_TRUE(e.config.eos_token_id.empty());
  std::string param;
  EXPECT_EQ(status_of(R"({"prompt": "Hello", "ignore_eos": 1})", serve::Endpoint::Completion, *l, &param),
            400);
  EXPECT_EQ(param, "ignore_eos");
}

struct Finished {
  std::string text, reason;
  int tokens = 0;
};

Finished drain_stream(serve::Stream& s, double limit_s = 120) {
  Finished f;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (std::chrono::steady_clock::now() < until) {
    serve::StreamUpdate u = s.wait(std::chrono::milliseconds(100));
    f.text += u.text;
    if (u.done) {
      f.reason = u.finish_reason;
      f.tokens = u.completion_tokens;
      return f;
    }
  }
  f.reason = "(timed out)";
  return f;
}

GenerationConfig greedy(const CausalLM& m, int new_tokens) {
  GenerationConfig g = m.generation_config();
  g.do_sample = false;
  g.max_new_tokens = new_tokens;
  return g;
}

// What generate() gives for the prompt alone, as text.
std::pair<std::string, int> alone(Loaded& l, const std::vector<int32_t>& prompt, int new_tokens) {
  CausalLM& m = *l.model;
  GenerateOutput out = m.generate({prompt}, {}, greedy(m, new_tokens));
  std::vector<int32_t> ids(out.sequences[0].begin() + static_cast<long>(prompt.size()),
                           out.sequences[0].end());
  return {l.tok->decode(ids, true), out.new_tokens};
}

TEST(ServeEngine, StaggeredRequestsEachEqualGenerateAlone) {
  REQUIRE_SMOLLM2(l);
  const std::vector<std::string> prompts = {"The capital of France is",
                                            "Write a haiku about the sea.",
                                            "1, 2, 3, 4,",
                                            "Explain gravity to a child in one sentence:",
                                            "def fibonacci(n):",
                                            "Hello",
                                            "Lists are useful because",
                                            "The quick brown fox"};
  const std::vector<int> lengths = {12, 20, 8, 16, 24, 6, 18, 10};
  serve::Engine engine(*l->model, *l->tok, {.max_num_seqs = 4, .max_model_len = 96, .max_queue = 16});
  engine.start();
  std::vector<std::shared_ptr<serve::Stream>> streams;
  std::vector<std::vector<int32_t>> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ids.push_back(l->tok->encode(prompts[i], true));
    streams.push_back(engine.submit({ids.back(), greedy(*l->model, lengths[i]), {}, true}));
    // Arrivals spread over the running batch: some join mid-decode, some wait for a slot.
    if (i % 3 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(60));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    Finished f = drain_stream(*streams[i]);
    auto [want, n] = alone(*l, ids[i], lengths[i]);
    EXPECT_EQ(f.text, want) << "request " << i << ": " << prompts[i];
    EXPECT_EQ(f.tokens, n) << "request " << i;
    EXPECT_TRUE(f.reason == "length" || f.reason == "stop") << f.reason;
  }
  const serve::EngineStats st = engine.stats();
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 0);
  EXPECT_EQ(st.requests_finished, prompts.size());
}

TEST(ServeLogprobs, LogSoftmaxOfTheRawLogitsAndTheLikeliestFirst) {
  const std::vector<float> logits = {1.5f, -2.0f, 3.25f, 3.25f, 0.0f, -30.0f};
  long double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<long double>(x));
  auto ref = [&](int i) { return static_cast<double>(static_cast<long double>(logits[i]) - std::log(sum)); };
  const serve::TokenLogprob t = serve::token_logprob(logits.data(), 6, 4, 3);
  EXPECT_EQ(t.token, 4);
  EXPECT_NEAR(t.logprob, ref(4), 1e-6);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].first, 2);  // equal logits: the lower id first
  EXPECT_EQ(t.top[1].first, 3);
  EXPECT_EQ(t.top[2].first, 0);
  for (const auto& [id, lp] : t.top) EXPECT_NEAR(lp, ref(id), 1e-6) << id;
  EXPECT_TRUE(serve::token_logprob(logits.data(), 6, 5, 0).top.empty());
  EXPECT_THROW(serve::token_logprob(logits.data(), 6, 6, 0), Error);
  EXPECT_THROW(serve::token_logprob(logits.data(), 6, 0, 7), Error);
}

TEST(ServeEngine, LogprobsAreThoseOfTheModelForEveryToken) {
  REQUIRE_SMOLLM2(l);
  CausalLM& m = *l->model;
  const std::vector<int32_t> prompt = l->tok->encode("The capital of France is", true);
  GenerationConfig g = greedy(m, 6);
  g.repetition_penalty = 1.0f;  // greedy on the raw logits: the chosen token is the likeliest
  GenerateOutput ref = m.generate({prompt}, {}, g);
  const std::vector<int32_t>& seq = ref.sequences[0];
  serve::Engine engine(m, *l->tok, {.max_num_seqs = 2, .max_model_len = 64, .max_queue = 4});
  engine.start();
  serve::EngineRequest req{prompt, g, {}, true, 2};
  auto s = engine.submit(req);
  std::vector<serve::TokenLogprob> got;
  for (int i = 0; i < 600; ++i) {
    serve::StreamUpdate u = s->wait(std::chrono::milliseconds(100));
    for (auto& x : u.logprobs) got.push_back(x);
    if (u.done) break;
  }
  ASSERT_EQ(got.size(), seq.size() - prompt.size());
  const int64_t vocab = m.info().vocab_size;
  for (size_t i = 0; i < got.size(); ++i) {
    const size_t at = prompt.size() + i;
    EXPECT_EQ(got[i].token, seq[at]) << i;
    // The reference: log-softmax of forward() over the sequence so far, last position.
    std::vector<int32_t> upto(seq.begin(), seq.begin() + static_cast<long>(at));
    const std::vector<float> lg = m.forward(upto);
    const serve::TokenLogprob want =
        serve::token_logprob(lg.data() + (at - 1) * static_cast<size_t>(vocab), vocab, seq[at], 2);
    EXPECT_NEAR(got[i].logprob, want.logprob, 1e-3) << i;
    ASSERT_EQ(got[i].top.size(), 2u);
    EXPECT_EQ(got[i].top[0].first, seq[at]) << i;
    EXPECT_EQ(got[i].top[0].first, want.top[0].first) << i;
  }
  // With a stop string the entries stop with the text: their tokens spell at least the text, at most one
  // more.
  const std::string full =
      l->tok->decode(std::vector<int32_t>(seq.begin() + static_cast<long>(prompt.size()), seq.end()), true);
  ASSERT_GT(full.size(), 4u) << full;
  req.stop = {full.substr(3, 2)};
  auto cut = engine.submit(req);
  std::string text;
  std::vector<serve::TokenLogprob> part;
  for (int i = 0; i < 600; ++i) {
    serve::StreamUpdate u = cut->wait(std::chrono::milliseconds(100));
    text += u.text;
    for (auto& x : u.logprobs) part.push_back(x);
    if (u.done) break;
  }
  std::string spelled;
  for (const auto& x : part) spelled += l->tok->token_bytes(x.token, true);
  EXPECT_EQ(text, full.substr(0, full.find(req.stop[0])));
  EXPECT_EQ(spelled.rfind(text, 0), 0u) << spelled << " vs " << text;
  EXPECT_LT(part.size(), got.size());
}

// --speculative-config ngram: requests that repeat their prompt get several tokens a step, the same text as
// without speculation (beside another request), logprobs for every token (bit-equal logits: the same values),
// and the counters move.
TEST(ServeEngine, PromptLookupGivesTheSameTextAndLogprobsWithFewerSteps) {
  REQUIRE_SMOLLM2(l);
  CausalLM& m = *l->model;
  const std::string code = "for i in range(10):\n    total = total + values[i] * weights[i]\n";
  const std::vector<int32_t> copy = l->tok->encode("Copy: " + code + "\nCopy: " + code + "\nCopy:", true);
  const std::vector<int32_t> plain = l->tok->encode("The capital of France is", true);
  GenerationConfig g = greedy(m, 40);
  g.repetition_penalty = 1.0f;
  auto run = [&](int lookup, std::vector<serve::TokenLogprob>* lps) {
    serve::Engine engine(
        m, *l->tok, {.max_num_seqs = 2, .max_model_len = 160, .max_queue = 4, .speculative_tokens = lookup});
    engine.start();
    auto a = engine.submit({copy, g, {}, true, 1});
    auto b = engine.submit({plain, greedy(m, 12), {}, true});
    std::string text;
    for (int i = 0; i < 1200; ++i) {
      serve::StreamUpdate u = a->wait(std::chrono::milliseconds(100));
      text += u.text;
      for (auto& x : u.logprobs) lps->push_back(x);
      if (u.done) break;
    }
    Finished fb = drain_stream(*b);
    EXPECT_EQ(fb.text, alone(*l, plain, 12).first);
    return std::make_pair(text, engine.stats());
  };
  std::vector<serve::TokenLogprob> lp0, lp1;
  const auto [text0, st0] = run(0, &lp0);
  const auto [text1, st1] = run(6, &lp1);
  EXPECT_EQ(text1, text0);
  ASSERT_EQ(lp1.size(), lp0.size());
  for (size_t i = 0; i < lp0.size(); ++i) {
    EXPECT_EQ(lp1[i].token, lp0[i].token) << i;
    EXPECT_EQ(lp1[i].logprob, lp0[i].logprob) << i;
  }
  EXPECT_EQ(st0.speculation.draft_tokens, 0);
  EXPECT_GT(st1.speculation.accepted_tokens, 5);
  EXPECT_LE(st1.speculation.accepted_tokens, st1.speculation.draft_tokens);
  EXPECT_LT(st1.steps, st0.steps);
  EXPECT_EQ(st1.generation_tokens, st0.generation_tokens);
  EXPECT_THROW(serve::Engine(m, *l->tok, {.max_num_seqs = 1, .max_model_len = 64, .speculative_tokens = 33}),
               Error);
}

TEST(ServeEngine, PrefixReuseTakesThePreviousTurnFromItsSlot) {
  REQUIRE_SMOLLM2(l);
  CausalLM& m = *l->model;
  serve::Engine engine(m, *l->tok,
                       {.max_num_seqs = 2, .max_model_len = 128, .max_queue = 4, .prefix_reuse = true});
  engine.start();
  const std::vector<int32_t> first = l->tok->encode("The capital of France is", true);
  Finished a = drain_stream(*engine.submit({first, greedy(m, 8), {}, true}));
  ASSERT_EQ(a.reason, "length");
  GenerateOutput ref = m.generate({first}, {}, greedy(m, 8));
  std::vector<int32_t> second = ref.sequences[0];  // the first turn, its answer, then more
  const std::vector<int32_t> more = l->tok->encode(" And the capital of Spain is", false);
  second.insert(second.end(), more.begin(), more.end());
  Finished b = drain_stream(*engine.submit({second, greedy(m, 8), {}, true}));
  EXPECT_EQ(b.text, alone(*l, second, 8).first);
  const serve::EngineStats st = engine.stats();
  EXPECT_EQ(st.prefix_queries, first.size() + second.size());
  // The slot kept the first prompt and 7 of its 8 new tokens; on cpu (exact lengths) all of them are reused.
  EXPECT_EQ(st.prefix_hits, first.size() + 7);
}

TEST(ServeEngine, AStopStringIsNeverEmittedNorPartly) {
  REQUIRE_SMOLLM2(l);
  const std::vector<int32_t> prompt = l->tok->encode("Once upon a time,", true);
  auto [full, n] = alone(*l, prompt, 24);
  ASSERT_GT(full.size(), 20u) << full;
  const std::string stop = full.substr(12, 5);  // somewhere inside the reference text
  serve::Engine engine(*l->model, *l->tok, {.max_num_seqs = 2, .max_model_len = 64, .max_queue = 4});
  engine.start();
  auto s = engine.submit({prompt, greedy(*l->model, 24), {stop, "never-there"}, true});
  std::string seen;
  std::string reason;
  while (true) {
    serve::StreamUpdate u = s->wait(std::chrono::milliseconds(100));
    seen += u.text;
    // No update may end with a proper prefix of the stop string that is then completed.
    if (u.done) {
      reason = u.finish_reason;
      break;
    }
  }
  EXPECT_EQ(seen, full.substr(0, full.find(stop)));
  EXPECT_EQ(reason, "stop");
  EXPECT_EQ(engine.stats().running, 0);
}

TEST(ServeEngine, CancelFreesTheSlotWithinAStep) {
  REQUIRE_SMOLLM2(l);
  serve::Engine engine(*l->model, *l->tok, {.max_num_seqs = 1, .max_model_len = 200, .max_queue = 4});
  engine.start();
  const std::vector<int32_t> prompt = l->tok->encode("Count to one hundred:", true);
  auto a = engine.submit({prompt, greedy(*l->model, 150), {}, true});
  auto b = engine.submit({prompt, greedy(*l->model, 4), {}, true});  // waits for the only slot
  while (a->wait(std::chrono::milliseconds(50)).text.empty()) {
  }
  a->cancel();
  Finished fa = drain_stream(*a, 30), fb = drain_stream(*b, 30);
  EXPECT_EQ(fa.reason, "cancelled");
  EXPECT_LT(fa.tokens, 150);
  EXPECT_EQ(fb.text, alone(*l, prompt, 4).first);
  EXPECT_EQ(engine.stats().running, 0);
  EXPECT_EQ(engine.stats().requests_cancelled, 1u);
}

TEST(ServeEngine, FullQueueAndOverlongPromptsAreRefusedUpFront) {
  REQUIRE_SMOLLM2(l);
  serve::Engine engine(*l->model, *l->tok, {.max_num_seqs = 1, .max_model_len = 32, .max_queue = 1});
  const std::vector<int32_t> prompt = l->tok->encode("Hi", true);
  // Not started, so both stay queued: one for the free slot, one for the queue; a third finds no room.
  auto a = engine.submit({prompt, greedy(*l->model, 3), {}, true});
  auto b = engine.submit({prompt, greedy(*l->model, 3), {}, true});
  EXPECT_THROW(engine.submit({prompt, greedy(*l->model, 3), {}, true}), serve::Engine::QueueFull);
  try {
    engine.submit({std::vector<int32_t>(30, 5), greedy(*l->model, 8), {}, true});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_model_len 32"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("30 tokens"), std::string::npos) << e.what();
  }
  EXPECT_EQ(engine.max_new_tokens_that_fit(30), 2);  // 30 + 2 = max_model_len
  engine.start();
  EXPECT_EQ(drain_stream(*a).tokens, 3);
  EXPECT_EQ(drain_stream(*b).tokens, 3);
  engine.drain(std::chrono::milliseconds(5000));
  EXPECT_THROW(engine.submit({prompt, greedy(*l->model, 3), {}, true}), Error);
}

// 64 requests (8 prompts, 8 times each) queued at once into 16 slots whose KV pool (--kv-cache-memory) holds
// a fraction of what they need at their longest: they wait for blocks, running ones are preempted and
// resumed, and each one's text is what generate() gives it alone; afterwards no slot or block is held. A
// request that could never fit the pool is refused up front, naming the pool. SmolLM2 as it ships (Q4_1
// blocks), so the 2560 tokens take seconds.
TEST(ServeEngine, APoolOfBlocksServesSixtyFourQueuedRequestsEachAsAlone) {
  REQUIRE_SMOLLM2(f32);
  CausalLM m = AutoModelForCausalLM::from_pretrained(f32->path);
  Loaded l{f32->path, std::make_unique<CausalLM>(std::move(m)),
           std::make_unique<Tokenizer>(AutoTokenizer::from_pretrained(f32->path))};
  const std::vector<std::string> heads = {
      "The capital of France is", "Write a haiku about the sea.", "1, 2, 3, 4,",      "def fibonacci(n):",
      "Lists are useful because", "The quick brown fox",          "Explain gravity:", "Once upon a time"};
  const int new_tokens = 40;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> texts;
  for (const std::string& h : heads) {
    prompts.push_back(l.tok->encode(h, true));
    texts.push_back(alone(l, prompts.back(), new_tokens).first);
  }
  serve::Engine probe(*l.model, *l.tok, {.max_num_seqs = 16, .max_model_len = 64});
  const KvCacheStats k0 = probe.stats().kv;
  ASSERT_TRUE(k0.paged);
  {
    serve::Engine tiny(*l.model, *l.tok,
                       {.max_num_seqs = 2, .max_model_len = 64, .kv_cache_memory = k0.block_bytes});
    try {
      tiny.submit({std::vector<int32_t>(40, 5), greedy(*l.model, 20), {}, true});  // 59 slots
      ADD_FAILURE() << "a request larger than the pool was accepted";
    } catch (const Error& e) {
      const std::string blocks =
          "need " + std::to_string((59 + k0.block_tokens - 1) / k0.block_tokens) + " KV blocks";
      EXPECT_NE(std::string(e.what()).find(blocks), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--kv-cache-memory holds 1"), std::string::npos) << e.what();
    }
  }
  // Each sequence (<= 16 + 40 slots) grows from one block to more: 16 of them would take 4.5x this pool.
  const int64_t longest = (56 + k0.block_tokens - 1) / k0.block_tokens, blocks = longest * 7 / 2;
  serve::Engine engine(
      *l.model, *l.tok,
      {.max_num_seqs = 16, .max_model_len = 64, .max_queue = 64, .kv_cache_memory = blocks * k0.block_bytes});
  std::vector<std::shared_ptr<serve::Stream>> streams;
  for (int copy = 0; copy < 8; ++copy)
    for (const auto& p : prompts)
      streams.push_back(engine.submit({p, greedy(*l.model, new_tokens), {}, true}));
  engine.start();
  for (size_t i = 0; i < streams.size(); ++i) {
    Finished f = drain_stream(*streams[i]);
    EXPECT_EQ(f.text, texts[i % texts.size()]) << "request " << i;
    EXPECT_TRUE(f.reason == "length" || f.reason == "stop") << "request " << i << ": " << f.reason;
  }
  const serve::EngineStats st = engine.stats();
  EXPECT_EQ(st.requests_finished, streams.size());
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 0);
  EXPECT_EQ(st.kv.total_blocks, blocks);
  EXPECT_EQ(st.kv.used_blocks, 0);
  EXPECT_EQ(st.kv.preempted, 0);
  EXPECT_GT(st.kv.preemptions, 0) << "the pool never ran out: the test did not preempt";
  EXPECT_LE(st.kv.cached_blocks, blocks);
}

// Sampled at temperature 1 with seed `seed`, no eos (every request runs its whole budget).
GenerationConfig seeded(const CausalLM& m, int new_tokens, uint64_t seed) {
  GenerationConfig g = m.generation_config();
  g.do_sample = true;
  g.temperature = 1.0f;
  g.seed = seed;
  g.max_new_tokens = new_tokens;
  g.eos_token_id.clear();
  return g;
}

std::vector<int32_t> new_ids(const GenerateOutput& out, size_t prompt_len) {
  return {out.sequences[0].begin() + static_cast<long>(prompt_len), out.sequences[0].end()};
}

// The same seeded sampled request (temperature 1, seed 7) gives the same text in slot 0 of an idle engine and
// in slot 2 beside two running requests, and the same as generate() gives for it: draws are keyed by the
// request's seed and its own token index, not by its slot.
TEST(ServeEngine, ASeededSampledRequestGivesTheSameTextInAnySlot) {
  REQUIRE_SMOLLM2(l);
  CausalLM& m = *l->model;
  const std::vector<int32_t> prompt = l->tok->encode("Tell me a story about a dragon.", true);
  const GenerationConfig g = seeded(m, 12, 7);
  const std::string want = l->tok->decode(new_ids(m.generate({prompt}, {}, g), prompt.size()), true);
  serve::Engine engine(m, *l->tok, {.max_num_seqs = 3, .max_model_len = 160, .max_queue = 4});
  engine.start();
  const Finished first = drain_stream(*engine.submit({prompt, g, {}, true}));  // alone: slot 0
  EXPECT_EQ(first.text, want);
  EXPECT_EQ(first.tokens, 12);
  // Two long requests take slots 0 and 1 (the lowest free); once both run, the seeded one can only take
  // slot 2.
  auto a = engine.submit({l->tok->encode("Count to one hundred:", true), seeded(m, 100, 1), {}, true});
  auto b = engine.submit({l->tok->encode("List every country:", true), greedy(m, 100), {}, true});
  while (a->wait(std::chrono::milliseconds(50)).text.empty()) {
  }
  while (b->wait(std::chrono::milliseconds(50)).text.empty()) {
  }
  ASSERT_EQ(engine.stats().running, 2);
  const Finished beside = drain_stream(*engine.submit({prompt, g, {}, true}));
  EXPECT_EQ(engine.stats().running, 2) << "the two others were still running: the request was in slot 2";
  EXPECT_EQ(beside.text, want);
  EXPECT_EQ(beside.tokens, 12);
  // It sampled: another seed gives other text.
  EXPECT_NE(l->tok->decode(new_ids(m.generate({prompt}, {}, seeded(m, 12, 8)), prompt.size()), true), want);
  a->cancel();
  b->cancel();
}

// Logprobs of a sampled request at temperature 2 with one alternative: tokens are often not the likeliest,
// and each entry is still the chosen token with its own log-probability (that of the model: forward() over
// the sequence so far); the chat JSON carries it beside its top_logprobs, the completions JSON lists it among
// them (OpenAI's up to logprobs + 1).
TEST(ServeEngine, LogprobsAlwaysCarryTheSampledToken) {
  REQUIRE_SMOLLM2(l);
  CausalLM& m = *l->model;
  const std::vector<int32_t> prompt = l->tok->encode("The weather today is", true);
  GenerationConfig g = seeded(m, 16, 3);
  g.temperature = 2.0f;
  g.top_k = 0;
  g.top_p = 1.0f;
  serve::Engine engine(m, *l->tok, {.max_num_seqs = 1, .max_model_len = 64, .max_queue = 1});
  engine.start();
  auto s = engine.submit({prompt, g, {}, true, 1});
  std::vector<serve::TokenLogprob> got;
  for (int i = 0; i < 600; ++i) {
    serve::StreamUpdate u = s->wait(std::chrono::milliseconds(100));
    for (auto& x : u.logprobs) got.push_back(x);
    if (u.done) break;
  }
  ASSERT_EQ(got.size(), 16u);
  const int64_t vocab = m.info().vocab_size;
  std::vector<int32_t> seq = prompt;
  int not_top = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const std::vector<float> lg = m.forward(seq);
    const serve::TokenLogprob want = serve::token_logprob(
        lg.data() + (seq.size() - 1) * static_cast<size_t>(vocab), vocab, got[i].token, 1);
    EXPECT_NEAR(got[i].logprob, want.logprob, 1e-3) << i;
    ASSERT_EQ(got[i].top.size(), 1u) << i;
    EXPECT_EQ(got[i].top[0].first, want.top[0].first) << i;
    seq.push_back(got[i].token);
    if (got[i].token == got[i].top[0].first) continue;
    ++not_top;
    const std::vector<serve::TokenLogprob> one = {got[i]};
    size_t offset = 0;
    const auto chat = serve::logprobs_json(serve::Endpoint::Chat, *l->tok, one, offset);
    const auto& e = chat["content"][0];
    const std::string raw = l->tok->token_bytes(got[i].token, false);
    EXPECT_EQ(e["bytes"].size(), raw.size()) << i;
    EXPECT_EQ(e["logprob"].get<float>(), got[i].logprob) << i;
    ASSERT_EQ(e["top_logprobs"].size(), 1u) << i;
    EXPECT_NE(e["top_logprobs"][0]["logprob"].get<float>(), got[i].logprob) << i;
    offset = 0;
    const auto comp = serve::logprobs_json(serve::Endpoint::Completion, *l->tok, one, offset);
    const auto& top = comp["top_logprobs"][0];
    const std::string text = comp["tokens"][0].get<std::string>();
    EXPECT_EQ(comp["token_logprobs"][0].get<float>(), got[i].logprob) << i;
    ASSERT_TRUE(top.contains(text)) << i << ": the sampled token is missing from " << top.dump();
    EXPECT_EQ(top[text].get<float>(), got[i].logprob) << i;
    EXPECT_EQ(top.size(), 2u) << top.dump();
  }
  EXPECT_GT(not_top, 0) << "at temperature 2 some sampled token should not be the likeliest";
}

// Without max_tokens the server gives a request max_new_tokens_that_fit(prompt): prompt + completion then
// reach max_model_len exactly, never one more; one token more is refused up front. With chunked prefill
// (the prompt padded to whole chunks in the cache) the cache bounds it too.
TEST(ServeEngine, PromptAndCompletionNeverExceedMaxModelLen) {
  REQUIRE_SMOLLM2(l);
  CausalLM& m = *l->model;
  const std::vector<int32_t> prompt = l->tok->encode("Once upon a time, in a land far away,", true);
  const int len = static_cast<int>(prompt.size()), max_len = len + 9;
  for (int chunk : {0, 8}) {
    serve::Engine engine(
        m, *l->tok, {.max_num_seqs = 1, .max_model_len = max_len, .max_queue = 2, .prefill_chunk = chunk});
    const int fit = engine.max_new_tokens_that_fit(len);
    const int padded = chunk > 0 ? (len + chunk - 1) / chunk * chunk : len;
    EXPECT_EQ(fit, std::min(max_len - len, max_len - padded + 1)) << "chunk " << chunk;
    engine.start();
    GenerationConfig g = seeded(m, fit, 5);  // no eos: the whole budget
    const Finished f = drain_stream(*engine.submit({prompt, g, {}, true}));
    EXPECT_EQ(f.reason, "length");
    EXPECT_EQ(f.tokens, fit);
    EXPECT_LE(len + f.tokens, max_len) << "chunk " << chunk;
    if (chunk == 0) {
      EXPECT_EQ(len + f.tokens, max_len);
    }
    g.max_new_tokens = fit + 1;
    try {
      engine.submit({prompt, g, {}, true});
      ADD_FAILURE() << "no error for " << fit + 1 << " new tokens";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("max_model_len " + std::to_string(max_len)), std::string::npos)
          << e.what();
    }
  }
  serve::Engine engine(m, *l->tok, {.max_num_seqs = 1, .max_model_len = 32, .max_queue = 1});
  EXPECT_EQ(engine.max_new_tokens_that_fit(32), 0) << "a prompt of max_model_len tokens leaves no room";
  EXPECT_EQ(engine.max_new_tokens_that_fit(31), 1);
}

}  // namespace
