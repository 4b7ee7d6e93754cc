#include "serve_command.h"

#include <dirent.h>
#include <httplib.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "serve/openai.h"
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
  std::atomic<uint64_t> next_id{1};
  int64_t started = 0;

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

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(serve::error_body(e).dump(), "application/json");
}

bool authorised(const Server& s, const httplib::Request& req, httplib::Response& res) {
  if (s.settings.api_key.empty()) return true;
  if (req.get_header_value("Authorization") == "Bearer " + s.settings.api_key) return true;
  send_error(res, ApiError(401, "a valid API key is required (Authorization: Bearer <key>)", "",
                           "authentication_error", "invalid_api_key"));
  return false;
}

bool ready(const Server& s, httplib::Response& res) {
  const Phase p = s.phase.load();
  if (p == Phase::Ready) return true;
  send_error(res, ApiError(503, p == Phase::Loading ? "the model is loading" : "the server is shutting down",
                           "", "service_unavailable"));
  return false;
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
  gauge("num_requests_waiting", "Requests waiting for a slot.", st.waiting);
  gauge("kv_cache_usage_perc", "Fraction of KV cache slots in use (1 = all).",
        st.slots ? static_cast<double>(st.running) / st.slots : 0.0);
  counter("prompt_tokens_total", "Prompt tokens prefilled.", static_cast<double>(st.prompt_tokens));
  counter("generation_tokens_total", "Tokens generated.", static_cast<double>(st.generation_tokens));
  counter("prefix_cache_queries_total", "Prompt tokens looked up in the slots' kept caches.",
          static_cast<double>(st.prefix_queries));
  counter("prefix_cache_hits_total", "Prompt tokens taken from a slot's kept cache instead of prefilled.",
          static_cast<double>(st.prefix_hits));
  counter("num_decode_steps_total", "Batched decode steps run.", static_cast<double>(st.steps));
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
      serve::EngineRequest er{r.prompt, g, r.stop, true, r.logprobs};
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

// The socket of the connection `req` arrived on, or -1. cpp-httplib 0.11 does not give a handler its socket,
// so it is the one socket of this process whose two ends are `req`'s local and remote address and port
// (formatted as httplib formats them: getnameinfo, numeric). The connection's worker thread is the one
// running the handler, so the socket stays open (and its number is not reused) until the handler returns.
int connection_socket(const httplib::Request& req) {
  auto ends = [](int fd, bool peer, std::string& host, int& port) {
    sockaddr_storage a{};
    socklen_t n = sizeof(a);
    if ((peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n)
              : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n)) != 0)
      return false;
    char h[NI_MAXHOST], p[NI_MAXSERV];
    if (::getnameinfo(reinterpret_cast<sockaddr*>(&a), n, h, sizeof(h), p, sizeof(p),
                      NI_NUMERICHOST | NI_NUMERICSERV) != 0)
      return false;
    host = h;
    port = std::atoi(p);
    return true;
  };
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    std::string host;
    int port = -1;
    if (!ends(fd, true, host, port) || port != req.remote_port || host != req.remote_addr) continue;
    if (!ends(fd, false, host, port) || port != req.local_port || host != req.local_addr) continue;
    found = fd;
    break;
  }
  ::closedir(dir);
  return found;
}

// Whether the client closed (or reset) connection `fd`: a peek that reads the end of the stream or fails.
// Bytes waiting (a pipelined next request) or none yet mean it is still there. A client that shuts down only
// its sending side while it waits counts as gone (HTTP clients do not do that).
bool client_gone(int fd) {
  if (fd < 0) return false;
  char c;
  const ssize_t r = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
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

void handle_generate(Server& s, Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  if (!authorised(s, req, res) || !ready(s, res)) return;
  serve::ParsedRequest r;
  std::vector<std::shared_ptr<serve::Stream>> streams;
  try {
    r = serve::parse_request(endpoint, req.body, s.served);
    streams = submit_all(s, r);
  } catch (const ApiError& e) {
    if (e.status == 429) res.set_header("Retry-After", "1");
    send_error(res, e);
    return;
  }
  const std::string id = std::string(endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-") +
                         std::to_string(s.started) + "-" + std::to_string(s.next_id.fetch_add(1));
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const int prompt_tokens = static_cast<int>(r.prompt.size());
  if (!r.stream) {
    // Nothing is written until the end, so a client that goes away is seen by peeking at its socket after
    // every update (each new token, or 200 ms without one); its rows are then cancelled as a broken stream's
    // are.
    const int fd = connection_socket(req);
    if (fd < 0) {
      static std::once_flag noted;
      std::call_once(noted, [] {
        std::fprintf(stderr,
                     "tessera serve: warning: the socket of a connection was not found in /proc/self/fd; "
                     "a client that leaves before a non-streamed answer is complete keeps its slot until "
                     "the answer is\n");
      });
    }
    std::vector<serve::ChoiceResult> choices(streams.size());
    for (size_t i = 0; i < streams.size(); ++i) {
      std::vector<serve::TokenLogprob> lps;
      while (true) {
        serve::StreamUpdate u = streams[i]->wait(std::chrono::milliseconds(200));
        if (!u.done && client_gone(fd)) {
          for (auto& st : streams) st->cancel();
          return;
        }
        choices[i].text += u.text;
        for (auto& l : u.logprobs) lps.push_back(std::move(l));
        choices[i].completion_tokens = u.completion_tokens;
        if (!u.done) continue;
        if (auto e = failure(u)) {
          for (auto& st : streams) st->cancel();
          send_error(res, *e);
          return;
        }
        choices[i].finish_reason = u.finish_reason;
        if (r.logprobs >= 0) {
          size_t offset = 0;
          choices[i].logprobs = serve::logprobs_json(endpoint, *s.served.tokenizer, lps, offset);
        }
        count_finish(s, u.finish_reason);
        break;
      }
    }
    res.set_content(serve::response_json(endpoint, id, created, s.served.name, choices, prompt_tokens).dump(),
                    "application/json");
    return;
  }
  const bool usage = r.include_usage, logprobs = r.logprobs >= 0;
  const std::string model = s.served.name;
  Server* sp = &s;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [sp, streams, endpoint, id, created, model, usage,
                                                         logprobs,
                                                         prompt_tokens](size_t, httplib::DataSink& sink) {
    std::vector<size_t> offsets(streams.size(), 0);  // completions' text_offset per choice
    auto cancel_all = [&] {
      for (auto& st : streams) st->cancel();
      return false;
    };
    auto put = [&](const std::string& text) { return sink.write(text.data(), text.size()); };
    if (endpoint == Endpoint::Chat) {
      const std::string empty;
      for (size_t i = 0; i < streams.size(); ++i)
        if (!put(serve::sse(serve::chunk_json(endpoint, id, created, model, static_cast<int>(i), &empty, true,
                                              "", usage))))
          return cancel_all();
    }
    std::vector<bool> done(streams.size(), false);
    size_t left = streams.size();
    int completion = 0;
    while (left > 0) {
      for (size_t i = 0; i < streams.size(); ++i) {
        if (done[i]) continue;
        if (!sink.is_writable()) return cancel_all();
        serve::StreamUpdate u = streams[i]->wait(std::chrono::milliseconds(streams.size() > 1 ? 20 : 200));
        if (!u.text.empty() || !u.logprobs.empty()) {
          const nlohmann::ordered_json lp =
              logprobs ? serve::logprobs_json(endpoint, *sp->served.tokenizer, u.logprobs, offsets[i])
                       : nlohmann::ordered_json(nullptr);
          if (!put(serve::sse(serve::chunk_json(endpoint, id, created, model, static_cast<int>(i), &u.text,
                                                false, "", usage, lp))))
            return cancel_all();
        }
        if (!u.done) continue;
        done[i] = true;
        --left;
        completion += u.completion_tokens;
        if (auto e = failure(u)) {
          put(serve::sse(serve::error_body(*e)));
          put("data: [DONE]\n\n");
          sink.done();
          return cancel_all();
        }
        count_finish(*sp, u.finish_reason);
        if (!put(serve::sse(serve::chunk_json(endpoint, id, created, model, static_cast<int>(i), nullptr,
                                              false, u.finish_reason, usage))))
          return cancel_all();
      }
    }
    if (usage &&
        !put(serve::sse(serve::usage_chunk_json(endpoint, id, created, model, prompt_tokens, completion))))
      return false;
    put("data: [DONE]\n\n");
    sink.done();
    return true;
  });
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
                  "Positions per slot, prompt + new tokens (default: the model's max_position_embeddings, at "
                  "most 4096)")
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
  add_compile_flags(cmd, s.compile);
}

namespace {
// The engine options for this model: --max-model-len resolved (default min(max_position_embeddings, 4096)).
serve::EngineOptions engine_options(const ServeSettings& settings, const CausalLM& model) {
  serve::EngineOptions eo = settings.engine;
  const int64_t max_pos = model.info().max_position_embeddings;
  if (eo.max_model_len <= 0) eo.max_model_len = static_cast<int>(std::min<int64_t>(max_pos, 4096));
  if (eo.max_model_len > max_pos)
    fail("--max-model-len ", eo.max_model_len, " exceeds the model's max_position_embeddings (", max_pos,
         ")");
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
  httplib::Server http;
  http.set_payload_max_length(settings.max_body_bytes);
  http.set_read_timeout(settings.read_timeout_s, 0);
  http.set_write_timeout(settings.read_timeout_s, 0);
  const int threads = settings.engine.max_num_seqs + settings.engine.max_queue + 4;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };

  http.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
    if (!ready(s, res)) return;
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  http.Get("/v1/models", [&](const httplib::Request& req, httplib::Response& res) {
    if (!authorised(s, req, res) || !ready(s, res)) return;
    ordered_json m = {{"id", s.served.name},
                      {"object", "model"},
                      {"created", s.started},
                      {"owned_by", "tessera"},
                      {"max_model_len", s.engine->options().max_model_len}};
    res.set_content(ordered_json({{"object", "list"}, {"data", ordered_json::array({m})}}).dump(),
                    "application/json");
  });
  http.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(s), "text/plain; version=0.0.4");
  });
  http.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) {
    handle_generate(s, Endpoint::Chat, req, res);
  });
  http.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res) {
    handle_generate(s, Endpoint::Completion, req, res);
  });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string what = res.status == 404   ? "no such endpoint: " + req.method + " " + req.path
                             : res.status == 413 ? "the request body is too large"
                             : res.status == 405 ? "method not allowed: " + req.method + " " + req.path
                                                 : "bad request";
    send_error(
        res, ApiError(res.status, what, "", res.status == 404 ? "not_found_error" : "invalid_request_error"));
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, what, "", "server_error"));
  });

  int port = settings.port;
  if (port == 0) {
    port = http.bind_to_any_port(settings.host);
    if (port < 0) fail("serve: cannot listen on ", settings.host, " (--host)");
  } else if (!http.bind_to_port(settings.host, port)) {
    fail("serve: cannot listen on ", settings.host, ":", port,
         " (--host/--port: in use, or not an address here)");
  }
  std::thread listener([&] { http.listen_after_bind(); });
  std::fprintf(stderr, "tessera serve: listening on http://%s:%d\n", settings.host.c_str(), port);

  std::string load_error;
  std::thread loader([&] {
    try {
      auto l = load();
      const serve::EngineOptions eo = engine_options(settings, l->model);
      s.served.name = settings.served_model_name.empty() ? l->name : settings.served_model_name;
      s.served.tokenizer = &l->tokenizer;
      s.served.defaults = l->model.generation_config();
      s.served.vocab_size = l->model.info().vocab_size;
      auto engine = std::make_unique<serve::Engine>(l->model, l->tokenizer, eo);
      if (settings.warmup) {
        const int made = engine->warmup();
        if (!settings.quiet) std::fprintf(stderr, "tessera serve: warmed up (%d programs)\n", made);
      }
      engine->start();
      s.loaded = std::move(l);
      s.engine = std::move(engine);
      s.phase.store(Phase::Ready);
      std::fprintf(stderr, "tessera serve: ready: model '%s', %d slots of %d positions\n",
                   s.served.name.c_str(), eo.max_num_seqs, eo.max_model_len);
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
    http.stop();
    listener.join();
    fail(load_error);
  }
  if (!settings.quiet)
    std::fprintf(stderr, "tessera serve: %s: draining\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  if (s.engine)
    s.engine->drain(std::chrono::milliseconds(static_cast<int64_t>(settings.shutdown_timeout_s * 1000)));
  http.stop();
  listener.join();
  if (!settings.quiet) std::fprintf(stderr, "tessera serve: stopped\n");
  return 0;
}

}  // namespace tessera::cli
