// Error policy: failures caused by input (files, flags, configs) throw
// tessera::Error whose message is one line naming the file/tensor/field and the
// actual values. Broken internal invariants use TS_ASSERT, which aborts with
// file:line. The CLI turns an Error into one line on stderr and exit code 1.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg);

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// Throws tessera::Error built from the streamed arguments.
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(detail::concat(args...));
}

}  // namespace tessera

#define TS_ASSERT(cond, ...)                                                                               \
  do {                                                                                                     \
    if (!(cond))                                                                                           \
      ::tessera::detail::assert_fail(#cond, __FILE__, __LINE__,                                            \
                                     ::tessera::detail::concat(std::string() __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
