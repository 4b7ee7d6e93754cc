// `tessera chat --server URL`: the terminal conversation against a running OpenAI-compatible server (`tessera
// serve`, vLLM, llama-server, ...) instead of a model loaded here. It keeps the conversation, POSTs it to
// /v1/chat/completions with stream=true after every user line and prints the streamed deltas as they come.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "tessera/generation.h"

namespace tessera::cli {

struct ChatClientOptions {
  std::string url;      // http://HOST[:PORT] or https://..., optionally ending in the API's /v1
  std::string api_key;  // sent as Authorization: Bearer KEY when not empty
  std::string model;    // the request's "model" (empty: not sent, the server's only model)
  std::string system;   // the conversation's system message (empty: none)
  // Request fields from the sampling flags given: max_new_tokens -> max_tokens, do_sample false ->
  // temperature 0, temperature, top_p, seed, and Tessera's top_k, min_p, repetition_penalty. Unset: not sent.
  GenerationOverrides sampling;
  std::vector<std::string> stop;  // at most 4, as OpenAI
  bool quiet = false;             // no banner or per-reply stats on stderr
};

// Throws tessera::Error naming the first flag of `chat` given on the command line that has no meaning with
// --server (the model's device, dtype, threads, compilation and so on are the server's).
void check_chat_server_flags(const CLI::App& chat);

// The conversation loop on stdin/stdout (lines starting with / are commands: /reset, /exit). Returns 0 at the
// end of input; an unreachable server, a malformed URL, a non-200 answer or an error event in a stream throw
// tessera::Error with one line (the server's own message when it sent one).
int run_chat_client(const ChatClientOptions& opt);

}  // namespace tessera::cli
