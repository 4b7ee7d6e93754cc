// The serving engine: continuous batching of many requests over one SlotBatch (a fixed set of decode slots
// in one static KV cache), run by one scheduler thread. Requests join free slots between decode steps
// (prefill), leave when they finish, stop on a stop string or are cancelled; one decode program serves all
// slots. Text comes out incrementally with stop strings held back until they cannot match, so a stop string
// is never emitted, not even partly. No HTTP here: apps/serve_command.cpp speaks OpenAI's protocol over it.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "serve/reasoning.h"
#include "tessera/batch.h"
#include "tessera/generation.h"
#include "tessera/model.h"
#include "tessera/tokenizer.h"

namespace tessera::serve {

struct EngineOptions {
  int max_num_seqs = 4;   // decode slots
  int max_model_len = 0;  // cache positions per slot (prompt + new tokens); must be > 0
  int max_queue = 64;  // requests that may wait while every slot is busy; beyond, submit() throws QueueFull
  int prefill_chunk = 0;  // > 0: prompts run this many tokens per step (SlotBatch::prefill_chunked)
  SlotBatchOptions::DecodeRows decode_rows = SlotBatchOptions::DecodeRows::Auto;
  // Sample on the host from the logits even where the backend samples inside the step (PJRT devices): what
  // logprobs need there, at the cost of the logits crossing back every step.
  bool host_sampling = false;
  // A request whose prompt starts with what a free slot's cache still holds (the previous turn of a chat)
  // runs only the rest (SlotBatchOptions::prefix_reuse). Off by default: the kept tokens' K/V were computed
  // by other kernels (decode steps, another prefill) than a full prefill would use, so logits may differ in
  // the last bits (<= 1e-5 measured) and a near-tie could flip a greedy token.
  bool prefix_reuse = false;
  // Automatic prefix caching (SlotBatchOptions::prefix_cache): prompts computed in aligned chunks of
  // prefix_block tokens; a request reuses the whole chunks it shares with any slot's prompt, bit-identical to
  // computing them. On by default where it applies (the cpu device).
  bool prefix_cache = true;
  int prefix_block = 256;
  // Speculative decoding by prompt lookup for every request (vLLM's
  // --speculative-config {"method": "ngram", ...}): up to this many draft tokens per step (0: off), n-grams
  // of at most speculative_ngram_max tokens (0: 2). GenerationConfig::prompt_lookup_num_tokens; where the
  // batch cannot verify drafts (SlotBatch::speculates) requests decode one token per step.
  int speculative_tokens = 0;
  int speculative_ngram_max = 0;
  // Paged KV memory (SlotBatchOptions::kv_cache_bytes; the cpu device): the bytes the slots' keys and values
  // may take together (0: every slot may fill max_model_len). Requests then wait for blocks, and running
  // ones are preempted (and resumed, recomputed exactly) when the pool runs out.
  int64_t kv_cache_memory = 0;
  // Speculative decoding with a draft model for every request (SlotBatchOptions::draft_model, draft_tokens);
  // it must outlive the engine.
  CausalLM* draft_model = nullptr;
  int draft_tokens = 5;
};

using Clock = std::chrono::steady_clock;

// One sequence to generate. `config` is complete (defaults merged, max_new_tokens set, seed set or not).
struct EngineRequest {
  std::vector<int32_t> prompt;
  GenerationConfig config;
  std::vector<std::string> stop;  // stop strings (text); the text stops before the first one found
  bool skip_special_tokens = true;
  int logprobs = -1;  // >= 0: each new token's log-probability and this many most likely alternatives (<= 20)
  // Reasoning separated from content (serve/reasoning.h): the text goes to StreamUpdate::reasoning and
  // StreamUpdate::text by the format's rules. `reasoning_open`: the prompt opened a think block (Qwen3).
  ReasoningFormat reasoning = ReasoningFormat::None;
  bool reasoning_open = false;
  // Special tokens the text keeps although skip_special_tokens (a tool-call format's markers, which its
  // parser reads).
  std::vector<int32_t> keep_special = {};
  // Harmony: messages to functions come out as content in the canonical form ToolCallParser(Harmony) reads
  // (make_harmony_parser's tool_calls).
  bool harmony_tool_calls = false;
};

// A generated token's log-probability under the model's raw distribution (log-softmax of its logits before
// temperature, penalties or truncation, as vLLM reports them), with the `top` most likely tokens (most likely
// first; equal logits: the lower id first).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};
// From one row of logits [vocab]. Errors: token outside the vocabulary, top < 0 or > vocab.
TokenLogprob token_logprob(const float* logits, int64_t vocab, int32_t token, int top);

// What a request's consumer sees. Filled by the scheduler thread; read through Stream::wait().
struct StreamUpdate {
  std::string text;                    // new text since the previous update ("" possible): the content
  std::string reasoning;               // new reasoning text (EngineRequest::reasoning set; else "")
  std::vector<TokenLogprob> logprobs;  // EngineRequest::logprobs >= 0: the tokens whose text is out
  bool done = false;                   // no more updates follow
  std::string finish_reason;  // when done: "stop" (eos or stop string), "length", "cancelled", "error"
  std::string error;          // finish_reason "error": the message
  int prompt_tokens = 0, completion_tokens = 0;
};

// The consumer's handle on one request. Thread-safe.
class Stream {
 public:
  // Blocks until there is new text or the end, or `timeout` passes (then an update with no text, not done).
  StreamUpdate wait(std::chrono::milliseconds timeout);
  // Asks the scheduler to stop this request (a client went away); its slot is freed within one step.
  void cancel();
  bool cancelled() const { return cancelled_.load(); }

 private:
  friend class Engine;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_, pending_reasoning_;  // text not yet taken by wait()
  std::vector<TokenLogprob> pending_logprobs_;
  bool done_ = false;
  bool taken_done_ = false;
  std::string finish_reason_, error_;
  int prompt_tokens_ = 0, completion_tokens_ = 0;
  std::atomic<bool> cancelled_{false};
  void push(const std::string& text, const std::string& reasoning, std::vector<TokenLogprob> logprobs,
            int completion_tokens);
  void finish(const std::string& reason, const std::string& error, int completion_tokens);
};

struct EngineStats {
  int running = 0, waiting = 0, slots = 0;
  uint64_t prompt_tokens = 0, generation_tokens = 0, requests_finished = 0, requests_cancelled = 0;
  uint64_t steps = 0;
  uint64_t prefix_queries = 0, prefix_hits = 0;  // prompt tokens looked up / taken from a slot's cache
  SpeculationStats speculation;                  // SlotBatch::speculation()
  KvCacheStats kv;                               // SlotBatch::kv_cache()
};

// Latencies of finished requests, in seconds, for the metrics endpoint.
struct RequestTimes {
  double queue_s = 0, ttft_s = 0, e2e_s = 0;
  std::vector<double> inter_token_s;
};

class Engine {
 public:
  Engine(CausalLM& model, const Tokenizer& tokenizer, const EngineOptions& options);
  ~Engine();  // stops the scheduler (cancelling what runs)
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Compiles the programs the workload needs ahead (SlotBatch::warmup); returns the programs made. Before
  // start() only.
  int warmup();
  // Starts the scheduler thread. Requests submitted before wait in the queue.
  void start();
  // Whether requests may ask for logprobs (EngineRequest::logprobs): not where tokens are sampled inside the
  // compiled step (no logits come back to the host).
  bool logprobs_available() const { return !batch_.device_sampling(); }
  // The most new tokens a prompt of `prompt_len` tokens can get (< 1: the prompt does not fit): prompt + new
  // tokens <= max_model_len, and the prompt as prefilled (bucket or chunk padding) + new tokens - 1 <= the
  // slot's max_model_len cache positions. submit() refuses a request whose budget is larger.
  int max_new_tokens_that_fit(int prompt_len) const;

  // Queues a request. Throws QueueFull when every slot is busy and max_queue requests wait, Error when the
  // engine is stopping or the request cannot fit a slot (the message names the lengths).
  std::shared_ptr<Stream> submit(EngineRequest request);
  struct QueueFull : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

  // Stops taking requests; waits up to `deadline` for running and waiting ones to finish, then cancels the
  // rest and stops the scheduler.
  void drain(std::chrono::milliseconds deadline);

  EngineStats stats() const;
  // Times of the requests finished since the last call (the metrics endpoint folds them into histograms).
  std::vector<RequestTimes> take_times();
  const EngineOptions& options() const { return options_; }

 private:
  struct Active;
  void loop();
  void admit_waiting();
  int choose_slot(const EngineRequest& r) const;
  void sync(int slot);
  int padded_prompt(int len) const;
  void end_slot(int slot, const std::string& reason, const std::string& error);

  CausalLM& model_;
  const Tokenizer& tok_;
  EngineOptions options_;
  SlotBatch batch_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Waiting {
    EngineRequest request;
    std::shared_ptr<Stream> stream;
    Clock::time_point arrived;
  };
  std::deque<Waiting> waiting_;
  bool accepting_ = true, stop_ = false;
  EngineStats stats_;
  std::vector<RequestTimes> times_;

  std::vector<std::unique_ptr<Active>> active_;  // per slot; scheduler thread only
  std::thread thread_;
};

// Tensor parallelism over MPI: rank 0 runs the Engine (whose batch leads, SlotBatchOptions::lead_followers);
// every other rank calls this with the same model options and EngineOptions. It replays rank 0's batch
// operations (warmup included) until rank 0's engine stops, then returns.
void follow_engine(CausalLM& model, const EngineOptions& options);

// Holds back text that may be the start of a stop string: push() returns what is safe to emit; once a stop
// string is complete it returns the text before it and stopped() is true.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  std::string push(const std::string& text);
  std::string flush();  // the held-back tail, at the end of a sequence that did not stop (push() may follow)
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace tessera::serve
