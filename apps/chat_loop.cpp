#include "chat_loop.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "tokenizer/unicode_util.h"

namespace tessera::cli {

std::string repaired(const std::string& text) {
  std::string out;
  tok::utf8_repair_append(text, out);
  return out;
}

void run_chat_loop(const std::string& who, const std::string& system, bool quiet,
                   const std::function<std::string(const nlohmann::ordered_json& messages)>& reply) {
  const std::string sys = repaired(system);
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  auto reset = [&] {
    msgs = nlohmann::ordered_json::array();
    if (!sys.empty()) msgs.push_back({{"role", "system"}, {"content", sys}});
  };
  reset();
  const bool tty = isatty(STDIN_FILENO);
  if (tty && !quiet)
    std::fprintf(stderr, "Chatting with %s. /reset clears the history, /exit or Ctrl-D quits.\n",
                 who.c_str());
  std::string line;
  while (true) {
    if (tty) std::fputs("> ", stdout), std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      reset();
      continue;
    }
    if (line.empty()) continue;
    msgs.push_back({{"role", "user"}, {"content", repaired(line)}});
    const std::string text = reply(msgs);
    msgs.push_back({{"role", "assistant"}, {"content", text}});
  }
}

}  // namespace tessera::cli
