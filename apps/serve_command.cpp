#include "serve_command.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "cli_env.h"
#include "http_server.h"
#include "serve/openai.h"
#include "serve/responses.h"
#include "tessera/constraint.h"
#include "tessera/error.h"

namespace tessera::cli {

namespace {

using nlohmann::ordered_json;
using serve::ApiError;
using serve::Endpoint;

enum class Phase { Loading, Ready, Draining };

// A Prometheus histogram with fixed bucket bounds (seconds).
struct Histogram {
  explicit Histogram(std::vector<double> bounds) : le(std::move(bounds)), counts(le.size(), 0) {}
  std::vector<double> le;
  std::vector<uint64_t> counts;  // per bucket, not cumulative
  uint64_t count = 0;
  double sum = 0;
  void add(double v) {
    for (size_t i = 0; i < le.size(); ++i)
      if (v <= le[i]) {
        ++counts[i];
        break;
      }
    ++count;
    sum += v;
  }
};

std::vector<double> latency_bounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
          0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
}

struct Server {
  const ServeSettings& settings;
  std::atomic<Phase> phase{Phase::Loading};
  std::unique_ptr<ServedLoad> loaded;
  std::unique_ptr<serve::Engine> engine;
  serve::ServedModel served;
  std::atomic<size_t> kv_bytes_per_token{0};  // the loaded model's (ModelInfo), 0 while loading
  std::atomic<uint64_t> next_id{1};
  int64_t started = 0;
  const http::Server* http = nullptr;

  std::mutex metrics_mu;
  Histogram ttft{latency_bounds()}, itl{latency_bounds()}, e2e{latency_bounds()}, queue{latency_bounds()};
  std::map<std::string, uint64_t> finished;  // by finish reason
  uint64_t rejected_queue_full = 0;

  explicit Server(const ServeSettings& s) : settings(s) {}

  void fold_times() {
    if (!engine) return;
    auto times = engine->take_times();
    std::lock_guard<std::mutex> lk(metrics_mu);
    for (const auto& t : times) {
      ttft.add(t.ttft_s);
      e2e.add(t.e2e_s);
      queue.add(t.queue_s);
      for (double x : t.inter_token_s) itl.add(x);
    }
  }
};

http::Response error_response(const ApiError& e) {
  http::Response r;
  r.status = e.status;
  r.body = serve::error_body(e).dump();
  if (e.status == 429) r.headers.push_back({"Retry-After", "1"});
  return r;
}

// The API key check: an error when the request lacks it.
std::optional<ApiError> unauthorised(const Server& s, const http::Request& req) {
  if (s.settings.api_key.empty() || req.header("Authorization") == "Bearer " + s.settings.api_key)
    return std::nullopt;
  return ApiError(401, "a valid API key is required (Authorization: Bearer <key>)", "",
                  "authentication_error", "invalid_api_key");
}

std::optional<ApiError> not_ready(const Server& s) {
  const Phase p = s.phase.load();
  if (p == Phase::Ready) return std::nullopt;
  return ApiError(503, p == Phase::Loading ? "the model is loading" : "the server is shutting down", "",
                  "service_unavailable");
}

// JSON endpoints take only JSON: a body a browser may send cross-site without a CORS preflight (text/plain,
// a form) is refused, so a web page cannot drive a local server.
std::optional<ApiError> not_json(const http::Request& req) {
  std::string type = req.header("Content-Type");
  type = type.substr(0, type.find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.pop_back();
  for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (type == "application/json") return std::nullopt;
  return ApiError(415,
                  type.empty() ? "the request needs Content-Type: application/json"
                               : "Content-Type '" + type + "' is not accepted: send application/json",
                  "", "invalid_request_error", "unsupported_media_type");
}

std::string metrics_text(Server& s) {
  s.fold_times();
  std::ostringstream o;
  const std::string label = "{model_name=\"" + s.served.name + "\"}";
  const serve::EngineStats st = s.engine ? s.engine->stats() : serve::EngineStats{};
  auto gauge = [&](const char* name, const char* help, double v) {
    o << "# HELP tessera:" << name << " " << help << "\n# TYPE tessera:" << name << " gauge\ntessera:" << name
      << label << " " << v << "\n";
  };
  auto counter = [&](const char* name, const char* help, double v) {
    o << "# HELP tessera:" << name << " " << help << "\n# TYPE tessera:" << name
      << " counter\ntessera:" << name << label << " " << v << "\n";
  };
  gauge("num_requests_running", "Requests in decode slots.", st.running);
  if (s.http) gauge("http_connections_open", "Open client connections.", s.http->open_connections());
  gauge("num_requests_waiting", "Requests waiting for a slot.", st.waiting);
  if (st.kv.paged) {
    gauge("kv_cache_usage_perc", "Fraction of the KV block pool held by requests (1 = all).",
          st.kv.total_blocks
              ? static_cast<double>(st.kv.used_blocks) / static_cast<double>(st.kv.total_blocks)
              : 0.0);
    gauge("kv_cache_cached_blocks", "KV blocks held by finished requests' prompts for prefix caching.",
          static_cast<double>(st.kv.cached_blocks));
    gauge("kv_cache_total_blocks", "KV blocks in the pool.", static_cast<double>(st.kv.total_blocks));
    gauge("kv_cache_block_tokens", "Positions a KV block holds.", st.kv.block_tokens);
    gauge("kv_cache_block_bytes", "Bytes of a KV block (every layer's keys and values).",
          static_cast<double>(st.kv.block_bytes));
    gauge("num_requests_preempted", "Requests preempted now, waiting for KV blocks to resume.",
          st.kv.preempted);
  } else {
    gauge("kv_cache_usage_perc", "Fraction of KV cache slots in use (1 = all).",
          st.slots ? static_cast<double>(st.running) / st.slots : 0.0);
  }
  gauge("kv_cache_bytes_per_token",
        "Bytes one cache position takes: every layer's keys and values in the KV cache's dtype "
        "(--kv-cache-dtype).",
        static_cast<double>(s.kv_bytes_per_token.load()));
  counter("num_preemptions_total", "Requests preempted (KV blocks taken back; resumed by recompute).",
          static_cast<double>(st.kv.preemptions));
  counter("prompt_tokens_total", "Prompt tokens prefilled.", static_cast<double>(st.prompt_tokens));
  counter("generation_tokens_total", "Tokens generated.", static_cast<double>(st.generation_tokens));
  counter("prefix_cache_queries_total", "Prompt tokens looked up in the slots' kept caches.",
          static_cast<double>(st.prefix_queries));
  counter("prefix_cache_hits_total", "Prompt tokens taken from a slot's kept cache instead of prefilled.",
          static_cast<double>(st.prefix_hits));
  counter("num_decode_steps_total", "Batched decode steps run.", static_cast<double>(st.steps));
  counter("spec_decode_num_drafts_total", "Prompt-lookup drafts verified.",
          static_cast<double>(st.speculation.drafts));
  counter("spec_decode_num_draft_tokens_total", "Draft tokens verified.",
          static_cast<double>(st.speculation.draft_tokens));
  counter("spec_decode_num_accepted_tokens_total", "Draft tokens the model confirmed.",
          static_cast<double>(st.speculation.accepted_tokens));
  gauge("spec_decode_draft_acceptance_rate", "Confirmed draft tokens / draft tokens verified (0 before any).",
        st.speculation.draft_tokens > 0 ? static_cast<double>(st.speculation.accepted_tokens) /
                                              static_cast<double>(st.speculation.draft_tokens)
                                        : 0.0);
  counter("request_cancelled_total", "Requests cancelled (client gone, shutdown).",
          static_cast<double>(st.requests_cancelled));
  {
    std::lock_guard<std::mutex> lk(s.metrics_mu);
    o << "# HELP tessera:request_success_total Requests finished, by finish reason.\n"
         "# TYPE tessera:request_success_total counter\n";
    for (const char* r : {"stop", "length"}) {
      const auto it = s.finished.find(r);
      o << "tessera:request_success_total{model_name=\"" << s.served.name << "\",finished_reason=\"" << r
        << "\"} " << (it == s.finished.end() ? 0 : it->second) << "\n";
    }
    counter("request_rejected_queue_full_total", "Requests answered 429 (queue full).",
            static_cast<double>(s.rejected_queue_full));
    auto hist = [&](const char* name, const char* help, const Histogram& h) {
      o << "# HELP tessera:" << name << " " << help << "\n# TYPE tessera:" << name << " histogram\n";
      uint64_t cum = 0;
      for (size_t i = 0; i < h.le.size(); ++i) {
        cum += h.counts[i];
        o << "tessera:" << name << "_bucket{model_name=\"" << s.served.name << "\",le=\"" << h.le[i] << "\"} "
          << cum << "\n";
      }
      o << "tessera:" << name << "_bucket{model_name=\"" << s.served.name << "\",le=\"+Inf\"} " << h.count
        << "\n";
      o << "tessera:" << name << "_sum" << label << " " << h.sum << "\n";
      o << "tessera:" << name << "_count" << label << " " << h.count << "\n";
    };
    hist("time_to_first_token_seconds", "Time from arrival to the first token.", s.ttft);
    hist("inter_token_latency_seconds", "Time between a request's tokens.", s.itl);
    hist("e2e_request_latency_seconds", "Time from arrival to the last token.", s.e2e);
    hist("request_queue_time_seconds", "Time waiting for a slot.", s.queue);
  }
  if (s.loaded) {
    const CompileReport c = s.loaded->model.compile_stats();
    counter("compiles_total", "Programs compiled.", c.compiles);
    counter("compile_cache_disk_hits_total", "Programs loaded from the on-disk compile cache.", c.disk_hits);
    counter("compile_cache_hits_total", "Programs found in memory.", c.hits);
  }
  return o.str();
}

// The engine requests of one HTTP request (n choices), submitted together.
std::vector<std::shared_ptr<serve::Stream>> submit_all(Server& s, serve::ParsedRequest& r) {
  const int len = static_cast<int>(r.prompt.size());
  GenerationConfig& g = r.config;
  const int fit = s.engine->max_new_tokens_that_fit(len);
  if (fit < 1)
    throw ApiError(
        400,
        detail::concat("the prompt has ", len, " tokens; this server's context (max_model_len) is ",
                       s.engine->options().max_model_len, " tokens"),
        r.endpoint == Endpoint::Chat ? "messages" : "prompt", "invalid_request_error",
        "context_length_exceeded");
  if (!r.max_tokens_given) {
    // No max_tokens: the model's generation_config.json length when it sets one, else what fits the context;
    // never more than fits.
    int budget = fit;
    if (g.max_new_tokens || !g.max_length_is_default) {
      try {
        budget = std::min(fit, g.new_token_budget(len, s.loaded->model.info().max_position_embeddings));
      } catch (const Error&) {
        budget = fit;
      }
    }
    g.max_new_tokens = budget;
  }
  if (r.logprobs >= 0 && !s.engine->logprobs_available())
    throw ApiError(
        400,
        "'logprobs' is not available on this device: its tokens are sampled inside the compiled step and no "
        "logits come back (start the server with --host-sampling)",
        "logprobs");
  std::vector<std::shared_ptr<serve::Stream>> streams;
  try {
    for (int i = 0; i < r.n; ++i) {
      serve::EngineRequest er{r.prompt,
                              g,
                              r.stop,
                              true,
                              r.logprobs,
                              r.reasoning,
                              r.reasoning_open,
                              r.keep_special,
                              r.harmony_tool_calls()};
      if (g.seed && i > 0) er.config.seed = *g.seed + static_cast<uint64_t>(i);
      streams.push_back(s.engine->submit(std::move(er)));
    }
  } catch (const serve::Engine::QueueFull& e) {
    for (auto& st : streams) st->cancel();
    {
      std::lock_guard<std::mutex> lk(s.metrics_mu);
      ++s.rejected_queue_full;
    }
    throw ApiError(429, e.what(), "", "rate_limit_exceeded");
  } catch (const Error& e) {
    for (auto& st : streams) st->cancel();
    throw ApiError(400, e.what(), "max_tokens", "invalid_request_error", "context_length_exceeded");
  }
  return streams;
}

// A request that ended without its text (the model failed, or the server cancelled it): what the client gets.
std::optional<ApiError> failure(const serve::StreamUpdate& u) {
  if (u.finish_reason == "error") return ApiError(500, u.error, "", "server_error");
  if (u.finish_reason == "cancelled")
    return ApiError(503, u.error.empty() ? "the request was cancelled" : u.error, "", "service_unavailable");
  return std::nullopt;
}

void count_finish(Server& s, const std::string& reason) {
  std::lock_guard<std::mutex> lk(s.metrics_mu);
  ++s.finished[reason];
}

// A generation request, on a thread of its own (http::Route::blocking): parsed, submitted, then answered
// whole or streamed as Server-Sent Events. The client is polled between updates (each new token, or 200 ms
// without one): once it has gone, its rows are cancelled and their slots freed within a step.
void handle_generate(Server& s, Endpoint endpoint, const http::Request& req, http::Exchange& ex) {
  serve::ParsedRequest r;
  std::vector<std::shared_ptr<serve::Stream>> streams;
  try {
    r = serve::parse_request(endpoint, req.body, s.served);
    streams = submit_all(s, r);
  } catch (const ApiError& e) {
    ex.respond(error_response(e));
    return;
  }
  auto cancel_all = [&] {
    for (auto& st : streams) st->cancel();
  };
  const std::string id = std::string(endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-") +
                         std::to_string(s.started) + "-" + std::to_string(s.next_id.fetch_add(1));
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const int prompt_tokens = static_cast<int>(r.prompt.size());
  const bool reasoning = r.reasoning != serve::ReasoningFormat::None;
  // Tool calls parsed out of each choice's text (tool_choice other than "none"); ids
  // call_<request>_<choice>_<k>.
  const bool tools = r.tool_format != serve::ToolCallFormat::None;
  auto call_prefix = [&](size_t choice) {
    return "call_" + id.substr(id.find('-') + 1) + "_" + std::to_string(choice) + "_";
  };
  // A choice that made calls and ended on its own finishes with "tool_calls".
  auto finish_with_calls = [](const std::string& reason, bool calls) {
    return calls && reason == "stop" ? std::string("tool_calls") : reason;
  };
  if (!r.stream) {
    std::vector<serve::ChoiceResult> choices(streams.size());
    for (size_t i = 0; i < streams.size(); ++i) {
      std::vector<serve::TokenLogprob> lps;
      if (reasoning) choices[i].reasoning.emplace();
      while (true) {
        serve::StreamUpdate u = streams[i]->wait(std::chrono::milliseconds(200));
        if (!u.done && ex.client_gone()) return cancel_all();
        choices[i].text += u.text;
        if (reasoning) *choices[i].reasoning += u.reasoning;
        for (auto& l : u.logprobs) lps.push_back(std::move(l));
        choices[i].completion_tokens = u.completion_tokens;
        if (!u.done) continue;
        if (auto e = failure(u)) {
          cancel_all();
          return ex.respond(error_response(*e));
        }
        choices[i].finish_reason = u.finish_reason;
        if (tools) {
          serve::ToolCallParser parser(r.tool_format);
          serve::ToolCallParser::Output o = parser.push(choices[i].text, true);
          choices[i].text = std::move(o.content);
          choices[i].tool_calls = std::move(o.calls);
          choices[i].tool_call_id_prefix = call_prefix(i);
          choices[i].finish_reason = finish_with_calls(u.finish_reason, !choices[i].tool_calls.empty());
        }
        if (r.logprobs >= 0) {
          size_t offset = 0;
          choices[i].logprobs = serve::logprobs_json(endpoint, *s.served.tokenizer, lps, offset);
        }
        count_finish(s, choices[i].finish_reason);
        break;
      }
    }
    http::Response res;
    res.body = serve::response_json(endpoint, id, created, s.served.name, choices, prompt_tokens).dump();
    return ex.respond(std::move(res));
  }
  const bool usage = r.include_usage, logprobs = r.logprobs >= 0;
  const std::string& model = s.served.name;
  ex.begin_stream("text/event-stream", {{"Cache-Control", "no-cache"}});
  auto put = [&](const std::string& text) { return ex.write(text); };
  std::vector<size_t> offsets(streams.size(), 0);  // completions' text_offset per choice
  if (endpoint == Endpoint::Chat) {
    const std::string empty;
    for (size_t i = 0; i < streams.size(); ++i)
      if (!put(serve::sse(
              serve::chunk_json(endpoint, id, created, model, static_cast<int>(i), &empty, true, "", usage))))
        return cancel_all();
  }
  std::vector<bool> done(streams.size(), false);
  size_t left = streams.size();
  int completion = 0;
  std::vector<serve::ToolCallParser> parsers(streams.size(), serve::ToolCallParser(r.tool_format));
  std::vector<int> calls_sent(streams.size(), 0);
  // A choice's calls as OpenAI streams them: id, type and name first, then the arguments.
  auto put_calls = [&](size_t i, const std::vector<serve::ToolCall>& calls) {
    for (const serve::ToolCall& c : calls) {
      const int k = calls_sent[i]++;
      const std::string call_id = call_prefix(i) + std::to_string(k);
      if (!put(serve::sse(serve::tool_call_chunk_json(id, created, model, static_cast<int>(i), k, &call_id,
                                                      &c.name, "", usage))) ||
          !put(serve::sse(serve::tool_call_chunk_json(id, created, model, static_cast<int>(i), k, nullptr,
                                                      nullptr, c.arguments, usage))))
        return false;
    }
    return true;
  };
  while (left > 0) {
    for (size_t i = 0; i < streams.size(); ++i) {
      if (done[i]) continue;
      if (ex.client_gone()) return cancel_all();
      serve::StreamUpdate u = streams[i]->wait(std::chrono::milliseconds(streams.size() > 1 ? 20 : 200));
      std::vector<serve::ToolCall> calls;
      if (tools) {
        serve::ToolCallParser::Output o = parsers[i].push(u.text, u.done);
        u.text = std::move(o.content);
        calls = std::move(o.calls);
      }
      if (!u.text.empty() || !u.reasoning.empty() || !u.logprobs.empty()) {
        const nlohmann::ordered_json lp =
            logprobs ? serve::logprobs_json(endpoint, *s.served.tokenizer, u.logprobs, offsets[i])
                     : nlohmann::ordered_json(nullptr);
        if (!put(serve::sse(serve::chunk_json(endpoint, id, created, model, static_cast<int>(i), &u.text,
                                              false, "", usage, lp, reasoning ? &u.reasoning : nullptr))))
          return cancel_all();
      }
      if (!calls.empty() && !put_calls(i, calls)) return cancel_all();
      if (!u.done) continue;
      done[i] = true;
      --left;
      completion += u.completion_tokens;
      if (auto e = failure(u)) {
        put(serve::sse(serve::error_body(*e)));
        put("data: [DONE]\n\n");
        ex.end();
        return cancel_all();
      }
      const std::string reason = finish_with_calls(u.finish_reason, calls_sent[i] > 0);
      count_finish(s, reason);
      if (!put(serve::sse(serve::chunk_json(endpoint, id, created, model, static_cast<int>(i), nullptr, false,
                                            reason, usage))))
        return cancel_all();
    }
  }
  if (usage &&
      !put(serve::sse(serve::usage_chunk_json(endpoint, id, created, model, prompt_tokens, completion))))
    return;
  put("data: [DONE]\n\n");
  ex.end();
}

// POST /v1/responses: one answer (n = 1), whole or as the Responses API's typed events.
void handle_responses(Server& s, const http::Request& req, http::Exchange& ex) {
  serve::ResponsesRequest rr;
  std::vector<std::shared_ptr<serve::Stream>> streams;
  try {
    rr = serve::parse_responses_request(req.body, s.served);
    streams = submit_all(s, rr.parsed);
  } catch (const ApiError& e) {
    ex.respond(error_response(e));
    return;
  }
  const serve::ParsedRequest& r = rr.parsed;
  serve::Stream& stream = *streams.at(0);
  const serve::ResponseIds ids{std::to_string(s.started) + "-" + std::to_string(s.next_id.fetch_add(1))};
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  serve::ResponsesOutput out;
  out.input_tokens = static_cast<int>(r.prompt.size());
  serve::ToolCallParser parser(r.tool_format);
  std::optional<serve::ResponsesEventStream> events;
  if (r.stream) {
    events.emplace(ids, created, s.served.name, rr.echo);
    ex.begin_stream("text/event-stream", {{"Cache-Control", "no-cache"}});
    if (!ex.write(events->begin())) return stream.cancel();
  }
  while (true) {
    serve::StreamUpdate u = stream.wait(std::chrono::milliseconds(200));
    if (!u.done && ex.client_gone()) return stream.cancel();
    serve::ToolCallParser::Output o = parser.push(u.text, u.done);
    out.text += o.content;
    out.reasoning += u.reasoning;
    out.output_tokens = u.completion_tokens;
    if (events) {
      std::string chunk = events->reasoning_delta(u.reasoning);  // in order: each event takes a number
      chunk += events->text_delta(o.content);
      for (const serve::ToolCall& c : o.calls) chunk += events->call(c);
      if (!chunk.empty() && !ex.write(chunk)) return stream.cancel();
    }
    for (auto& c : o.calls) out.calls.push_back(std::move(c));
    if (!u.done) continue;
    if (auto e = failure(u)) {
      if (!events) return ex.respond(error_response(*e));
      ex.write(events->error(e->what()));
      return ex.end();
    }
    out.finish_reason = !out.calls.empty() && u.finish_reason == "stop" ? "tool_calls" : u.finish_reason;
    count_finish(s, out.finish_reason);
    break;
  }
  if (events) {
    ex.write(events->end(out));
    return ex.end();
  }
  http::Response res;
  res.body = serve::response_object(ids, created, s.served.name, rr.echo, &out)
                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  ex.respond(std::move(res));
}

// An answer given at once (on the I/O thread).
http::Route answer(http::Response r) {
  return {[r = std::move(r)](const http::Request&, http::Exchange& ex) { ex.respond(r); }, false, {}};
}
http::Route answer(const ApiError& e) { return answer(error_response(e)); }

// Chooses what answers a request: the cheap endpoints and every refusal run inline; generation runs on a
// thread of its own.
http::Route route(Server& s, const http::Request& req) {
  const bool get = req.method == "GET", post = req.method == "POST";
  const std::string& p = req.path;
  const bool generation = p == "/v1/chat/completions" || p == "/v1/completions" || p == "/v1/responses";
  const bool known = generation || p == "/health" || p == "/v1/models" || p == "/metrics";
  if (!known)
    return answer(ApiError(404, "no such endpoint: " + req.method + " " + p, "", "not_found_error"));
  if (generation ? !post : !get)
    return answer(ApiError(
        405, "method not allowed: " + req.method + " " + p + " (use " + (generation ? "POST" : "GET") + ")"));
  if (p == "/health") {
    if (auto e = not_ready(s)) return answer(*e);
    http::Response r;
    r.body = "{\"status\":\"ok\"}";
    return answer(std::move(r));
  }
  if (p == "/metrics") {
    http::Response r;
    r.content_type = "text/plain; version=0.0.4";
    r.body = metrics_text(s);
    return answer(std::move(r));
  }
  if (auto e = unauthorised(s, req)) return answer(*e);
  if (auto e = not_ready(s)) return answer(*e);
  if (p == "/v1/models") {
    ordered_json m = {{"id", s.served.name},
                      {"object", "model"},
                      {"created", s.started},
                      {"owned_by", "tessera"},
                      {"max_model_len", s.engine->options().max_model_len}};
    http::Response r;
    r.body = ordered_json({{"object", "list"}, {"data", ordered_json::array({m})}}).dump();
    return answer(std::move(r));
  }
  if (auto e = not_json(req)) return answer(*e);
  const Endpoint endpoint = p == "/v1/chat/completions" ? Endpoint::Chat : Endpoint::Completion;
  http::Route rt;
  rt.blocking = true;
  const bool responses = p == "/v1/responses";
  rt.handler = [&s, endpoint, responses](const http::Request& q, http::Exchange& ex) {
    try {
      if (responses)
        handle_responses(s, q, ex);
      else
        handle_generate(s, endpoint, q, ex);
    } catch (const std::exception& e) {  // a server fault (bad input is an ApiError, answered above)
      ex.respond(error_response(ApiError(500, e.what(), "", "server_error")));
    }
  };
  rt.busy = error_response(ApiError(429, "every request slot and queue place is taken; try again later", "",
                                    "rate_limit_exceeded"));
  return rt;
}

}  // namespace

namespace {
// --speculative-config: vLLM's JSON form; method "ngram" (prompt lookup) or "draft_model" (with "model"; the
// method is implied by "model"). Errors name the flag and key.
void parse_speculative_config(const std::string& text, ServeSettings& s) {
  serve::EngineOptions& e = s.engine;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw CLI::ValidationError("--speculative-config", "must be a JSON object, got '" + text + "'");
  auto bad = [](const std::string& why) { throw CLI::ValidationError("--speculative-config", why); };
  auto count = [&](const char* key, int lo) -> int {
    const nlohmann::json& v = j.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > kMaxDraftTokens)
      bad(std::string(key) + " must be an integer in " + std::to_string(lo) + ".." +
          std::to_string(kMaxDraftTokens) + ", got " + v.dump());
    return v.get<int>();
  };
  std::string method, model;
  int min_ngram = 1;
  bool lookup_keys = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "model") {
      if (!v.is_string() || v.get<std::string>().empty())
        bad("model must be a path or name, got " + v.dump());
      model = v.get<std::string>();
    } else if (key == "method") {
      if (!v.is_string()) bad("method must be a string, got " + v.dump());
      method = v.get<std::string>();
    } else if (key == "num_speculative_tokens") {
      e.speculative_tokens = count("num_speculative_tokens", 1);
    } else if (key == "prompt_lookup_max") {
      e.speculative_ngram_max = count("prompt_lookup_max", 1);
      lookup_keys = true;
    } else if (key == "prompt_lookup_min") {
      min_ngram = count("prompt_lookup_min", 1);
      lookup_keys = true;
    } else {
      bad("key '" + key +
          "' is not supported (supported: method, model, num_speculative_tokens, prompt_lookup_max, "
          "prompt_lookup_min)");
    }
  }
  if (method.empty()) method = model.empty() ? "ngram" : "draft_model";
  if (method != "ngram" && method != "draft_model")
    bad("method '" + method +
        "' is not supported (supported: ngram, prompt lookup; draft_model, with \"model\")");
  if (e.speculative_tokens == 0) bad("num_speculative_tokens is required");
  if (method == "draft_model") {
    if (model.empty()) bad("method draft_model needs \"model\": a model with the same vocabulary");
    if (lookup_keys) bad("prompt_lookup_max and prompt_lookup_min are for method ngram");
    s.draft_model = model;
    e.draft_tokens = e.speculative_tokens;
    e.speculative_tokens = 0;
    return;
  }
  if (!model.empty()) bad("model is for method draft_model, not ngram");
  if (min_ngram != 1)
    bad("prompt_lookup_min must be 1 (the lookup tries every n-gram from prompt_lookup_max down to 1), got " +
        std::to_string(min_ngram));
}

// A size in bytes: digits with an optional K/M/G/T (powers of 1000) or KiB/MiB/GiB/TiB (powers of 1024).
int64_t parse_byte_size(const std::string& flag, const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  const std::string digits = text.substr(0, i), unit = text.substr(i);
  static const std::pair<const char*, int64_t> units[] = {{"", 1},
                                                          {"B", 1},
                                                          {"K", 1000},
                                                          {"KB", 1000},
                                                          {"M", 1000000},
                                                          {"MB", 1000000},
                                                          {"G", 1000000000},
                                                          {"GB", 1000000000},
                                                          {"T", 1000000000000},
                                                          {"TB", 1000000000000},
                                                          {"KiB", 1 << 10},
                                                          {"MiB", 1 << 20},
                                                          {"GiB", int64_t{1} << 30},
                                                          {"TiB", int64_t{1} << 40}};
  int64_t scale = 0;
  for (const auto& [name, mult] : units)
    if (unit == name) scale = mult;
  if (digits.empty() || digits.size() > 15 || scale == 0)
    throw CLI::ValidationError(
        flag, "must be a size such as 3GiB, 512MiB, 2G or 1000000 (bytes), got '" + text + "'");
  const int64_t n = std::stoll(digits);
  if (n == 0 || n > (int64_t{1} << 50) / scale)
    throw CLI::ValidationError(flag, "must be more than 0 and at most 1 PiB, got '" + text + "'");
  return n * scale;
}
}  // namespace

void add_serve_flags(CLI::App* cmd, ServeSettings& s) {
  cmd->add_option("--host", s.host, "Address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", s.port, "TCP port (default 8080; 0: any free port, printed on stderr)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--max-num-seqs", s.engine.max_num_seqs,
                  "Decode slots: requests generated at once in one batch (default 4)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--max-model-len", s.engine.max_model_len,
                  "Positions per slot, prompt + new tokens (default: the model's context, at most 4096; the "
                  "context is max_position_embeddings, or what a yarn / dynamic rope scaling serves)")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--max-queue", s.engine.max_queue,
                  "Requests that may wait while every slot is busy; more get 429 (default 64)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--prefill-chunk", s.engine.prefill_chunk,
                  "Run prompts N tokens per step, so a long prompt does not stall running requests (default: "
                  "whole prompts)")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option_function<std::string>(
         "--decode-rows",
         [&s](const std::string& v) {
           using Rows = SlotBatchOptions::DecodeRows;
           s.engine.decode_rows = v == "all" ? Rows::All : v == "running" ? Rows::Running : Rows::Auto;
         },
         "Rows a decode step runs: all (every slot: one program, the static shape devices want), running "
         "(only the running slots: a program per count), auto (running on the cpu device, all on PJRT "
         "devices; default)")
      ->check(CLI::IsMember({"all", "running", "auto"}));
  cmd->add_flag(
      "--prefix-reuse", s.engine.prefix_reuse,
      "A request whose prompt starts with what a free slot's cache holds (the previous turn of a chat) "
      "prefills only the rest (default off: logits may then differ from a full prefill in the last "
      "bits; not with --prefill-chunk)");
  cmd->add_flag_callback(
      "--no-enable-prefix-caching", [&s] { s.engine.prefix_cache = false; },
      "Turn off automatic prefix caching (vLLM's flag). On by default on the cpu device: prompts run in "
      "aligned chunks of --prefix-cache-block tokens and a request reuses the whole chunks it shares with "
      "any slot's "
      "prompt, with bit-identical results (keys and values of generated tokens are not reused); "
      "prefix_cache_queries_total / prefix_cache_hits_total count the prompt tokens");
  cmd->add_option("--prefix-cache-block", s.engine.prefix_block,
                  "Prefix caching: prompts run in aligned chunks of N tokens, the unit a request can reuse "
                  "(default 256; smaller: finer reuse, but each chunk re-packs the weights: 128 costs a "
                  "2000-token prompt ~20% more time than one piece, 256 ~5%)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option(
         "--draft-model", s.draft_model,
         "Speculative decoding with a draft model (llama-server's -md): a smaller model with the same "
         "vocabulary proposes up to 5 tokens a step (--speculative-config's num_speculative_tokens "
         "to choose), verified exactly: the same tokens as without it; cpu device")
      ->type_name("MODEL");
  cmd->add_option_function<std::string>(
         "--kv-cache-memory",
         [&s](const std::string& v) { s.engine.kv_cache_memory = parse_byte_size("--kv-cache-memory", v); },
         "Bytes the KV cache may take, all requests together (e.g. 3GiB, 512MiB, 2G, 1000000; cpu device): "
         "memory is taken in blocks as sequences grow and given back as they end; beyond it requests wait "
         "and running ones are preempted, then resumed with the same tokens (default: every slot may fill "
         "--max-model-len)")
      ->type_name("SIZE");
  cmd->add_option_function<std::string>(
      "--speculative-config", [&s](const std::string& v) { parse_speculative_config(v, s); },
      "Speculative decoding, as vLLM's flag: JSON {\"method\": \"ngram\", \"num_speculative_tokens\": K, "
      "\"prompt_lookup_max\": N} (prompt lookup: up to K draft tokens a step, from the earlier place whose "
      "preceding tokens agree longest with the text's end; N is accepted but does not change the drafts; the "
      "same tokens as without it; cpu device), or {\"model\": DRAFT, \"num_speculative_tokens\": K} (a draft "
      "model, as --draft-model)");
  cmd->add_flag(
      "--host-sampling", s.engine.host_sampling,
      "Sample tokens on the host from the logits where the device would sample inside the compiled "
      "step (PJRT devices): needed there for requests with logprobs; costs the logits' transfer per step");
  cmd->add_option("--served-model-name", s.served_model_name,
                  "The model name clients send and /v1/models lists (default: the model's path)");
  cmd->add_option("--api-key", s.api_key, "Require Authorization: Bearer KEY on /v1/* (default: no key)");
  cmd->add_flag(
      "--warmup", s.warmup,
      "Compile the decode step and every prompt bucket's prefill before /health says ready (on cpu, "
      "whose prompts run at their exact length, a prefill plan is still made per new prompt length)");
  cmd->add_option("--shutdown-timeout", s.shutdown_timeout_s,
                  "SIGTERM/SIGINT: seconds in-flight requests get to finish before they are cancelled "
                  "(default 30)")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--max-body-bytes", s.max_body_bytes,
                  "Largest request body accepted, Content-Length or chunked; larger: 413 (default 4194304)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  cmd->add_option("--header-timeout", s.header_timeout_s,
                  "Seconds a client has to send a request's head (request line and headers); later: 408 "
                  "and close. Idle keep-alive connections close after it too (default 10)")
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--read-timeout", s.read_timeout_s,
                  "Seconds a request body may take after its head, and a write to a client that does not "
                  "read may stall, before the connection is closed (default 30)")
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--max-connections", s.max_connections,
                  "Open client connections at most, whatever they do; beyond: 503 and close (default 512)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option(
         "--reasoning-parser", s.reasoning_parser,
         "Chat answers' reasoning as message.reasoning_content (delta.reasoning_content when "
         "streamed), apart from the content: harmony (gpt-oss's analysis channel), qwen3 "
         "(<think>...</think>, "
         "also DeepSeek-R1 style), gemma4 (<|channel>thought...<channel|>), none (all text is content), "
         "auto (harmony for gpt-oss or a harmony template, gemma4 for Gemma 4, qwen3 for a template that "
         "writes <think>, else none; default)")
      ->check(CLI::IsMember({"none", "auto", "harmony", "qwen3", "gemma4"}));
  cmd->add_option("--tool-call-parser", s.tool_call_parser,
                  "The format of the model's tool calls (chat requests with `tools`): hermes (Qwen2.5/Qwen3 "
                  "<tool_call>), llama3_json, mistral ([TOOL_CALLS]), pythonic (Llama 4, Gemma 3), glm45, "
                  "gemma4 (<|tool_call>call:NAME{...}), or harmony (gpt-oss), auto (from the chat template "
                  "and architecture; hermes when the "
                  "template shows none; "
                  "default). tool_choice \"required\" or a named function constrains the output to it")
      ->check(CLI::IsMember(
          {"auto", "hermes", "llama3_json", "mistral", "pythonic", "glm45", "gemma4", "harmony"}));
  add_compile_flags(cmd, s.compile);
}

namespace {
// The engine options for this model: --max-model-len resolved (default min(context limit, 4096)).
serve::EngineOptions engine_options(const ServeSettings& settings, const CausalLM& model) {
  serve::EngineOptions eo = settings.engine;
  const ModelInfo& info = model.info();
  const int64_t limit = info.context_limit;
  if (eo.max_model_len <= 0) eo.max_model_len = static_cast<int>(std::min<int64_t>(limit, 4096));
  if (eo.max_model_len > limit)
    fail(
        "--max-model-len ", eo.max_model_len, " exceeds the model's ",
        limit == info.max_position_embeddings
            ? detail::concat("max_position_embeddings (", limit, ")")
            : detail::concat("context of ", limit, " positions (its rope scaling's; max_position_embeddings ",
                             info.max_position_embeddings, ")"));
  if (!settings.draft_model.empty() && eo.speculative_tokens > 0)
    fail("--draft-model and an ngram --speculative-config: choose one kind of speculation");
  return eo;
}
}  // namespace

int run_serve_follower(const ServeSettings& settings,
                       const std::function<std::unique_ptr<ServedLoad>()>& load) {
  // Signals are rank 0's to act on: it drains, then tells this rank to stop (tessera launch passes a SIGTERM
  // to every rank and waits --signal-grace before SIGKILL).
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  auto l = load();
  if (l->model.info().tp_size < 2)
    fail("serve: this process is rank ", l->model.info().tp_rank,
         " of a job started by tessera launch, but "
         "--tp-size is 1: under tessera launch, serve runs one tensor-parallel model (--tp-size N for N "
         "ranks); "
         "start independent servers without launch");
  serve::follow_engine(l->model, engine_options(settings, l->model));
  return 0;
}

int run_serve(const ServeSettings& settings, const std::function<std::unique_ptr<ServedLoad>()>& load) {
  // Signals are taken by this thread only (sigwait below); every thread started from here inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGUSR1);  // the loader's "failed"
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  Server s(settings);
  s.started = static_cast<int64_t>(std::time(nullptr));
  http::Limits limits;
  limits.max_body_bytes = settings.max_body_bytes;
  limits.header_timeout_s = settings.header_timeout_s;
  limits.body_timeout_s = settings.read_timeout_s;
  limits.write_timeout_s = settings.read_timeout_s;
  limits.max_connections = settings.max_connections;
  // Generation requests beyond what the engine can hold (slots + queue) are refused with 429 without a
  // thread.
  limits.max_blocking = settings.engine.max_num_seqs + settings.engine.max_queue + 4;
  http::Server server(
      limits, [&s](const http::Request& req) { return route(s, req); },
      [](int status, const std::string& message) {
        return error_response(ApiError(status, message, "",
                                       status == 503   ? "service_unavailable"
                                       : status >= 500 ? "server_error"
                                                       : "invalid_request_error"));
      });
  s.http = &server;
  const int port = server.bind(settings.host, settings.port);
  server.start();
  std::fprintf(stderr, "tessera serve: listening on http://%s:%d\n", settings.host.c_str(), port);

  std::string load_error;
  std::thread loader([&] {
    try {
      auto l = load();
      serve::EngineOptions eo = engine_options(settings, l->model);
      s.served.name = settings.served_model_name.empty() ? l->name : settings.served_model_name;
      s.served.tokenizer = &l->tokenizer;
      s.served.defaults = l->model.generation_config();
      s.served.vocab_size = l->model.info().vocab_size;
      s.kv_bytes_per_token = l->model.info().kv_bytes_per_token;
      s.served.reasoning =
          settings.reasoning_parser == "auto"
              ? serve::choose_reasoning_format(l->model.info().architecture, l->tokenizer.chat_template())
              : *serve::reasoning_format_from_name(settings.reasoning_parser);
      if (s.served.reasoning == serve::ReasoningFormat::Harmony && !serve::harmony_tokens(l->tokenizer)) {
        // auto: a harmony-looking template over a tokenizer without the markers parses nothing
        if (settings.reasoning_parser == "auto") s.served.reasoning = serve::ReasoningFormat::None;
      }
      if (s.served.reasoning == serve::ReasoningFormat::Harmony && !serve::harmony_tokens(l->tokenizer))
        fail(
            "--reasoning-parser harmony: the tokenizer lacks harmony's tokens (<|start|>, <|channel|>, "
            "<|message|>, <|end|>, <|return|>, <|call|>, <|constrain|>)");
      s.served.tool_format =
          settings.tool_call_parser == "auto"
              ? serve::choose_tool_call_format(l->model.info().architecture, l->tokenizer.chat_template())
              : *serve::tool_call_format_from_name(settings.tool_call_parser);
      if (l->draft) {
        if (l->draft->info().context_limit < eo.max_model_len)
          std::fprintf(stderr,
                       "tessera serve: the draft model drafts from positions below its context limit (%lld) "
                       "only\n",
                       static_cast<long long>(l->draft->info().context_limit));
        eo.draft_model = l->draft.get();
      }
      auto engine = std::make_unique<serve::Engine>(l->model, l->tokenizer, eo);
      // Constrained decoding when llguidance is there (its vocabulary built once); else a 400 saying why.
      cli::use_environment_constraint_settings();
      if (ConstraintLibrary::available(&s.served.constraints_unavailable)) {
        try {
          s.served.constraint_vocab = std::make_shared<const ConstraintVocabulary>(
              l->tokenizer, l->model.info().vocab_size, s.served.defaults.eos_token_id);
        } catch (const Error& e) {
          s.served.constraints_unavailable = e.what();
        }
      }
      if (settings.warmup) {
        const int made = engine->warmup();
        if (!settings.quiet) std::fprintf(stderr, "tessera serve: warmed up (%d programs)\n", made);
      }
      engine->start();
      s.loaded = std::move(l);
      s.engine = std::move(engine);
      s.phase.store(Phase::Ready);
      std::fprintf(stderr,
                   "tessera serve: ready: model '%s', %d slots of %d positions, reasoning parser %s, "
                   "tool call parser %s, constrained decoding %s\n",
                   s.served.name.c_str(), eo.max_num_seqs, eo.max_model_len,
                   serve::reasoning_format_name(s.served.reasoning),
                   serve::tool_call_format_name(s.served.tool_format),
                   s.served.constraint_vocab ? ("on (" + ConstraintLibrary::version() + ")").c_str() : "off");
    } catch (const std::exception& e) {
      load_error = e.what();
      ::kill(::getpid(), SIGUSR1);
    }
  });

  int sig = 0;
  sigwait(&sigs, &sig);
  loader.join();
  s.phase.store(Phase::Draining);
  if (!load_error.empty()) {
    server.stop();
    fail(load_error);
  }
  if (!settings.quiet)
    std::fprintf(stderr, "tessera serve: %s: draining\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  if (s.engine)
    s.engine->drain(std::chrono::milliseconds(static_cast<int64_t>(settings.shutdown_timeout_s * 1000)));
  server.stop(2);  // handlers were cancelled by the drain: their last events go out, then every socket closes
  if (!settings.quiet) std::fprintf(stderr, "tessera serve: stopped\n");
  return 0;
}

}  // namespace tessera::cli
