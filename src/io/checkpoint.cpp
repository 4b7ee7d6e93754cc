// open_checkpoint: one entry point for every kind of model argument.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "io/hf_cache.h"
#include "io/io_util.h"
#include "io/weight_source.h"
#include "tessera/error.h"

namespace tessera::io {

namespace {

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
  return with_fused_experts(with_text_model(open_safetensors_dir(dir)));
}

}  // namespace

const TensorMeta* find_sorted(const std::vector<TensorMeta>& sorted, const std::string& name) {
  auto it = std::lower_bound(sorted.begin(), sorted.end(), name,
                             [](const TensorMeta& m, const std::string& n) { return m.name < n; });
  return it != sorted.end() && it->name == name ? &*it : nullptr;
}

bool loads_as_stored(const std::string& stored_type, DType dt) {
  if (is_quantized(dt)) return block_dtype_of_ggml(stored_type) == dt;
  return (stored_type == "F32" && dt == DType::F32) || (stored_type == "BF16" && dt == DType::BF16) ||
         (stored_type == "F16" && dt == DType::F16);
}

std::unique_ptr<WeightSource> open_checkpoint(const std::string& arg) {
  const std::string path = resolve_model(arg);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path, ": no such file or directory");
  if (S_ISDIR(st.st_mode)) return open_directory(path);
  // A FIFO or device is refused before anything opens it: opening a FIFO blocks, /dev/zero never ends.
  if (!S_ISREG(st.st_mode))
    fail(path, ": is ", file_kind_name(st.st_mode), ", expected a model directory or a GGUF file");
  // The format is decided by the content, not the name: a GGUF called model.bin is a GGUF.
  if (has_gguf_magic(path)) return open_gguf(path);
  if (ends_with(path, ".gguf"))
    fail(path, ": named .gguf but does not start with the GGUF magic bytes; not a GGUF file (or damaged)");
  if (ends_with(path, ".safetensors"))
    fail(path, ": a bare .safetensors file has no config.json; pass the model directory instead");
  fail(path, ": not a model directory or a GGUF file (no GGUF magic bytes)");
}

}  // namespace tessera::io
