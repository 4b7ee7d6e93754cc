// `tessera serve` under concurrent load: 16 streamed greedy chat requests of different prompt and reply
// lengths, started from threads 20 ms apart so that most arrive while others decode (they join a running
// batch), on the cpu device and on xla-cpu. Each streamed text must equal the same request run alone by
// `tessera generate`, and afterwards /metrics must show nothing running and, with --warmup, no compile after
// ready (on xla-cpu, whose shapes are static). Bounded: 16 requests of at most 12 tokens, a 128-position
// context, every request with a timeout, the server stopped with SIGTERM. Suite `Cli` (subprocess runs: stage
// 1 only).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "pjrt_test_util.h"
#include "serve_test_util.h"

namespace {

using namespace tessera::testing::serve;

// 1 to 24 words: with SmolLM2's chat template (its default system turn) 31 to about 60 prompt tokens, so
// every prompt fits the 64-token bucket used on xla-cpu.
const std::vector<std::string> kPrompts = {
    "Hi",
    "Name a colour.",
    "What is the capital of Italy?",
    "Say good morning in French, please.",
    "Write one short sentence about the sea at night.",
    "List three fruits that are yellow when they are ripe.",
    "What do you call a baby cat, and what does it eat in its first weeks?",
    "Explain in one sentence why the sky looks blue on a clear day.",
    "Give me a name for a small red boat that sails on a quiet lake.",
    "Tell me about the number 7 and why so many people say it is their favourite.",
    "Describe a train station early in the morning, before the first train has left.",
    "If you had a garden with roses, tulips and sunflowers, which would you water first and why?",
    "My friend's dog is called Max. He likes to run in the park and chase the ducks. What should we do?",
    "Count from one to five, then say which of those numbers is even and which are odd, in words.",
    "Write the first line of a poem about winter, snow on the roofs, and a warm fire inside the house.",
    "A shop sells apples for two euros a kilo and pears for three. How much do two kilos of each cost?",
};

// The value of `tessera:NAME{model_name="smollm2"}` in a /metrics body; -1 when absent.
double metric(const std::string& body, const std::string& name) {
  const std::string key = "tessera:" + name + "{model_name=\"smollm2\"} ";
  const size_t at = body.find(key);
  return at == std::string::npos ? -1 : std::atof(body.c_str() + at + key.size());
}

struct Streamed {
  int status = 0;
  std::string text;
  json usage;
  std::string finish;
};

// Sends the 16 requests staggered to `tessera serve --max-num-seqs 16 --warmup MODEL_FLAGS`, compares each
// with `tessera generate MODEL_FLAGS REFERENCE_FLAGS` alone and checks /metrics (with `static_shapes`, a PJRT
// device: no compile after the warm-up).
void staggered_requests_equal_generate_alone(const std::vector<std::string>& model_flags,
                                             const std::vector<std::string>& reference_flags,
                                             bool static_shapes) {
  const auto t0 = std::chrono::steady_clock::now();
  auto since_t0 = [&t0] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const size_t n = kPrompts.size();
  auto max_tokens = [](size_t i) { return 8 + static_cast<int>(i % 5); };  // 8..12

  std::string flags;
  for (const std::string& f : model_flags) flags += " " + shell_quoted(f);
  for (const std::string& f : reference_flags) flags += " " + shell_quoted(f);
  std::vector<std::string> args = {"--max-num-seqs", "16", "--max-model-len", "128", "--warmup"};
  args.insert(args.end(), model_flags.begin(), model_flags.end());
  START_OR_FAIL(s, args);
  const double ready_s = since_t0();
  auto c = client(s.port);
  auto m = c->Get("/metrics");
  ASSERT_TRUE(m);
  const double compiles_ready = metric(m->body, "compiles_total");
  const double disk_hits_ready = metric(m->body, "compile_cache_disk_hits_total");
  EXPECT_GE(compiles_ready, 0) << m->body;
  const double tokens_before = metric(m->body, "generation_tokens_total");
  const double steps_before = metric(m->body, "num_decode_steps_total");

  std::vector<Streamed> got(n);
  {
    std::vector<std::jthread> threads;
    for (size_t i = 0; i < n; ++i)
      threads.emplace_back([&, i] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20 * i));  // 0 .. 300 ms
        auto ci = client(s.port);
        json body = {{"model", "smollm2"},
                     {"messages", {{{"role", "user"}, {"content", kPrompts[i]}}}},
                     {"max_tokens", max_tokens(i)},
                     {"temperature", 0},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
        auto r = ci->Post("/v1/chat/completions", body.dump(), "application/json");
        if (!r) return;
        got[i].status = r->status;
        if (r->status != 200) {
          got[i].text = r->body;
          return;
        }
        for (const json& e : events(r->body)) {
          if (!e["usage"].is_null()) got[i].usage = e["usage"];
          if (e["choices"].empty()) continue;
          const json& ch = e["choices"][0];
          if (ch["delta"].contains("content")) got[i].text += ch["delta"]["content"].get<std::string>();
          if (!ch["finish_reason"].is_null()) got[i].finish = ch["finish_reason"];
        }
      });
  }
  const double served_s = since_t0();

  m = c->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(metric(m->body, "num_requests_running"), 0) << m->body;
  EXPECT_EQ(metric(m->body, "num_requests_waiting"), 0) << m->body;
  // The cpu device plans a program per prompt length and per count of running rows, as they come; on PJRT
  // devices the warm-up compiled every shape (one decode program for every mix of slots).
  if (static_shapes) {
    EXPECT_EQ(metric(m->body, "compiles_total"), compiles_ready) << "compiled after --warmup:\n" << m->body;
    EXPECT_EQ(metric(m->body, "compile_cache_disk_hits_total"), disk_hits_ready) << m->body;
  }
  // They ran together: far fewer decode steps than tokens (one request at a time would take one per token).
  int completion_tokens = 0;
  for (const Streamed& g : got)
    completion_tokens += g.usage.is_object() ? g.usage.value("completion_tokens", 0) : 0;
  const double steps = metric(m->body, "num_decode_steps_total") - steps_before;
  EXPECT_EQ(metric(m->body, "generation_tokens_total") - tokens_before, completion_tokens) << m->body;
  EXPECT_LT(steps, completion_tokens / 2.0) << "decode steps " << steps << " for " << completion_tokens
                                            << " tokens: the requests did not share a batch";
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();

  // The references, one process at a time after the server has gone (beside it, on two cores, both were
  // slower: 116 s instead of 80 s on xla-cpu).
  std::vector<json> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = generate_alone(kPrompts[i], max_tokens(i), flags);
  const double references_s = since_t0();
  for (size_t i = 0; i < n; ++i) {
    SCOPED_TRACE("request " + std::to_string(i) + ": " + kPrompts[i]);
    ASSERT_EQ(got[i].status, 200) << got[i].text;
    ASSERT_TRUE(want[i].contains("text"));
    EXPECT_EQ(got[i].text, want[i]["text"]);
    ASSERT_TRUE(got[i].usage.is_object());
    EXPECT_EQ(got[i].usage["prompt_tokens"], want[i]["prompt_tokens"]);
    EXPECT_EQ(got[i].usage["completion_tokens"], want[i]["new_tokens"]);
    EXPECT_LE(want[i]["prompt_tokens"].get<int>(), 64);
    if (want[i]["new_tokens"].get<int>() < max_tokens(i)) {
      EXPECT_EQ(got[i].finish, "stop");
    }
    EXPECT_FALSE(got[i].finish.empty());
  }
  std::printf(
      "[ %s: ready at %.1f s, served at %.1f s (%d tokens in %.0f decode steps), references done at "
      "%.1f s ]\n",
      model_flags.empty() ? "cpu" : model_flags[1].c_str(), ready_s, served_s, completion_tokens, steps,
      references_s);
}

TEST(Cli, ServeSixteenStaggeredStreamsEqualGenerateAloneCpu) {
  staggered_requests_equal_generate_alone({}, {}, false);
}

TEST(Cli, ServeSixteenStaggeredStreamsEqualGenerateAloneXlaCpu) {
  REQUIRE_XLA_CPU();
  // One prompt bucket (every prompt is at most 64 tokens): the warm-up compiles one prefill and the decode
  // step. The references share a compile cache, so that only the first compiles.
  const std::string cache =
      ::testing::TempDir() + "tessera_serve_concurrent_cc_" + std::to_string(::getpid());
  staggered_requests_equal_generate_alone({"--device", "xla-cpu", "--buckets", "64"},
                                          {"--compile-cache-dir", cache}, true);
  std::error_code ec;
  std::filesystem::remove_all(cache, ec);
}

}  // namespace
