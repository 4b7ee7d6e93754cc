#include "io/json_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/io_util.h"
#include "tessera/error.h"

namespace tessera::io {

namespace {

template <typename J>
J parse_impl(std::string_view text, const std::string& name, int max_depth) {
  check_json_depth(text, name, max_depth);
  try {
    return J::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    fail(name, ": malformed JSON: ", printable(json_error_text(e), 300));
  }
}

}  // namespace

std::string json_error_text(const std::exception& e) {
  std::string s = e.what();
  if (s.rfind("[json.exception.", 0) == 0) {
    const size_t close = s.find("] ");
    if (close != std::string::npos) s.erase(0, close + 2);
  }
  return s;
}

void check_json_depth(std::string_view text, const std::string& name, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        fail(name, ": JSON nested deeper than ", max_depth, " levels (at byte ", i, ")");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

nlohmann::json parse_json(std::string_view text, const std::string& name, int max_depth) {
  return parse_impl<nlohmann::json>(text, name, max_depth);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& name, int max_depth) {
  return parse_impl<nlohmann::ordered_json>(text, name, max_depth);
}

std::string read_regular_file(const std::string& path, size_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      struct stat lst {};
      if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode))
        fail(path, ": is a symbolic link to a missing file");
      fail(path, ": no such file");
    }
    fail(path, ": cannot stat: ", std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) fail(path, ": is ", file_kind_name(st.st_mode), ", expected a regular file");
  // O_NONBLOCK: should the path be swapped for a FIFO after the stat, open() must not wait for a writer.
  FdGuard g{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (g.fd < 0) {
    if (errno == EACCES) fail(path, ": permission denied");
    fail(path, ": cannot open: ", std::strerror(errno));
  }
  if (::fstat(g.fd, &st) != 0) fail(path, ": cannot stat: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, ": is ", file_kind_name(st.st_mode), ", expected a regular file");
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    if (max_bytes >= (size_t{1} << 20) && max_bytes % (size_t{1} << 20) == 0)
      fail(path, ": file is ", size, " bytes, more than the ", max_bytes >> 20, " MiB limit for this file");
    fail(path, ": file is ", size, " bytes, more than the ", max_bytes, "-byte limit for this file");
  }
  std::string out(static_cast<size_t>(size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(g.fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, ": read error: ", std::strerror(errno));
    if (n == 0) break;  // shrank while we read: keep what is there
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

nlohmann::json read_json_file(const std::string& path, size_t max_bytes) {
  return parse_json(read_regular_file(path, max_bytes), path);
}

nlohmann::json read_json_object_file(const std::string& path, size_t max_bytes) {
  nlohmann::json j = read_json_file(path, max_bytes);
  if (!j.is_object()) fail(path, ": expected a JSON object, got a JSON ", j.type_name());
  return j;
}

}  // namespace tessera::io
