#include "tessera/log.h"

#include <cstdio>
#include <mutex>

namespace tessera {

namespace {
std::mutex& log_mutex() {
  static std::mutex m;
  return m;
}
LogCallback& log_callback() {
  static LogCallback cb;
  return cb;
}
}  // namespace

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::Info:
      return "info";
    case LogLevel::Note:
      return "note";
    case LogLevel::Warning:
      return "warning";
  }
  return "?";
}

void set_log_callback(LogCallback callback) {
  std::lock_guard<std::mutex> lock(log_mutex());
  log_callback() = std::move(callback);
}

void log_message(LogLevel level, const std::string& message) {
  std::lock_guard<std::mutex> lock(log_mutex());
  if (log_callback()) {
    log_callback()(level, message);
    return;
  }
  if (level == LogLevel::Info)
    std::fprintf(stderr, "tessera: %s\n", message.c_str());
  else
    std::fprintf(stderr, "tessera: %s: %s\n", log_level_name(level), message.c_str());
}

}  // namespace tessera
