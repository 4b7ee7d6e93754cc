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
  // A plain mapping: nothing is read until the caller has checked the header (prefault() then reads the
  // rest), so a malformed or sparse file is refused without touching its pages.
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, g.fd, 0);
  if (p == MAP_FAILED) fail_errno(path, "mmap failed", errno);
  return std::shared_ptr<MappedFile>(new MappedFile(path, static_cast<const uint8_t*>(p), size));
}

void MappedFile::prefault() const {
#ifdef MADV_POPULATE_READ
  // Linux 5.14+: faults every page in now (reading it when the page cache is cold), so the first forward pass
  // does not take a page fault per page of weights.
  if (::madvise(const_cast<uint8_t*>(data_), size_, MADV_POPULATE_READ) == 0) return;
#endif
  // Older kernels: ask for read-ahead; the pages are faulted in on first use instead. Either is correct.
  ::madvise(const_cast<uint8_t*>(data_), size_, MADV_WILLNEED);
}

MappedFile::~MappedFile() { ::munmap(const_cast<uint8_t*>(data_), size_); }

std::string read_text_file(const std::string& path) { return read_regular_file(path, kMaxConfigFileBytes); }

void release_pages(const void* begin, size_t n) {
#ifdef MADV_PAGEOUT
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto b = reinterpret_cast<uintptr_t>(begin);
  const uintptr_t first = (b + page - 1) / page * page, last = (b + n) / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_PAGEOUT);
#else
  (void)begin;
  (void)n;
#endif
}

}  // namespace tessera::io
