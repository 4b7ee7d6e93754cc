// `tessera serve` end to end: the real binary on a free port of 127.0.0.1, real HTTP clients (cpp-httplib),
// the default model. Every server here is bounded: it is stopped with SIGTERM at the end of its test (and
// killed if it does not exit within 30 s), and every request has a timeout. Suite `Cli` (the sanitizer stage
// leaves subprocess runs to stage 1).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "default_model_util.h"
#include "serve_test_util.h"

namespace {

using namespace tessera::testing::serve;

TEST(Cli, ServeChatStreamedAndNotEqualsGenerateAlone) {
  START_OR_FAIL(s, {"--max-num-seqs", "4", "--max-model-len", "256"});
  auto c = client(s.port);
  auto models = c->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "smollm2");

  const std::vector<std::string> prompts = {"What is the capital of France?", "Name three colours.",
                                            "Say hello in Spanish.", "What is 2 + 2?"};
  // Four streamed requests at once, then the same four unstreamed: each equals generate alone.
  std::vector<std::string> streamed(prompts.size());
  std::vector<json> usage(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i)
    threads.emplace_back([&, i] {
      auto ci = client(s.port);
      json body = {{"model", "smollm2"}, {"messages", {{{"role", "user"}, {"content", prompts[i]}}}},
                   {"max_tokens", 16},   {"temperature", 0},
                   {"stream", true},     {"stream_options", {{"include_usage", true}}}};
      auto r = ci->Post("/v1/chat/completions", body.dump(), "application/json");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
      std::vector<json> ev = events(r->body);
      ASSERT_GE(ev.size(), 3u);
      EXPECT_EQ(ev.front()["choices"][0]["delta"]["role"], "assistant");
      for (size_t k = 0; k + 1 < ev.size(); ++k) {
        EXPECT_EQ(ev[k]["object"], "chat.completion.chunk");
        EXPECT_TRUE(ev[k]["usage"].is_null());
        const json& ch = ev[k]["choices"][0];
        if (ch["delta"].contains("content")) streamed[i] += ch["delta"]["content"].get<std::string>();
        EXPECT_EQ(ch["finish_reason"].is_null(), k + 2 < ev.size()) << ev[k];  // only the last choice chunk
      }
      EXPECT_TRUE(ev.back()["choices"].empty());
      usage[i] = ev.back()["usage"];
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    json want = generate_alone(prompts[i], 16);
    EXPECT_EQ(streamed[i], want["text"]) << prompts[i];
    EXPECT_EQ(usage[i]["prompt_tokens"], want["prompt_tokens"]) << prompts[i];
    EXPECT_EQ(usage[i]["completion_tokens"], want["new_tokens"]) << prompts[i];
    json body = {
        {"messages", {{{"role", "user"}, {"content", prompts[i]}}}}, {"max_tokens", 16}, {"temperature", 0}};
    auto r = c->Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    json j = json::parse(r->body);
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(j["choices"][0]["message"]["content"], want["text"]) << prompts[i];
    EXPECT_EQ(j["usage"]["total_tokens"], want["prompt_tokens"].get<int>() + want["new_tokens"].get<int>());
  }
  // Completions with token ids, n = 2 (greedy: the same text twice), and a stop string cut from that text.
  json comp = {{"prompt", {1, 504, 3458, 282}}, {"max_tokens", 12}, {"temperature", 0}, {"n", 2}};
  auto r = c->Post("/v1/completions", comp.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  ASSERT_EQ(j["choices"].size(), 2u);
  const std::string text = j["choices"][0]["text"];
  EXPECT_EQ(j["choices"][1]["text"], text);
  EXPECT_EQ(j["usage"]["completion_tokens"], 24);
  ASSERT_GT(text.size(), 8u) << text;
  comp["n"] = 1;
  comp["stop"] = text.substr(4, 3);
  comp["stream"] = true;
  r = c->Post("/v1/completions", comp.dump(), "application/json");
  ASSERT_TRUE(r);
  std::string cut;
  std::string finish;
  for (const json& e : events(r->body)) {
    cut += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(cut, text.substr(0, text.find(text.substr(4, 3))));
  EXPECT_EQ(finish, "stop");

  auto m = c->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("tessera:num_requests_running{model_name=\"smollm2\"} 0"), std::string::npos)
      << m->body;
  EXPECT_NE(m->body.find("tessera:time_to_first_token_seconds_count"), std::string::npos);
  EXPECT_NE(m->body.find("tessera:generation_tokens_total"), std::string::npos);
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
}

TEST(Cli, ServeRefusesWhatItCannotDoWithTheRightStatus) {
  START_OR_FAIL(s,
                {"--max-num-seqs", "1", "--max-queue", "0", "--max-model-len", "128", "--api-key", "sekret"});
  auto c = client(s.port);
  const httplib::Headers auth = {{"Authorization", "Bearer sekret"}};
  const std::string ok = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})";
  auto r = c->Post("/v1/chat/completions", ok, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "invalid_api_key");
  struct Case {
    std::string path, body;
    int status;
    std::string param;
  };
  const std::vector<Case> cases = {
      {"/v1/chat/completions", "not json", 400, ""},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "x"}]})", 400,
       "tools[0].type"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "n": "2"})", 400, "n"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "model": "x"})", 404,
       "model"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": 500})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": []})", 400, "prompt"},
      {"/v1/nothing", "{}", 404, ""},
  };
  for (const auto& k : cases) {
    r = c->Post(k.path, auth, k.body, "application/json");
    ASSERT_TRUE(r) << k.body;
    EXPECT_EQ(r->status, k.status) << k.body << " -> " << r->body;
    json e = json::parse(r->body);
    ASSERT_TRUE(e.contains("error")) << r->body;
    EXPECT_EQ(e["error"]["param"].is_null() ? std::string() : e["error"]["param"].get<std::string>(), k.param)
        << k.body;
  }
  std::string ids = "[";
  for (int i = 0; i < 150; ++i) ids += (i ? ",5" : "5");
  r = c->Post("/v1/completions", auth, "{\"prompt\": " + ids + "]}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("150 tokens"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("128"), std::string::npos) << r->body;
  r = c->Post("/v1/completions", auth, std::string(5 << 20, ' '), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  // The only slot busy and no queue: 429 with Retry-After. The long request goes alone first; once /metrics
  // shows it running, a second one is refused.
  std::thread busy([&] {
    auto cb = client(s.port);
    cb->Post("/v1/completions", auth,
             R"({"prompt": "Count from 1 to 100: 1, 2, 3, 4,", "max_tokens": 100, "temperature": 0})",
             "application/json");
  });
  const bool running = one_running(s.port);
  EXPECT_TRUE(running) << "the long request never ran";
  if (running) {
    r = c->Post("/v1/completions", auth, R"({"prompt": "hi", "max_tokens": 2})", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 429) << r->body;
    EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  }
  busy.join();
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
}

TEST(Cli, ServeSigtermDuringAStreamEndsItAndExitsZero) {
  START_OR_FAIL(s, {"--max-num-seqs", "2", "--max-model-len", "2048", "--shutdown-timeout", "1"});
  std::string body;
  std::thread t([&] {
    auto c = client(s.port);
    auto r =
        c->Post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 2000, "stream": true})",
                "application/json");
    if (r) body = r->body;
  });
  const bool running = one_running(s.port);  // SIGTERM once the stream runs, not while it is on its way
  EXPECT_TRUE(running) << "the stream never ran";
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  t.join();
  // 2000 tokens take longer than the 1 s it was given (about 8 s on 2 cores): the stream ends with an error
  // event, then [DONE].
  EXPECT_NE(body.find("\"type\":\"service_unavailable\""), std::string::npos) << body;
  EXPECT_NE(body.find("data: [DONE]\n\n"), std::string::npos) << body;
}

// A metric's value in a /metrics body (-1 when it is not there).
double metric(const std::string& body, const std::string& name) {
  const std::string key = "tessera:" + name + "{model_name=\"smollm2\"} ";
  const size_t at = body.find(key);
  return at == std::string::npos ? -1 : std::atof(body.c_str() + at + key.size());
}

// A greedy chat request for `ask` answers what `tessera generate` gives alone.
void expect_chat_as_generate(httplib::Client& c, const std::string& ask, int max_tokens) {
  const json want = generate_alone(ask, max_tokens);
  json body = {
      {"messages", {{{"role", "user"}, {"content", ask}}}}, {"max_tokens", max_tokens}, {"temperature", 0}};
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["message"]["content"], want["text"]) << ask;
}

// Prompt lookup and the prefix cache through the server: a chat that asks the model to copy a text, twice
// with the same long system turn; the answers are those of `tessera generate` alone (no speculation, no
// cache), the metrics count drafts confirmed and prompt tokens reused, and nothing is left running.
TEST(Cli, ServeSpeculatesAndCachesPrefixesWithTheTextsOfGenerate) {
  START_OR_FAIL(s, {"--max-num-seqs", "2", "--max-model-len", "512", "--prefix-cache-block", "16",
                    "--speculative-config", R"({"method": "ngram", "num_speculative_tokens": 5})",
                    "--kv-cache-memory", "64MiB"});
  auto c = client(s.port);
  const std::string text = "the red fox jumps over the lazy dog; the red fox jumps over the lazy dog again";
  for (const std::string& ask : {"Repeat exactly: " + text, "Repeat exactly, twice: " + text}) {
    expect_chat_as_generate(*c, ask, 40);
  }
  auto m = c->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_GT(metric(m->body, "spec_decode_num_draft_tokens_total"), 0) << m->body;
  EXPECT_GT(metric(m->body, "spec_decode_num_accepted_tokens_total"), 0) << m->body;
  EXPECT_GE(metric(m->body, "spec_decode_draft_acceptance_rate"), 0) << m->body;
  EXPECT_GE(metric(m->body, "prefix_cache_hits_total"), 16) << m->body;  // the chat template's head at least
  EXPECT_EQ(metric(m->body, "num_requests_running"), 0) << m->body;
  // 64 MiB of blocks of every layer's keys and values (SmolLM2: 30 layers x 3 kv heads x 64 values).
  EXPECT_GT(metric(m->body, "kv_cache_total_blocks"), 0) << m->body;
  EXPECT_EQ(metric(m->body, "kv_cache_usage_perc"), 0) << m->body;
  EXPECT_GT(metric(m->body, "kv_cache_cached_blocks"), 0) << m->body;  // the prompts' chunks, kept
  EXPECT_EQ(metric(m->body, "num_preemptions_total"), 0) << m->body;
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
}

// --kv-cache-dtype q8_0 through the server: the answers are `tessera generate --kv-cache-dtype q8_0`'s, and
// /metrics gives the bytes a position takes (SmolLM2: 30 layers x 3 kv heads x keys and values x two Q8_0
// blocks of 34 bytes for 64 values).
TEST(Cli, ServeWithAQ8KvCacheGivesTheTextsOfGenerate) {
  START_OR_FAIL(s, {"--max-num-seqs", "2", "--max-model-len", "256", "--kv-cache-dtype", "q8_0"});
  auto c = client(s.port);
  for (const std::string ask : {"Name three colours.", "What is 2 + 2?"}) {
    const json want = generate_alone(ask, 24, "--kv-cache-dtype q8_0");
    json body = {
        {"messages", {{{"role", "user"}, {"content", ask}}}}, {"max_tokens", 24}, {"temperature", 0}};
    auto r = c->Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["choices"][0]["message"]["content"], want["text"]) << ask;
    EXPECT_EQ(want["kv_cache_dtype"], "q8_0");
  }
  auto m = c->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(metric(m->body, "kv_cache_bytes_per_token"), 30 * 3 * 2 * 68) << m->body;
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
}

// A draft model (here the default model drafting for itself: its greedy drafts are nearly all confirmed):
// the answers are `tessera generate`'s, the drafts are counted in the speculation metrics.
TEST(Cli, ServeWithADraftModelGivesTheTextsOfGenerate) {
  const std::string model = tessera::test_models::smollm2_path();
  if (model.empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed (scripts/setup.sh installs it)";
  START_OR_FAIL(s, {"--max-num-seqs", "2", "--max-model-len", "256", "--draft-model", model,
                    "--speculative-config", R"({"num_speculative_tokens": 3, "model": ")" + model + "\"}"});
  auto c = client(s.port);
  for (const std::string ask : {"Count from one to ten.", "Name three colours."}) {
    expect_chat_as_generate(*c, ask, 24);
  }
  auto m = c->Get("/metrics");
  ASSERT_TRUE(m);
  const double drafted = metric(m->body, "spec_decode_num_draft_tokens_total");
  EXPECT_GT(drafted, 0) << m->body;
  EXPECT_GT(metric(m->body, "spec_decode_num_accepted_tokens_total"), drafted / 2) << m->body;
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
}

// A client that closes its socket while waiting for a non-streamed answer: nothing is being written to it,
// yet its row is cancelled and the slot freed within a poll (here: seconds, where the 1500 tokens asked for
// would take far longer), and /metrics counts it as a cancellation.
TEST(Cli, ServeNonStreamedClientThatDisconnectsFreesItsSlot) {
  START_OR_FAIL(s, {"--max-num-seqs", "1", "--max-model-len", "2048"});
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(s.port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 1500, "temperature": 0})";
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  const bool running = one_running(s.port);
  EXPECT_TRUE(running) << "the request never ran";
  ::close(fd);
  const auto t0 = std::chrono::steady_clock::now();
  auto c = client(s.port);
  std::string m;
  double freed_s = -1;
  while (running && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
    auto r = c->Get("/metrics");
    ASSERT_TRUE(r);
    m = r->body;
    if (metric(m, "num_requests_running") == 0 && metric(m, "request_cancelled_total") == 1) {
      freed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::printf("non-streamed disconnect: slot freed %.3f s after the close, %g tokens generated\n", freed_s,
              metric(m, "generation_tokens_total"));
  EXPECT_GE(freed_s, 0) << "the slot was not freed within 30 s:\n" << m;
  EXPECT_LT(freed_s, 3.0);
  EXPECT_LT(metric(m, "generation_tokens_total"), 1500) << m;
  // The slot serves the next request.
  auto r = c->Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
}

// `tessera chat --server URL`: two user turns piped in, then /reset and the first again. The printed replies
// must be the server's non-streamed answers to the same conversations (each reply a line, no prompt: stdin
// is not a terminal).
TEST(Cli, ChatServerPrintsTheServersAnswersToTheConversation) {
  START_OR_FAIL(s, {"--max-num-seqs", "2", "--max-model-len", "512", "--api-key", "sekret"});
  auto c = client(s.port);
  const httplib::Headers auth = {{"Authorization", "Bearer sekret"}};
  const std::string system = "You are a geography teacher.";
  const std::string q1 = "What is the capital of France?", q2 = "And what is the capital of Italy?";
  auto answer = [&](const json& msgs) {
    json body = {{"messages", msgs}, {"max_tokens", 12}, {"temperature", 0}};
    auto r = c->Post("/v1/chat/completions", auth, body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return std::string();
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body)["choices"][0]["message"]["content"].get<std::string>();
  };
  json msgs = {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", q1}}};
  const std::string a1 = answer(msgs);
  msgs.push_back({{"role", "assistant"}, {"content", a1}});
  msgs.push_back({{"role", "user"}, {"content", q2}});
  const std::string a2 = answer(msgs);
  ASSERT_FALSE(a1.empty());
  ASSERT_NE(a1, a2);  // the second turn is answered with the first in view, not alone

  const std::string url = "http://127.0.0.1:" + std::to_string(s.port);
  const std::string flags = " --api-key sekret --greedy --max-new-tokens 12 --system " + shell_quoted(system);
  auto r =
      tessera::testing::run_cli("chat --server " + url + flags, q1 + "\n" + q2 + "\n/reset\n" + q1 + "\n");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, a1 + "\n" + a2 + "\n" + a1 + "\n");
  EXPECT_NE(r.err.find(" tokens, "), std::string::npos) << r.err;  // the stats lines, from the usage chunk
  // The same through the base URL ending in /v1, quiet, with the model named.
  r = tessera::testing::run_cli("chat smollm2 -q --server " + url + "/v1/" + flags,
                                q1 + "\n/exit\n" + q2 + "\n");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, a1 + "\n");
  EXPECT_EQ(r.err, "");

  // Errors: one line on stderr, exit 1; a non-200 answer with the server's own message.
  auto one_error_line = [](const tessera::testing::CliResult& e, const std::string& has) {
    EXPECT_EQ(e.code, 1) << e.err;
    EXPECT_EQ(e.err.rfind("tessera: error: ", 0), 0u) << e.err;
    EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << e.err;
    EXPECT_NE(e.err.find(has), std::string::npos) << "wanted '" << has << "' in: " << e.err;
  };
  auto no_key = c->Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}]})",
                        "application/json");
  ASSERT_TRUE(no_key);
  ASSERT_EQ(no_key->status, 401);
  const std::string no_key_message = json::parse(no_key->body)["error"]["message"];
  r = tessera::testing::run_cli("chat --server " + url, "hi\n");
  one_error_line(r, "answered 401: " + no_key_message);
  EXPECT_EQ(r.out, "");
  r = tessera::testing::run_cli("chat nosuchmodel --api-key sekret --server " + url, "hi\n");
  one_error_line(r, "answered 404: ");
  EXPECT_NE(r.err.find("nosuchmodel"), std::string::npos) << r.err;  // the server's message names it
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
  // Nothing listens there now.
  one_error_line(tessera::testing::run_cli("chat --server " + url, "hi\n"), "cannot reach " + url);
  for (const std::string bad : {"127.0.0.1:8080", "ftp://127.0.0.1", "http://:8080", "http://127.0.0.1:99999",
                                "http://127.0.0.1:80x", "http://user:pw@127.0.0.1", "http://127.0.0.1/?q=1"})
    one_error_line(tessera::testing::run_cli("chat --server " + shell_quoted(bad), "hi\n"), "--server");
  // Flags that choose what the server already chose are refused, by name.
  for (const std::string flag : {"--device xla-cpu", "--dtype float32", "--threads 2", "--warmup",
                                 "--buckets 16", "--max-length 50", "--cache-implementation dynamic"})
    one_error_line(tessera::testing::run_cli("chat --server " + url + " " + flag, "hi\n"),
                   flag.substr(0, flag.find(' ')));
  one_error_line(tessera::testing::run_cli("chat --api-key k", "hi\n"), "--server");
  r = tessera::testing::run_cli("chat --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--server"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--api-key"), std::string::npos) << r.out;
}

// Tensor parallelism: two ranks under tessera launch, rank 0 serving and rank 1 following its steps. Four
// concurrent greedy chat requests (two streamed, two whole) each equal one process's `tessera generate`
// alone; SIGTERM to the launcher drains rank 0, stops rank 1 and the job exits 0. SmolLM2's 3 KV heads do not
// divide 2, so --tp-plan auto replicates attention and splits the MLP and LM head; float32 on both sides.
// The prefix cache (chunks of 16) serves the chat template's shared head to the later requests on both ranks.
TEST(Cli, ServeUnderLaunchWithTensorParallelismEqualsGenerateAlone) {
  START_OR_FAIL(s,
                {"--tp-size", "2", "--tp-plan", "auto", "--dtype", "float32", "--max-num-seqs", "4",
                 "--max-model-len", "256", "--prefix-cache-block", "16"},
                2);
  const std::vector<std::string> prompts = {"What is the capital of France?", "Name three colours.",
                                            "Say hello in Spanish.", "What is 2 + 2?"};
  std::vector<std::string> got(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i)
    threads.emplace_back([&, i] {
      json body = {{"messages", {{{"role", "user"}, {"content", prompts[i]}}}},
                   {"max_tokens", 12},
                   {"temperature", 0},
                   {"stream", i % 2 == 0}};
      auto r = client(s.port)->Post("/v1/chat/completions", body.dump(), "application/json");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      if (i % 2 == 0) {
        for (const json& e : events(r->body))
          if (!e["choices"].empty() && e["choices"][0]["delta"].contains("content"))
            got[i] += e["choices"][0]["delta"]["content"].get<std::string>();
      } else {
        got[i] = json::parse(r->body)["choices"][0]["message"]["content"];
      }
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(got[i], generate_alone(prompts[i], 12, "--dtype float32")["text"]) << prompts[i];
  auto m = client(s.port)->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("tessera:num_requests_running{model_name=\"smollm2\"} 0"), std::string::npos)
      << m->body;
  EXPECT_GE(metric(m->body, "prefix_cache_hits_total"), 16) << m->body;
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
  EXPECT_NE(s.proc->err().find("tessera serve: stopped"), std::string::npos) << s.proc->err();
}

// Under tessera launch without --tp-size: rank 1 says so and the job fails (rank 0 is stopped with it).
TEST(Cli, ServeUnderLaunchNeedsTensorParallelism) {
  auto r = tessera::testing::run_cli("launch --nproc-per-node 2 -- " + std::string(TESSERA_CLI_PATH) +
                                     " serve --port 0 --max-model-len 64");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--tp-size is 1: under tessera launch, serve runs one tensor-parallel model"),
            std::string::npos)
      << r.err;
}

TEST(Cli, ServeFlagErrors) {
  auto r = tessera::testing::run_cli("serve --port 70000");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--port"), std::string::npos) << r.err;
  r = tessera::testing::run_cli("serve --max-num-seqs 0");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--max-num-seqs"), std::string::npos) << r.err;
  r = tessera::testing::run_cli("serve --host 0.0.0.0.0 --port 0");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("0.0.0.0.0"), std::string::npos) << r.err;
  for (const char* bad : {"12XB", "0", "-5", "GiB", "99999999999999999"}) {
    r = tessera::testing::run_cli(std::string("serve --port 0 --kv-cache-memory ") + bad);
    EXPECT_EQ(r.code, 1) << bad;
    EXPECT_NE(r.err.find("--kv-cache-memory"), std::string::npos) << r.err;
  }
  // --speculative-config: vLLM's JSON; each bad key or value named.
  for (const auto& [arg, needle] : std::vector<std::pair<std::string, std::string>>{
           {"'{\"method\": \"eagle\", \"num_speculative_tokens\": 3}'", "method 'eagle' is not supported"},
           {"'{\"method\": \"ngram\"}'", "num_speculative_tokens is required"},
           {"'{\"num_speculative_tokens\": 0}'", "num_speculative_tokens must be an integer in 1..32, got 0"},
           {"'{\"num_speculative_tokens\": 4, \"prompt_lookup_max\": \"x\"}'", "prompt_lookup_max"},
           {"'{\"num_speculative_tokens\": 4, \"draft_model\": \"m\"}'",
            "key 'draft_model' is not supported"},
           {"'{\"num_speculative_tokens\": 4, \"prompt_lookup_min\": 3}'", "prompt_lookup_min must be 1"},
           {"'[1]'", "must be a JSON object"},
           {"'{\"method\": \"draft_model\", \"num_speculative_tokens\": 3}'", "needs \"model\""},
           {"'{\"model\": \"m\", \"num_speculative_tokens\": 3, \"prompt_lookup_max\": 2}'",
            "are for method ngram"},
           {"'{\"method\": \"ngram\", \"model\": \"m\", \"num_speculative_tokens\": 3}'",
            "model is for method draft_model"}}) {
    r = tessera::testing::run_cli("serve --port 0 --speculative-config " + arg);
    EXPECT_EQ(r.code, 1) << arg;
    EXPECT_NE(r.err.find("--speculative-config"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << arg << ": " << r.err;
  }
}

}  // namespace
