// GGUF reader (v2/v3): metadata key/values and tensor infos parsed from a
// memory-mapped file; tensors dequantised on request.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::io {

struct GgufTensorInfo {
  std::string name;       // GGUF name, e.g. "blk.0.attn_q.weight"
  Shape shape;            // row-major, outermost first (GGUF stores innermost first; this is reversed)
  uint32_t ggml_type;     // GGML type id (0 = F32, 1 = F16, 2 = Q4_0, 3 = Q4_1, 8 = Q8_0, 30 = BF16, ...)
  std::string type_name;  // "F32", "F16", "Q4_0", ...
  uint64_t offset;        // absolute byte offset of the data in the file
  uint64_t nbytes;        // size of the data in bytes
};

class GgufFile {
 public:
  // Maps and parses `path`; throws Error naming the file and the problem.
  static std::shared_ptr<GgufFile> open(const std::string& path);
  // Parses an in-memory image (used by the fuzzer); `name` appears in errors.
  static std::shared_ptr<GgufFile> parse(const uint8_t* data, size_t size, const std::string& name);

  const std::string& path() const;
  bool has(const std::string& key) const;
  // Typed getters: std::nullopt when the key is absent; throw Error when present with another type.
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<int64_t> get_int(const std::string& key) const;   // any integer type
  std::optional<double> get_float(const std::string& key) const;  // f32/f64 (and integers)
  std::optional<bool> get_bool(const std::string& key) const;
  // Arrays: empty optional when absent; throw Error on a type mismatch.
  std::optional<std::vector<std::string>> get_string_array(const std::string& key) const;
  std::optional<std::vector<int64_t>> get_int_array(const std::string& key) const;
  std::optional<std::vector<bool>> get_bool_array(const std::string& key) const;
  std::optional<std::vector<double>> get_float_array(const std::string& key) const;
  std::vector<std::string> keys() const;
  // Number of elements of an array value; std::nullopt when absent; throws when not an array.
  std::optional<uint64_t> array_size(const std::string& key) const;

  uint32_t version() const;      // 2 or 3
  uint64_t alignment() const;    // general.alignment, default 32
  uint64_t data_offset() const;  // absolute offset of the tensor data section

  const std::vector<GgufTensorInfo>& tensors() const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  // Dequantises/converts a tensor to `dtype` (F32/BF16/F16). Zero-copy when the type already matches; a
  // block-quantised `dtype` (Q8_0 .. Q6_K) only for a tensor stored in it (its blocks as they are).
  Tensor load_tensor(const std::string& name, DType dtype) const;

  struct Impl;
  explicit GgufFile(std::unique_ptr<Impl> impl);
  ~GgufFile();

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::io
