// Notes and warnings from the library go through one callback (default: one line on stderr,
// "tessera: warning: ..."), so an embedding program (a server, the Python package) can route them.
#pragma once
#include <functional>
#include <string>

#include "tessera/error.h"

namespace tessera {

enum class LogLevel { Info, Note, Warning };
const char* log_level_name(LogLevel level);  // "info", "note", "warning"

// `message` is one line without the "tessera: <level>: " prefix or a newline.
using LogCallback = std::function<void(LogLevel level, const std::string& message)>;
// Replaces the callback for the whole process; nullptr restores the default (stderr). Thread-safe; the
// callback may be called from any thread that uses a model, one call at a time.
void set_log_callback(LogCallback callback);
void log_message(LogLevel level, const std::string& message);

template <typename... Args>
void log_warning(const Args&... args) {
  log_message(LogLevel::Warning, detail::concat(args...));
}
template <typename... Args>
void log_note(const Args&... args) {
  log_message(LogLevel::Note, detail::concat(args...));
}
template <typename... Args>
void log_info(const Args&... args) {
  log_message(LogLevel::Info, detail::concat(args...));
}

}  // namespace tessera
