#include "serve/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "models/config.h"
#include "tessera/error.h"

namespace tessera::serve {

// ---- Stream ----

StreamUpdate Stream::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, timeout, [&] {
    return !pending_.empty() || !pending_reasoning_.empty() || !pending_logprobs_.empty() ||
           (done_ && !taken_done_);
  });
  StreamUpdate u;
  u.text = std::move(pending_);
  pending_.clear();
  u.reasoning = std::move(pending_reasoning_);
  pending_reasoning_.clear();
  u.logprobs = std::move(pending_logprobs_);
  pending_logprobs_.clear();
  u.prompt_tokens = prompt_tokens_;
  u.completion_tokens = completion_tokens_;
  if (done_ && !taken_done_) {
    u.done = true;
    u.finish_reason = finish_reason_;
    u.error = error_;
    taken_done_ = true;
  }
  return u;
}

void Stream::cancel() { cancelled_.store(true); }

void Stream::push(const std::string& text, const std::string& reasoning, std::vector<TokenLogprob> logprobs,
                  int completion_tokens) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_ += text;
    pending_reasoning_ += reasoning;
    for (auto& l : logprobs) pending_logprobs_.push_back(std::move(l));
    completion_tokens_ = completion_tokens;
  }
  cv_.notify_all();
}

void Stream::finish(const std::string& reason, const std::string& error, int completion_tokens) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    done_ = true;
    finish_reason_ = reason;
    error_ = error;
    completion_tokens_ = completion_tokens;
  }
  cv_.notify_all();
}

// ---- StopMatcher ----

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

std::string StopMatcher::push(const std::string& text) {
  if (stopped_) return {};
  held_ += text;
  size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    std::string out = held_.substr(0, first);
    held_.clear();
    stopped_ = true;
    return out;
  }
  // Keep the longest tail that some stop string starts with; everything before it can never be part of one.
  size_t keep = 0;
  for (const auto& s : stops_)
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out = stopped_ ? std::string() : std::move(held_);
  held_.clear();
  return out;
}

// ---- logprobs ----

TokenLogprob token_logprob(const float* logits, int64_t vocab, int32_t token, int top) {
  if (token < 0 || token >= vocab)
    fail("token_logprob: token ", token, " is outside the vocabulary (", vocab, ")");
  if (top < 0 || top > vocab) fail("token_logprob: top must be in 0..", vocab, ", got ", top);
  // log-softmax in double: x - (max + log sum exp(x - max)).
  const float mx = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - mx);
  const double lse = static_cast<double>(mx) + std::log(sum);
  TokenLogprob out;
  out.token = token;
  out.logprob = static_cast<float>(static_cast<double>(logits[token]) - lse);
  if (top > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + top, ids.end(), [logits](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int i = 0; i < top; ++i) {
      const int32_t id = ids[static_cast<size_t>(i)];
      out.top.emplace_back(id, static_cast<float>(static_cast<double>(logits[id]) - lse));
    }
  }
  return out;
}

// ---- Engine ----

struct Engine::Active {
  Active(const Tokenizer& tok, const EngineRequest& r, std::shared_ptr<Stream> s, Clock::time_point arrived)
      : keep_special(r.keep_special),
        stream(std::move(s)),
        decoder(tok, r.skip_special_tokens),
        stops(r.stop),
        reasoning_stops(r.stop),
        parser(make_reasoning_parser(r.reasoning, tok, r.reasoning_open, r.config.eos_token_id,
                                     r.harmony_tool_calls)),
        logprobs(r.logprobs),
        arrived(arrived) {}
  std::vector<int32_t> keep_special;  // EngineRequest::keep_special
  std::shared_ptr<Stream> stream;
  StreamDecoder decoder;
  StopMatcher stops;  // over the content (all the text without a reasoning parser)
  // With a reasoning parser: the reasoning's own stop matcher (a stop string ends the request on either
  // channel, never spanning both), and the channel of the text last given to a matcher; on a change, the
  // other's held-back tail goes out first, so the text leaves in the order the model wrote it.
  StopMatcher reasoning_stops;
  std::unique_ptr<ReasoningParser> parser;
  Channel channel = Channel::Content;
  std::vector<Segment> segments;  // scratch
  bool stopped() const { return stops.stopped() || reasoning_stops.stopped(); }
  // Text of `channel` through its stop matcher into `content` / `reasoning`; returns the bytes let out.
  size_t put(Channel c, const std::string& text, std::string& content, std::string& reasoning) {
    size_t n = 0;
    auto out = [&](Channel ch, const std::string& t) {
      (ch == Channel::Reasoning ? reasoning : content) += t;
      n += t.size();
    };
    if (c != channel) {
      out(channel, (channel == Channel::Reasoning ? reasoning_stops : stops).flush());
      channel = c;
    }
    if (!stopped()) out(c, (c == Channel::Reasoning ? reasoning_stops : stops).push(text));
    return n;
  }
  // logprobs >= 0: each token's entry waits here until its text is out (stop strings hold text back), with
  // the byte range [begin, end) of its text in the decoded sequence.
  int logprobs = -1;
  struct Held {
    size_t begin, end;
    TokenLogprob lp;
  };
  std::deque<Held> held;
  size_t decoded = 0, emitted = 0;  // bytes out of the decoder / out to the stream
  // The entries whose text is out (at the end, `all`: every one left; a stop string: those with text before
  // it).
  std::vector<TokenLogprob> released(bool all) {
    std::vector<TokenLogprob> out;
    while (!held.empty() &&
           (all || held.front().end <= emitted || (stopped() && held.front().begin < emitted))) {
      out.push_back(std::move(held.front().lp));
      held.pop_front();
    }
    if (stopped()) held.clear();
    return out;
  }
  size_t delivered = 0;  // tokens of the slot already turned into text
  uint64_t counted = 0;  // of those, counted in EngineStats::generation_tokens
  Clock::time_point arrived, admitted, last;
  RequestTimes times;
};

namespace {
SlotBatchOptions batch_options(const EngineOptions& o) {
  return {.host_sampling = o.host_sampling,
          .keep_logits = true,
          .decode_rows = o.decode_rows,
          .prefix_reuse = o.prefix_reuse && o.prefill_chunk == 0,
          .prefix_cache = o.prefix_cache,
          .prefix_block = o.prefix_block,
          .kv_cache_bytes = o.kv_cache_memory,
          .draft_model = o.draft_model,
          .draft_tokens = o.draft_tokens,
          .lead_followers = true};
}
}  // namespace

void follow_engine(CausalLM& model, const EngineOptions& options) {
  SlotBatch batch(model, options.max_num_seqs, options.max_model_len, batch_options(options));
  batch.follow();
}

Engine::Engine(CausalLM& model, const Tokenizer& tokenizer, const EngineOptions& options)
    : model_(model),
      tok_(tokenizer),
      options_(options),
      batch_(model, options.max_num_seqs, options.max_model_len, batch_options(options)) {
  if (options.max_queue < 0) fail("serve: max_queue must be >= 0, got ", options.max_queue);
  if (options.speculative_tokens < 0 || options.speculative_tokens > kMaxDraftTokens)
    fail("serve: speculative_tokens must be in 0..", kMaxDraftTokens, ", got ", options.speculative_tokens);
  if (options.speculative_ngram_max < 0 || options.speculative_ngram_max > kMaxDraftTokens)
    fail("serve: speculative_ngram_max must be in 0..", kMaxDraftTokens, ", got ",
         options.speculative_ngram_max);
  if (options.prefill_chunk < 0 || options.prefill_chunk > options.max_model_len)
    fail("serve: prefill_chunk must be in 0..", options.max_model_len, " (max_model_len), got ",
         options.prefill_chunk);
  active_.resize(static_cast<size_t>(options.max_num_seqs));
  stats_.slots = options.max_num_seqs;
  stats_.kv = batch_.kv_cache();
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    accepting_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int Engine::warmup() {
  if (thread_.joinable()) fail("serve: warmup() must run before start()");
  return batch_.warmup(0);
}

void Engine::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
}

int Engine::padded_prompt(int len) const {
  const int chunk = options_.prefill_chunk;
  return chunk > 0 ? (len + chunk - 1) / chunk * chunk : model_.prompt_bucket(len);
}

int Engine::max_new_tokens_that_fit(int prompt_len) const {
  // Two limits: the prompt and its completion together are at most max_model_len tokens (as OpenAI servers
  // count a context), and the slot's cache row holds the prompt as prefilled (padding included) and every new
  // token but the last, which is never fed back.
  return std::min(options_.max_model_len - prompt_len,
                  options_.max_model_len - padded_prompt(prompt_len) + 1);
}

std::shared_ptr<Stream> Engine::submit(EngineRequest request) {
  const int len = static_cast<int>(request.prompt.size());
  if (len == 0) fail("the prompt is empty");
  if (request.logprobs >= 0 && !logprobs_available())
    fail("logprobs are not available on this device: tokens are sampled inside the compiled step");
  if (request.logprobs > 20) fail("logprobs: at most 20 alternatives, got ", request.logprobs);
  // The parser is made again at admission (on the scheduler thread): here only to refuse a format the
  // tokenizer cannot do (harmony without its markers) before the request waits.
  (void)make_reasoning_parser(request.reasoning, tok_, request.reasoning_open, request.config.eos_token_id);
  const int budget = request.config.new_token_budget(len, model_.info().max_position_embeddings);
  if (budget > max_new_tokens_that_fit(len)) {
    const int padded = padded_prompt(len);
    fail("the prompt (", len, " tokens", padded != len ? detail::concat(", ", padded, " as prefilled") : "",
         ") and ", budget, " new tokens need ", std::max(len + budget, padded + budget - 1),
         " positions; this server's context is max_model_len ", options_.max_model_len);
  }
  const KvCacheStats kv = batch_.kv_cache();
  const int64_t blocks = batch_.blocks_for(padded_prompt(len) + budget - 1);
  if (kv.paged && blocks > kv.total_blocks)
    fail("the prompt (", len, " tokens) and ", budget, " new tokens need ", blocks, " KV blocks of ",
         kv.block_tokens, " tokens (", blocks * kv.block_bytes,
         " bytes); this server's --kv-cache-memory holds ", kv.total_blocks, " (",
         kv.total_blocks * kv.block_bytes, " bytes)");
  if (options_.speculative_tokens > 0) {
    request.config.prompt_lookup_num_tokens = options_.speculative_tokens;
    request.config.max_matching_ngram_size = options_.speculative_ngram_max;
  }
  auto stream = std::make_shared<Stream>();
  stream->prompt_tokens_ = len;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!accepting_) fail("the server is shutting down");
    // Room: the free slots (a request waits here until the scheduler admits it) plus max_queue.
    const int room = options_.max_queue + options_.max_num_seqs - stats_.running;
    if (static_cast<int>(waiting_.size()) >= room)
      throw QueueFull(detail::concat("the server is at capacity (", stats_.running, " running, ",
                                     waiting_.size(), " waiting; max_num_seqs ", options_.max_num_seqs,
                                     ", max_queue ", options_.max_queue, ")"));
    waiting_.push_back({std::move(request), stream, Clock::now()});
    stats_.waiting = static_cast<int>(waiting_.size());
  }
  cv_.notify_all();
  return stream;
}

void Engine::drain(std::chrono::milliseconds deadline) {
  const auto until = Clock::now() + deadline;
  {
    std::unique_lock<std::mutex> lk(mu_);
    accepting_ = false;
    cv_.wait_until(lk, until, [&] { return waiting_.empty() && stats_.running == 0; });
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

std::vector<RequestTimes> Engine::take_times() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<RequestTimes> out;
  out.swap(times_);
  return out;
}

// The free slot for `r`: the one whose kept cache gives it the longest prefix; with none, the one keeping the
// least (so a useful prefix stays for its next turn); -1 when none is free.
int Engine::choose_slot(const EngineRequest& r) const {
  if (batch_.prefix_caching()) return batch_.choose_slot(r.prompt);
  int best = -1, best_reuse = 0, least_kept = 0;
  for (int s = 0; s < options_.max_num_seqs; ++s) {
    if (batch_.busy(s)) continue;
    const int reuse = options_.prefix_reuse ? batch_.reusable(s, r.prompt, r.config) : 0;
    const int kept = batch_.kept_tokens(s);
    if (best < 0 || reuse > best_reuse || (reuse == best_reuse && best_reuse == 0 && kept < least_kept)) {
      best = s;
      best_reuse = reuse;
      least_kept = kept;
    }
  }
  return best;
}

void Engine::admit_waiting() {
  while (true) {
    if (batch_.free_slot() < 0) return;
    Waiting w;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (waiting_.empty() || stop_) return;
      // Paged KV memory: the first in line waits until its blocks are free (a cancelled one leaves anyway).
      const Waiting& first = waiting_.front();
      if (!first.stream->cancelled() &&
          !batch_.admissible(padded_prompt(static_cast<int>(first.request.prompt.size()))))
        return;
      w = std::move(waiting_.front());
      waiting_.pop_front();
      stats_.waiting = static_cast<int>(waiting_.size());
    }
    const int slot = choose_slot(w.request);
    if (w.stream->cancelled()) {
      w.stream->finish("cancelled", "", 0);
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.requests_cancelled;
      continue;
    }
    auto a = std::make_unique<Active>(tok_, w.request, w.stream, w.arrived);
    a->admitted = a->last = Clock::now();
    a->times.queue_s = std::chrono::duration<double>(a->admitted - a->arrived).count();
    active_[static_cast<size_t>(slot)] = std::move(a);
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.running;
      stats_.prompt_tokens += w.request.prompt.size();
    }
    try {
      if (options_.prefill_chunk > 0) {
        batch_.prefill_chunked(slot, w.request.prompt, w.request.config, options_.prefill_chunk);
      } else {
        const int64_t before = batch_.reused_tokens();
        batch_.prefill(slot, w.request.prompt, w.request.config);
        std::lock_guard<std::mutex> lk(mu_);
        stats_.prefix_queries += w.request.prompt.size();
        stats_.prefix_hits += static_cast<uint64_t>(batch_.reused_tokens() - before);
      }
    } catch (const std::exception& e) {
      if (batch_.busy(slot)) batch_.release(slot);
      end_slot(slot, "error", e.what());
      continue;
    }
    sync(slot);
  }
}

// Turns the slot's tokens not yet seen into text, and ends the request when the slot finished or a stop
// string completed.
void Engine::sync(int slot) {
  Active* a = active_[static_cast<size_t>(slot)].get();
  if (!a) return;
  const std::vector<int32_t>& ids = batch_.tokens(slot);
  std::string text, reasoning;
  bool stopped = false;
  for (; a->delivered < ids.size() && !stopped; ++a->delivered) {
    const auto now = Clock::now();
    if (a->delivered == 0)
      a->times.ttft_s = std::chrono::duration<double>(now - a->arrived).count();
    else
      a->times.inter_token_s.push_back(std::chrono::duration<double>(now - a->last).count());
    a->last = now;
    const int32_t id = ids[a->delivered];
    size_t piece_size = 0;
    std::string piece;
    if (a->parser) {
      a->segments.clear();
      a->parser->push(id, tok_.token_bytes(id, false), tok_.is_special(id), a->segments);
      for (const Segment& sg : a->segments) piece_size += sg.text.size();
    } else {
      if (std::find(a->keep_special.begin(), a->keep_special.end(), id) != a->keep_special.end())
        piece = a->decoder.flush() + tok_.token_bytes(id, false);  // a marker the request's parser reads
      else
        piece = a->decoder.push(id);
      piece_size = piece.size();
    }
    if (a->logprobs >= 0) {
      // One token arrives per prefill or step, so the kept logits are this token's.
      const int64_t vocab = model_.info().vocab_size;
      a->held.push_back({a->decoded, a->decoded + piece_size,
                         token_logprob(batch_.token_logits(slot, static_cast<int>(a->delivered)).data(),
                                       vocab, id, a->logprobs)});
    }
    a->decoded += piece_size;
    if (a->parser) {
      for (const Segment& sg : a->segments) a->emitted += a->put(sg.channel, sg.text, text, reasoning);
    } else {
      const std::string out = a->stops.push(piece);
      a->emitted += out.size();
      text += out;
    }
    stopped = a->stopped();
  }
  const int count = static_cast<int>(a->delivered);
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.generation_tokens += static_cast<uint64_t>(count) - a->counted;
  }
  a->counted = static_cast<uint64_t>(count);
  const SlotState st = batch_.state(slot);
  if (stopped) {
    a->stream->push(text, reasoning, a->released(false), count);
    batch_.release(slot);
    end_slot(slot, "stop", "");
    return;
  }
  if (st.finish == FinishReason::None) {
    std::vector<TokenLogprob> lps = a->released(false);
    if (!text.empty() || !reasoning.empty() || !lps.empty())
      a->stream->push(text, reasoning, std::move(lps), count);
    return;
  }
  if (st.finish != FinishReason::Error) {
    if (a->parser) {
      a->segments.clear();
      a->parser->finish(a->segments);
      for (const Segment& sg : a->segments) a->put(sg.channel, sg.text, text, reasoning);
      // The held-back tail (the other channel's went out when the text left it).
      (a->channel == Channel::Reasoning ? reasoning : text) +=
          (a->channel == Channel::Reasoning ? a->reasoning_stops : a->stops).flush();
    } else {
      text += a->stops.push(a->decoder.flush());
      text += a->stops.flush();
    }
  }
  a->stream->push(text, reasoning, a->released(true), count);
  batch_.release(slot);
  end_slot(slot,
           st.finish == FinishReason::Length  ? "length"
           : st.finish == FinishReason::Error ? "error"
                                              : "stop",
           st.finish == FinishReason::Error ? "the model produced a non-finite logit" : "");
}

void Engine::end_slot(int slot, const std::string& reason, const std::string& error) {
  std::unique_ptr<Active> a = std::move(active_[static_cast<size_t>(slot)]);
  if (!a) return;
  a->times.e2e_s = std::chrono::duration<double>(Clock::now() - a->arrived).count();
  {  // counted before the consumer hears of the end, so stats() agree with what it saw
    std::lock_guard<std::mutex> lk(mu_);
    --stats_.running;
    stats_.kv = batch_.kv_cache();  // its blocks went back
    if (reason == "cancelled")
      ++stats_.requests_cancelled;
    else
      ++stats_.requests_finished;
    if (reason != "cancelled" && reason != "error") times_.push_back(std::move(a->times));
    if (times_.size() > 100000) times_.erase(times_.begin(), times_.begin() + 50000);  // nobody scrapes
  }
  a->stream->finish(reason, error, static_cast<int>(a->delivered));
  cv_.notify_all();  // drain() waits for running == 0
}

void Engine::loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !waiting_.empty() || stats_.running > 0; });
      if (stop_) break;
    }
    admit_waiting();
    for (int s = 0; s < options_.max_num_seqs; ++s) {
      Active* a = active_[static_cast<size_t>(s)].get();
      if (a && a->stream->cancelled()) {
        batch_.release(s);
        end_slot(s, "cancelled", "");
      }
    }
    if (batch_.running_count() == 0) continue;
    try {
      batch_.step();
    } catch (const std::exception&) {
      // A slot ended with FinishReason::Error; sync() below ends it and gives the others their tokens.
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.steps;
      stats_.speculation = batch_.speculation();
      stats_.kv = batch_.kv_cache();
    }
    for (int s = 0; s < options_.max_num_seqs; ++s) sync(s);
  }
  // Stopping: whatever is left is cancelled.
  for (int s = 0; s < options_.max_num_seqs; ++s)
    if (active_[static_cast<size_t>(s)]) {
      if (batch_.busy(s)) batch_.release(s);
      end_slot(s, "cancelled", "");
    }
  std::deque<Waiting> left;
  {
    std::lock_guard<std::mutex> lk(mu_);
    left.swap(waiting_);
    stats_.waiting = 0;
    stats_.requests_cancelled += left.size();
  }
  for (auto& w : left) w.stream->finish("cancelled", "the server is shutting down", 0);
  try {
    batch_.stop_followers();  // tensor parallelism: the other ranks' follow_engine() returns
  } catch (const std::exception&) {
  }
}

}  // namespace tessera::serve
