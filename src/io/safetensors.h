// safetensors: 8-byte little-endian header length, a JSON header describing
// each tensor (dtype, shape, data_offsets relative to the data section), then
// the raw data. The header is validated strictly against the file size.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "tessera/tensor.h"

namespace tessera::io {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as stored: "F32", "BF16", "I64", ...
  Shape shape;
  uint64_t begin = 0;  // data_offsets, relative to the start of the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // absolute offset of the data section (8 + header length)
  uint64_t data_size = 0;   // bytes from data_start to the end of the file
  const SafetensorsEntry* find(const std::string& name) const;
};

// Validates and parses the header of an in-memory safetensors image of `size`
// bytes. `name` (usually the path) prefixes every error message.
SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& name);

// Bytes per element for a safetensors dtype string; 0 when unknown.
size_t safetensors_dtype_size(const std::string& dtype);

// Loads one tensor of a parsed image as `dtype` (F32/BF16/F16; or I8 for the bytes of a U8 / I8 tensor, as a
// view). Zero-copy view
// kept alive by `owner` when the stored dtype equals `dtype` and the data is
// suitably aligned; otherwise a converted copy.
Tensor load_safetensors_tensor(const uint8_t* data, const SafetensorsHeader& header,
                               const SafetensorsEntry& entry, DType dtype, const std::shared_ptr<void>& owner,
                               const std::string& name);

// One mapped .safetensors file with its parsed header.
class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  const SafetensorsHeader& header() const { return header_; }
  const std::string& path() const { return file_->path(); }
  Tensor load(const std::string& tensor, DType dtype) const;

 private:
  std::shared_ptr<MappedFile> file_;
  SafetensorsHeader header_;
};

}  // namespace tessera::io
