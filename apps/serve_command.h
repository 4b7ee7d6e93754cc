// `tessera serve`: OpenAI-compatible HTTP server over the continuous-batching engine (src/serve).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>

#include "compile_flags.h"
#include "serve/engine.h"
#include "tessera/model.h"
#include "tessera/tokenizer.h"

namespace tessera::cli {

struct ServeSettings {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (the one chosen is printed)
  std::string served_model_name;
  std::string api_key;  // "" = no authentication
  bool warmup = false;
  bool quiet = false;
  serve::EngineOptions engine;  // max_model_len 0: min(max_position_embeddings, 4096)
  // Limits for untrusted clients (apps/http_server.h): request body size, the time the request head and then
  // the body (or a stalled write) may take, open connections.
  size_t max_body_bytes = 4u << 20;
  double header_timeout_s = 10;
  double read_timeout_s = 30;
  int max_connections = 512;
  double shutdown_timeout_s = 30;  // SIGTERM: in-flight requests get this long to finish, then are cancelled
  std::string reasoning_parser = "auto";  // none, auto, harmony, qwen3 (serve/reasoning.h)
  std::string tool_call_parser = "auto";  // auto, or a format name of serve/tool_calls.h
  CompileFlags compile;                   // buckets, recompile guard, disk cache (as generate's flags)
  std::string draft_model;  // --draft-model, or --speculative-config's "model": speculation with it
};

// The serve flags (not the model flags, which the command shares with generate).
void add_serve_flags(CLI::App* cmd, ServeSettings& s);

// What the loader hands over: the model, its tokenizer and the name it answers to.
struct ServedLoad {
  CausalLM model;
  Tokenizer tokenizer;
  std::string name;
  std::unique_ptr<CausalLM> draft = {};  // ServeSettings::draft_model, loaded as the model is
};

// Listens first (so /health answers 503 while the model loads), then loads, warms up when asked, and serves
// until SIGTERM or SIGINT; then drains and returns 0. Errors before listening or while loading: Error.
int run_serve(const ServeSettings& settings, const std::function<std::unique_ptr<ServedLoad>()>& load);
// Tensor parallelism under tessera launch, ranks other than 0: loads the same model, runs no HTTP server and
// replays rank 0's engine (serve::follow_engine) until rank 0 stops; returns 0 then.
int run_serve_follower(const ServeSettings& settings,
                       const std::function<std::unique_ptr<ServedLoad>()>& load);

}  // namespace tessera::cli
