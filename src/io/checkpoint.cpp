// open_checkpoint: one entry point for every kind of model argument.
#include <dirent.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "io/hf_cache.h"
#include "io/io_util.h"
#include "io/weight_source.h"
#include "tessera/error.h"

namespace tessera::io {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool has_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

// Regular files in `dir` whose names end with `suffix`, sorted.
std::vector<std::string> files_with_suffix(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (ends_with(name, suffix) && is_regular_file(path_join(dir, name))) out.push_back(name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<WeightSource> open_directory(const std::string& dir) {
  const bool has_safetensors = is_regular_file(path_join(dir, "model.safetensors")) ||
                               is_regular_file(path_join(dir, "model.safetensors.index.json")) ||
                               !files_with_suffix(dir, ".safetensors").empty();
  if (!has_safetensors) {
    // GGUF-only repos (e.g. a snapshot holding one quantisation) are opened directly.
    const auto ggufs = files_with_suffix(dir, ".gguf");
    if (ggufs.size() == 1) return open_gguf(path_join(dir, ggufs[0]));
    if (ggufs.size() > 1) {
      std::string list;
      for (const auto& g : ggufs) list += (list.empty() ? "" : ", ") + g;
      fail(dir, ": holds several GGUF files (", list, "); pass one of them as the model");
    }
  }
  return open_safetensors_dir(dir);
}

}  // namespace

std::unique_ptr<WeightSource> open_checkpoint(const std::string& arg) {
  const std::string path = resolve_model(arg);
  if (is_directory(path)) return open_directory(path);
  if (ends_with(path, ".gguf") || has_gguf_magic(path)) return open_gguf(path);
  if (ends_with(path, ".safetensors"))
    fail(path, ": a bare .safetensors file has no config.json; pass the model directory instead");
  fail(path, ": not a model directory or a GGUF file");
}

}  // namespace tessera::io
