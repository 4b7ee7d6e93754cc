// A Hugging Face model directory: config.json, optional generation_config.json,
// and model.safetensors or a sharded model.safetensors.index.json.
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "io/io_util.h"
#include "io/json_util.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "tessera/error.h"

namespace tessera::io {

using nlohmann::json;

namespace {

// Reads a JSON file that must hold an object; errors name the file. Bounded in size and depth.
json read_json_object(const std::string& path) { return read_json_object_file(path); }

class SafetensorsDirSource : public WeightSource {
 public:
  explicit SafetensorsDirSource(const std::string& dir) : dir_(dir) {
    if (!is_directory(dir)) fail(dir, ": not a directory");
    load_configs();
    const std::string single = path_join(dir, "model.safetensors");
    const std::string index = path_join(dir, "model.safetensors.index.json");
    if (path_exists(index)) {
      open_sharded(index);
    } else if (path_exists(single)) {
      open_single(single);
    } else {
      fail(dir, ": no model.safetensors or model.safetensors.index.json");
    }
    std::sort(metas_.begin(), metas_.end(), [](auto& a, auto& b) { return a.name < b.name; });
  }

  const std::vector<TensorMeta>& tensors() const override { return metas_; }
  const TensorMeta* find(const std::string& name) const override {
    auto it = std::lower_bound(metas_.begin(), metas_.end(), name,
                               [](const TensorMeta& m, const std::string& n) { return m.name < n; });
    return it != metas_.end() && it->name == name ? &*it : nullptr;
  }
  Tensor load(const std::string& name, DType dtype) const override {
    auto it = where_.find(name);
    if (it == where_.end()) fail(dir_, ": checkpoint has no tensor named '", printable(name), "'");
    return it->second->load(name, dtype);
  }
  const std::string& config_json() const override { return config_; }
  const std::string& generation_config_json() const override { return generation_config_; }
  const std::string& origin() const override { return dir_; }

 private:
  void load_configs() {
    const std::string cfg = path_join(dir_, "config.json");
    if (!path_exists(cfg)) fail(cfg, ": missing (every Hugging Face model directory needs config.json)");
    config_ = read_json_object(cfg).dump();  // a FIFO or device is refused by read_json_object
    const std::string gen = path_join(dir_, "generation_config.json");
    if (path_exists(gen)) generation_config_ = read_json_object(gen).dump();
  }

  void add_tensor(const std::shared_ptr<SafetensorsFile>& f, const SafetensorsEntry& e) {
    metas_.push_back(TensorMeta{e.name, e.shape, e.dtype, f->path()});
    where_[e.name] = f;
  }

  void open_single(const std::string& path) {
    auto f = SafetensorsFile::open(path);
    for (const auto& e : f->header().tensors) add_tensor(f, e);
  }

  void open_sharded(const std::string& index_path) {
    const json index = read_json_object(index_path);
    auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object()) fail(index_path, ": missing 'weight_map' object");
    std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;  // each shard opened once
    for (const auto& [name, shard_json] : wm->items()) {
      if (!shard_json.is_string())
        fail(index_path, ": weight_map entry '", printable(name), "' is not a file name");
      const std::string shard = shard_json.get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
        fail(index_path, ": weight_map entry '", printable(name), "' names '", printable(shard),
             "', expected a file name in the same directory");
      auto& f = shards[shard];
      if (!f) {
        const std::string path = path_join(dir_, shard);
        if (!path_exists(path))
          fail(index_path, ": shard '", printable(shard), "' (holding '", printable(name), "') not found at ",
               path);
        f = SafetensorsFile::open(path);
      }
      const SafetensorsEntry* e = f->header().find(name);
      if (!e)
        fail(f->path(), ": tensor '", printable(name), "' is listed in ", index_path,
             " but not in this shard");
      add_tensor(f, *e);
    }
  }

  std::string dir_;
  std::string config_;
  std::string generation_config_;
  std::vector<TensorMeta> metas_;  // sorted by name
  std::map<std::string, std::shared_ptr<SafetensorsFile>> where_;
};

}  // namespace

std::unique_ptr<WeightSource> open_safetensors_dir(const std::string& dir) {
  return std::make_unique<SafetensorsDirSource>(dir);
}

}  // namespace tessera::io
