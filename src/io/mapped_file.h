// Read-only memory mapping of a whole file (RAII). Weight tensors are views
// into it, kept alive through a shared_ptr to the MappedFile.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tessera::io {

class MappedFile {
 public:
  // Maps `path` read-only (MAP_PRIVATE; no page is read yet). Throws Error naming the file when it
  // is missing, a directory, empty, unreadable or cannot be mapped.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Reads every page in now; called once the file's header has been checked, so loading (not the first
  // step) is when the disk is touched.
  void prefault() const;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

// The whole pages inside [begin, begin + n) of a source just copied, handed back to the kernel
// (MADV_PAGEOUT): a file mapping's clean pages leave this process's resident set and are read again if
// touched; anonymous memory keeps its contents (swapped out at most). So a mapped file and the copies made
// from it are not resident together, and a load peaks near one copy of the weights, not two. Advice only: a
// kernel without MADV_PAGEOUT (before 5.4) refuses it and the pages stay.
void release_pages(const void* begin, size_t n);

// Reads a whole (small) regular file such as config.json, at most kMaxConfigFileBytes
// (json_util.h); throws Error naming it.
std::string read_text_file(const std::string& path);

}  // namespace tessera::io
