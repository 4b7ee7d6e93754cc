#include "io/hf_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <mutex>

#include "io/io_util.h"
#include "io/json_util.h"
#include "tessera/error.h"
#include "tessera/model.h"

namespace tessera::io {

namespace fs = std::filesystem;

namespace {

std::mutex& hub_dirs_mutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::vector<std::string>& hub_dirs() {
  static auto* d = new std::vector<std::string>;
  return *d;
}

bool valid_repo_part(const std::string& s) {
  if (s.empty() || s == "." || s == "..") return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// The snapshot named by refs/main, else the only (or most recently modified) snapshot; "" when none.
std::string pick_snapshot(const std::string& repo_dir) {
  const std::string snaps = path_join(repo_dir, "snapshots");
  const std::string ref = path_join(repo_dir, "refs/main");
  if (path_exists(ref)) {
    // A commit hash (40 bytes); the cap and the regular-file check keep a FIFO or device from blocking us.
    std::string hash = read_regular_file(ref, 4096);
    hash = trim(hash.substr(0, hash.find('\n')));
    if (valid_repo_part(hash) && is_directory(path_join(snaps, hash))) return path_join(snaps, hash);
  }
  std::error_code ec;
  std::string best;
  fs::file_time_type best_time{};
  for (const auto& ent : fs::directory_iterator(snaps, ec)) {
    if (!ent.is_directory(ec)) continue;
    auto t = ent.last_write_time(ec);
    if (ec) continue;
    if (best.empty() || t > best_time) {
      best = ent.path().string();
      best_time = t;
    }
  }
  return best;
}

}  // namespace

bool looks_like_repo_id(const std::string& arg) {
  const size_t slash = arg.find('/');
  if (slash == std::string::npos || arg.find('/', slash + 1) != std::string::npos) return false;
  return valid_repo_part(arg.substr(0, slash)) && valid_repo_part(arg.substr(slash + 1));
}

void set_hf_hub_dirs(std::vector<std::string> dirs) {
  std::lock_guard<std::mutex> lock(hub_dirs_mutex());
  hub_dirs() = std::move(dirs);
}

std::vector<std::string> hf_hub_dirs() {
  std::lock_guard<std::mutex> lock(hub_dirs_mutex());
  return hub_dirs();
}

std::string resolve_model(const std::string& arg) {
  if (arg.empty()) fail("model argument is empty");
  struct stat st {};
  if (::stat(arg.c_str(), &st) == 0) return arg;
  if (!looks_like_repo_id(arg))
    fail("model '", printable(arg), "': no such file or directory (and not a Hugging Face repo id org/name)");
  const std::vector<std::string> hubs = hf_hub_dirs();
  if (hubs.empty())
    fail("model '", arg,
         "' is not a local path, and no Hugging Face cache directory is configured to look for it in "
         "(set_hf_hub_dirs); pass a directory");
  const size_t slash = arg.find('/');
  const std::string folder = "models--" + arg.substr(0, slash) + "--" + arg.substr(slash + 1);
  std::string looked;
  for (const std::string& hub : hubs) {
    const std::string repo_dir = path_join(hub, folder);
    looked += (looked.empty() ? "" : ", ") + repo_dir;
    if (!is_directory(repo_dir)) continue;
    const std::string snap = pick_snapshot(repo_dir);
    if (!snap.empty()) return snap;
  }
  fail("model '", arg, "' is not a local path and is not in the Hugging Face cache; looked in: ", looked,
       " (download it with `huggingface-cli download ", arg, "` or pass a directory)");
}

}  // namespace tessera::io

namespace tessera {
void set_hf_hub_dirs(std::vector<std::string> dirs) { io::set_hf_hub_dirs(std::move(dirs)); }
}  // namespace tessera
