// Small helpers shared by the checkpoint readers.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <string>

#include "tessera/tensor.h"

namespace tessera::io {

// Closes a POSIX file descriptor on every path out of a scope (-1: nothing to close).
struct FdGuard {
  int fd;
  explicit FdGuard(int f) : fd(f) {}
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

// A name taken from a file, safe to put in a one-line error: control and
// non-ASCII bytes are escaped as \xNN and long names are shortened.
std::string printable(const std::string& s, size_t max_len = 160);
inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// a * b and a + b, false on uint64 overflow.
inline bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
inline bool add_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }

// Joins a directory and a file name with one '/'.
std::string path_join(const std::string& dir, const std::string& name);
bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);
// True when something (of any kind: a FIFO, a device, a dangling symlink too) is at `path`.
bool path_exists(const std::string& path);
// What kind of non-regular thing st_mode describes, for errors: "a directory", "a FIFO", "a character
// device", ...
const char* file_kind_name(unsigned mode);
// True when `path` is a regular file starting with the GGUF magic "GGUF". Never blocks: FIFOs and
// devices are not opened.
bool has_gguf_magic(const std::string& path);

// Throws Error when `dt` is not F32/BF16/F16 (the only types weights load as).
void require_float_dtype(DType dt, const std::string& context);

}  // namespace tessera::io
