// The terminal conversation both forms of `tessera chat` run (a model loaded here, or a server's with
// --server): one place for the banner, the prompt, the commands and the history.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace tessera::cli {

// Text from the command line or a terminal, with invalid UTF-8 replaced by U+FFFD as the tokenizer does for a
// plain prompt (the chat template and JSON need valid text).
std::string repaired(const std::string& text);

// Reads user lines from stdin until end of input, /exit or /quit. On a terminal (unless `quiet`) it first
// says "Chatting with WHO" and the commands on stderr, and prompts "> " on stdout. /reset drops the history
// back to the system message (`system`, none when empty); empty lines are skipped. Each other line (repaired)
// is appended as a user message, and `reply(messages)` runs the turn — printing the assistant's text as it
// comes — and returns that text, which is appended as the assistant's message. Errors from `reply` propagate.
void run_chat_loop(const std::string& who, const std::string& system, bool quiet,
                   const std::function<std::string(const nlohmann::ordered_json& messages)>& reply);

}  // namespace tessera::cli
