#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/io_util.h"
#include "io/json_util.h"
#include "tessera/error.h"

namespace tessera::io {

namespace {

[[noreturn]] void fail_errno(const std::string& path, const char* what, int err) {
  fail(path, ": ", what, ": ", std::strerror(err));
}

}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) fail(path, ": no such file");
    fail_errno(path, "cannot stat", errno);
  }
  if (S_ISDIR(st.st_mode)) fail(path, ": is a directory, expected a file");
  if (!S_ISREG(st.st_mode))
    fail(path, ": not a regular file (a FIFO, device or socket cannot be a model file)");
  // O_NONBLOCK: a path swapped for a FIFO after the stat must not block open() waiting for a writer.
  FdGuard g{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (g.fd < 0) {
    if (errno == EACCES) fail(path, ": permission denied");
    fail_errno(path, "cannot open", errno);
  }
  // fstat again on the descriptor: the size we map is the size of what we opened.
  if (::fstat(g.fd, &st) != 0) fail_errno(path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode))
    fail(path, ": not a regular file (a FIFO, device or socket cannot be a model file)");
  if (st.st_size == 0) fail(path, ": file is empty");
  const size_t size = static_cast<size_t>(st.st_size);
  // MAP_POPULATE maps every page now (and reads it when the page cache is cold), so the first forward pass
  // does not take a page fault per page of weights; loading is when a caller expects the disk to be touched.
  // Should the kernel refuse it, a plain mapping is just as correct.
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, g.fd, 0);
  if (p == MAP_FAILED) p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, g.fd, 0);
  if (p == MAP_FAILED) fail_errno(path, "mmap failed", errno);
  return std::shared_ptr<MappedFile>(new MappedFile(path, static_cast<const uint8_t*>(p), size));
}

MappedFile::~MappedFile() { ::munmap(const_cast<uint8_t*>(data_), size_); }

std::string read_text_file(const std::string& path) { return read_regular_file(path, kMaxConfigFileBytes); }

}  // namespace tessera::io
