#include "runtime/compile_cache.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessera/error.h"
#include "tessera/log.h"

namespace tessera::runtime {

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

constexpr const char* kMagic = "tessera-compile-cache 1";

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

uint64_t fnv1a(const std::string& s, uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// A second lane that mixes 8 bytes at a time, so the two lanes fail independently.
uint64_t mix_lane(const std::string& s) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ s.size();
  for (size_t i = 0; i < s.size(); i += 8) {
    uint64_t w = 0;
    for (size_t j = 0; j < 8 && i + j < s.size(); ++j)
      w |= uint64_t{static_cast<unsigned char>(s[i + j])} << (8 * j);
    h ^= w;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  h ^= h >> 29;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 32);
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// One line of header text: newlines and non-printables escaped so the header stays line-based.
std::string one_line(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream os;
  os << in.rdbuf();
  out = os.str();
  return true;
}

// Squared-ish distance between keys: fields that differ first, then how far numbers are apart.
std::pair<int, int64_t> key_distance(const ShapeKey& a, const ShapeKey& b) {
  int fields = 0;
  int64_t far = 0;
  auto num = [&](int64_t x, int64_t y) {
    if (x != y) ++fields, far += x > y ? x - y : y - x;
  };
  num(static_cast<int64_t>(a.phase), static_cast<int64_t>(b.phase));
  num(a.batch, b.batch);
  num(a.seq, b.seq);
  num(a.cache_len, b.cache_len);
  num(static_cast<int64_t>(a.dtype), static_cast<int64_t>(b.dtype));
  num(a.all_logits, b.all_logits);
  num(a.tp_rank, b.tp_rank);
  num(a.tp_size, b.tp_size);
  num(static_cast<int64_t>(a.sampling), static_cast<int64_t>(b.sampling));
  return {fields, far};
}

}  // namespace

std::string content_hash(const std::string& bytes) {
  return hex64(fnv1a(bytes, 0xcbf29ce484222325ull)) + hex64(mix_lane(bytes));
}

CompileCache::CompileCache(backends::Backend& backend, CompileCacheOptions options)
    : backend_(backend), options_(std::move(options)) {}

void CompileCache::say_miss(const ShapeKey& key, const std::string& why) const {
  if (options_.verbose) log_info("compile cache miss ", key.str(), ": ", why);
}

bool CompileCache::contains(const ShapeKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.count(key) != 0;
}

CompileStats CompileCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CompileCache::arm_guard() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = true;
}

bool CompileCache::guard_armed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return armed_;
}

int CompileCache::unexpected_compiles() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unexpected_;
}

void CompileCache::check_guard(const ShapeKey& key) {
  if (!armed_ || options_.max_recompiles < 0) return;
  if (++unexpected_ <= options_.max_recompiles) return;
  const ShapeKey* nearest = nullptr;
  std::pair<int, int64_t> best{1 << 30, 0};
  for (const auto& [k, exe] : cache_) {
    auto d = key_distance(k, key);
    if (!nearest || d < best) nearest = &k, best = d;
  }
  std::string changed = nearest
                            ? "nearest compiled key " + nearest->str() + ", changed: " + nearest->diff(key)
                            : "nothing compiled yet";
  fail("unexpected recompile ", unexpected_,
       " after warm-up exceeds --max-recompiles / TESSERA_MAX_RECOMPILES = ", options_.max_recompiles,
       ": new key ", key.str(), " (", changed, ")");
}

backends::Executable& CompileCache::get(const ShapeKey& key,
                                        const std::function<Graph(const ShapeKey&)>& build) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ++stats_.hits;
      return *it->second;
    }
    if (compiling_.count(key) == 0) break;
    compiled_.wait(lock);  // another thread is compiling this key: wait for it (or for its failure)
  }
  check_guard(key);
  compiling_.insert(key);
  lock.unlock();
  Miss m;
  std::unique_ptr<backends::Executable> exe;
  try {
    exe = miss(key, build, m);
  } catch (...) {
    lock.lock();
    compiling_.erase(key);
    lock.unlock();
    compiled_.notify_all();  // a waiter retries (and meets the same error itself)
    throw;
  }
  lock.lock();
  stats_.misses.push_back(key.str() + ": " + m.why);
  stats_.keys.push_back(key.str());
  if (m.loaded) {
    stats_.load_seconds += m.seconds;
    ++stats_.disk_hits;
  } else {
    if (stats_.compiles == 0) stats_.first_compile_seconds = m.seconds;
    stats_.compile_seconds += m.seconds;
    ++stats_.compiles;
  }
  if (m.written) ++stats_.disk_writes;
  backends::Executable& ref = *cache_.emplace(key, std::move(exe)).first->second;
  compiling_.erase(key);
  lock.unlock();
  compiled_.notify_all();
  return ref;
}

std::unique_ptr<backends::Executable> CompileCache::miss(const ShapeKey& key,
                                                         const std::function<Graph(const ShapeKey&)>& build,
                                                         Miss& m) {
  auto t0 = clock_type::now();
  Graph g = build(key);

  // On-disk cache: <dir>/<program hash>-<compiler hash>.tsx
  std::string path, program_hash, why = "new key";
  if (!options_.disk_dir.empty()) {
    const std::string identity = backend_.program_identity(g);
    if (!identity.empty()) {
      program_hash = content_hash(identity);
      const std::string compiler_hash = content_hash(backend_.compiler_identity()).substr(0, 16);
      path = (fs::path(options_.disk_dir) / (program_hash + "-" + compiler_hash + ".tsx")).string();
      auto t1 = clock_type::now();
      if (auto exe = from_disk(g, path, program_hash, why)) {
        m.loaded = true;
        m.seconds = seconds_since(t1);
        m.why = "loaded from disk (" + path + ")";
        say_miss(key, m.why);
        return exe;
      }
    } else {
      why = "new key (the " + backend_.name() + " backend keeps no on-disk cache)";
    }
  }
  m.why = why;
  say_miss(key, why);
  auto exe = backend_.compile(g);
  m.seconds = seconds_since(t0);
  if (!path.empty()) m.written = to_disk(g, *exe, path, program_hash);
  return exe;
}

std::unique_ptr<backends::Executable> CompileCache::from_disk(const Graph& g, const std::string& path,
                                                              const std::string& program_hash,
                                                              std::string& why) {
  std::string data;
  if (!read_file(path, data)) {
    // No entry for this compiler; one for another compiler means the plugin changed.
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(options_.disk_dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(program_hash + "-", 0) == 0 && e.path().extension() == ".tsx") {
        why = "plugin changed (an entry for another compiler exists: " + name + ")";
        return nullptr;
      }
    }
    why = "new key (not in " + options_.disk_dir + ")";
    return nullptr;
  }
  auto corrupt = [&](const std::string& what) -> std::unique_ptr<backends::Executable> {
    why = "entry corrupt (" + what + ")";
    log_warning("compile cache: ignoring ", path, ": ", what, "; recompiling");
    return nullptr;
  };
  // Header: five lines, then the payload.
  std::vector<std::string> lines;
  size_t pos = 0;
  while (lines.size() < 5) {
    size_t nl = data.find('\n', pos);
    if (nl == std::string::npos || nl - pos > 4096) return corrupt("truncated header");
    lines.push_back(data.substr(pos, nl - pos));
    pos = nl + 1;
  }
  if (lines[0] != kMagic) return corrupt("not a tessera compile cache entry");
  if (lines[1] != "compiler " + one_line(backend_.compiler_identity()))
    return corrupt("foreign entry: made by " + lines[1].substr(0, 200));
  if (lines[3] != "program " + program_hash) return corrupt("foreign entry: program hash differs");
  unsigned long long size = 0;
  char sum[17] = {};
  if (std::sscanf(lines[4].c_str(), "bytes %llu fnv %16s", &size, sum) != 2) return corrupt("bad size line");
  if (size != data.size() - pos)
    return corrupt("payload is " + std::to_string(data.size() - pos) + " bytes, header says " +
                   std::to_string(size));
  const std::string payload = data.substr(pos);
  if (hex64(fnv1a(payload, 0xcbf29ce484222325ull)) != sum) return corrupt("payload checksum mismatch");
  try {
    return backend_.load_serialized(g, payload);
  } catch (const Error& e) {
    return corrupt(std::string("the backend refused it: ") + e.what());
  }
}

bool CompileCache::to_disk(const Graph& g, const backends::Executable& exe, const std::string& path,
                           const std::string& program_hash) {
  static std::atomic<int> counter{0};
  try {
    const std::string payload = backend_.serialize(exe);
    std::error_code ec;
    fs::create_directories(options_.disk_dir, ec);
    const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << kMagic << "\n"
          << "compiler " << one_line(backend_.compiler_identity()) << "\n"
          << "key " << one_line(g.key.str()) << "\n"
          << "program " << program_hash << "\n"
          << "bytes " << payload.size() << " fnv " << hex64(fnv1a(payload, 0xcbf29ce484222325ull)) << "\n";
      out.write(payload.data(), static_cast<std::streamsize>(payload.size()));
      out.flush();
      if (!out) {
        std::remove(tmp.c_str());
        fail("cannot write ", tmp);
      }
    }
    fs::rename(tmp, path, ec);  // atomic on POSIX: readers see the old entry or the new one
    if (ec) {
      std::remove(tmp.c_str());
      fail("cannot rename ", tmp, " to ", path, ": ", ec.message());
    }
    return true;
  } catch (const Error& e) {
    // A read-only or full cache directory must not stop generation.
    log_warning("compile cache: not saved: ", e.what());
    return false;
  }
}

}  // namespace tessera::runtime
