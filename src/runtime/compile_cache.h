// One Executable per ShapeKey, with counters that make recompiles visible, an optional on-disk cache of
// compiled programs (backends whose executables serialize: PJRT), and an optional recompile guard.
//
// On disk: one file per (program, compiler), named <hash of program>-<hash of compiler>.tsx, where the
// program identity is the emitted program text plus the compile options and the compiler identity is the
// plugin's platform name/version, PJRT API version and device kind (Backend::program_identity /
// compiler_identity). A file holds a short text header (magic, compiler, key, program hash, payload size
// and checksum) and the plugin's serialized executable. Files are written to a temporary name and renamed,
// so a reader never sees half an entry. Anything wrong with an entry is a warning and a recompile.
//
// Thread-safe: any number of threads may call get() (and the other members) at once. A key is compiled once:
// a thread asking for a key that another thread is compiling waits for it; different keys compile in parallel
// (the lock is not held while a graph is built, compiled or read from disk).
#pragma once
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backends/backend.h"
#include "graph/graph.h"

namespace tessera::runtime {

using graph::Graph;
using graph::ShapeKey;
using graph::ShapeKeyHash;

struct CompileStats {
  int compiles = 0;                  // programs the backend compiled
  int hits = 0;                      // in-memory hits
  int disk_hits = 0;                 // executables loaded from the on-disk cache instead of compiling
  int disk_writes = 0;               // entries written to the on-disk cache
  double compile_seconds = 0;        // building + compiling, all compiles
  double first_compile_seconds = 0;  // the first compile of this cache
  double load_seconds = 0;           // loading disk entries
  std::vector<std::string> keys;     // every key compiled or loaded from disk, in order
  std::vector<std::string> misses;   // per in-memory miss: "<key>: <why>" (new key, plugin changed, entry
                                     // corrupt, loaded from disk)
};

struct CompileCacheOptions {
  std::string disk_dir;     // empty: no on-disk cache
  int max_recompiles = -1;  // < 0: no guard; else more than this many new keys after arm_guard() is an Error
  bool verbose = false;     // say every miss (and why) on stderr
};

class CompileCache {
 public:
  explicit CompileCache(backends::Backend& backend, CompileCacheOptions options = {});
  // Returns the executable for `key`, loading it from disk or building and compiling the graph on a miss.
  // The reference stays valid as long as the CompileCache (entries are never replaced or dropped). `build`
  // runs on the calling thread, without the cache's lock held.
  backends::Executable& get(const ShapeKey& key, const std::function<Graph(const ShapeKey&)>& build);
  bool contains(const ShapeKey& key) const;  // compiled (or loaded) and ready
  CompileStats stats() const;                // a snapshot
  const CompileCacheOptions& options() const { return options_; }

  // From now on every new key counts against max_recompiles (called after warm-up or the first generate).
  void arm_guard();
  bool guard_armed() const;
  int unexpected_compiles() const;

 private:
  // What one miss did, folded into stats_ under the lock when it is done.
  struct Miss {
    bool loaded = false;   // from the disk cache (else compiled)
    bool written = false;  // a disk entry was written
    double seconds = 0;    // compile: build + compile; load: reading the entry
    std::string why;
  };
  void check_guard(const ShapeKey& key);  // mu_ held
  std::unique_ptr<backends::Executable> miss(const ShapeKey& key,
                                             const std::function<Graph(const ShapeKey&)>& build, Miss& m);
  std::unique_ptr<backends::Executable> from_disk(const Graph& g, const std::string& path,
                                                  const std::string& program_hash, std::string& why);
  bool to_disk(const Graph& g, const backends::Executable& exe, const std::string& path,
               const std::string& program_hash);
  void say_miss(const ShapeKey& key, const std::string& why) const;

  backends::Backend& backend_;
  const CompileCacheOptions options_;
  mutable std::mutex mu_;             // guards everything below
  std::condition_variable compiled_;  // a key left compiling_
  std::unordered_map<ShapeKey, std::unique_ptr<backends::Executable>, ShapeKeyHash> cache_;
  std::unordered_set<ShapeKey, ShapeKeyHash> compiling_;  // keys some thread is compiling or loading now
  CompileStats stats_;
  bool armed_ = false;
  int unexpected_ = 0;
};

// 128-bit content hash as 32 hex digits (two independent 64-bit FNV-style lanes); not cryptographic.
std::string content_hash(const std::string& bytes);

}  // namespace tessera::runtime
