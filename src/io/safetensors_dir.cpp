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
    // Sort the metadata and the shard of each tensor together (a map from name to shard cost ~100 bytes
    // and a string copy per tensor; headers can list 10^5+ tensors).
    // Usually already sorted: a header is sorted when read, a weight_map is a sorted JSON object.
    auto by_name = [](const TensorMeta& a, const TensorMeta& b) { return a.name < b.name; };
    if (std::is_sorted(metas_.begin(), metas_.end(), by_name)) return;
    std::vector<uint32_t> order(metas_.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](uint32_t a, uint32_t b) { return metas_[a].name < metas_[b].name; });
    std::vector<TensorMeta> metas(metas_.size());
    std::vector<uint32_t> shard_of(metas_.size());
    for (size_t i = 0; i < order.size(); ++i) {
      metas[i] = std::move(metas_[order[i]]);
      shard_of[i] = shard_of_[order[i]];
    }
    metas_ = std::move(metas);
    shard_of_ = std::move(shard_of);
  }

  const std::vector<TensorMeta>& tensors() const override { return metas_; }
  const TensorMeta* find(const std::string& name) const override { return find_sorted(metas_, name); }
  Tensor load(const std::string& name, DType dtype) const override {
    const TensorMeta* m = find(name);
    if (!m) fail(dir_, ": checkpoint has no tensor named '", printable(name), "'");
    return files_[shard_of_[static_cast<size_t>(m - metas_.data())]]->load(name, dtype);
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
    auto [it, added] = file_index_.emplace(f.get(), static_cast<uint32_t>(files_.size()));
    if (added) files_.push_back(f);
    metas_.push_back(TensorMeta{e.name, e.shape, e.dtype, f->path()});
    shard_of_.push_back(it->second);
  }

  void open_single(const std::string& path) {
    auto f = SafetensorsFile::open(path);
    metas_.reserve(f->header().tensors.size());
    shard_of_.reserve(f->header().tensors.size());
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
  std::vector<TensorMeta> metas_;                          // sorted by name
  std::vector<std::shared_ptr<SafetensorsFile>> files_;    // the opened shards
  std::vector<uint32_t> shard_of_;                         // [metas_.size()]: index into files_
  std::map<const SafetensorsFile*, uint32_t> file_index_;  // files_ positions while adding
};

}  // namespace

std::unique_ptr<WeightSource> open_safetensors_dir(const std::string& dir) {
  return std::make_unique<SafetensorsDirSource>(dir);
}

}  // namespace tessera::io
