// Helpers for the io tests: temporary directories and byte-level builders for
// safetensors and GGUF images (bad inputs are made in the tests themselves).
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/error.h"

namespace tessera::io::testing {

using Bytes = std::vector<uint8_t>;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tessera-io-XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const Bytes& b) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
inline void write_file(const std::string& path, const std::string& s) {
  write_file(path, Bytes(s.begin(), s.end()));
}

inline std::string fixture(const std::string& name) {
  return std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/io/" + name;
}

// A safetensors image from a header (JSON text) and the data section.
inline Bytes safetensors_bytes(const std::string& header, const Bytes& data) {
  // One sized buffer filled with memcpy (GCC 12 -O3 misreads vector::insert chains as out of bounds).
  Bytes out(8 + header.size() + data.size());
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  if (!header.empty()) std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

// Builds valid safetensors files tensor by tensor (data laid out in order).
class SafetensorsBuilder {
 public:
  SafetensorsBuilder& add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                          const void* src, size_t nbytes) {
    header_[name] = {
        {"dtype", dtype}, {"shape", shape}, {"data_offsets", {data_.size(), data_.size() + nbytes}}};
    const auto* p = static_cast<const uint8_t*>(src);
    data_.insert(data_.end(), p, p + nbytes);
    return *this;
  }
  SafetensorsBuilder& add_f32(const std::string& name, std::vector<int64_t> shape,
                              const std::vector<float>& v) {
    return add(name, "F32", std::move(shape), v.data(), v.size() * 4);
  }
  SafetensorsBuilder& add_u16(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                              const std::vector<uint16_t>& v) {
    return add(name, dtype, std::move(shape), v.data(), v.size() * 2);
  }
  Bytes bytes() const {
    std::string h = header_.dump();
    while ((8 + h.size()) % 8 != 0) h += ' ';  // as HF does: data section 8-byte aligned
    return safetensors_bytes(h, data_);
  }

 private:
  nlohmann::json header_ = nlohmann::json::object();
  Bytes data_;
};

// Little-endian GGUF writer for hand-made (often broken) files.
class GgufBuilder {
 public:
  GgufBuilder& raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
    return *this;
  }
  GgufBuilder& u32(uint32_t v) { return raw(&v, 4); }
  GgufBuilder& u64(uint64_t v) { return raw(&v, 8); }
  GgufBuilder& f32(float v) { return raw(&v, 4); }
  GgufBuilder& str(const std::string& s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  GgufBuilder& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    raw("GGUF", 4);
    u32(version);
    u64(n_tensors);
    return u64(n_kv);
  }
  GgufBuilder& kv_string(const std::string& k, const std::string& v) {
    str(k);
    u32(8);
    return str(v);
  }
  GgufBuilder& kv_u32(const std::string& k, uint32_t v) {
    str(k);
    u32(4);
    return u32(v);
  }
  GgufBuilder& kv_f32(const std::string& k, float v) {
    str(k);
    u32(6);
    return f32(v);
  }
  // Tensor info: dims innermost first, as GGUF stores them.
  GgufBuilder& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    str(name);
    u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    u32(type);
    return u64(offset);
  }
  GgufBuilder& align(size_t a = 32) {
    while (out_.size() % a) out_.push_back(0);
    return *this;
  }
  GgufBuilder& zeros(size_t n) {
    out_.insert(out_.end(), n, 0);
    return *this;
  }
  const Bytes& bytes() const { return out_; }

 private:
  Bytes out_;
};

// Runs `fn`, expects a tessera::Error whose one-line message contains every needle.
template <typename Fn>
std::string expect_error(Fn&& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
  } catch (const tessera::Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line error: " << msg;
    for (const auto& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    return msg;
  }
  ADD_FAILURE() << "expected a tessera::Error";
  return "";
}

}  // namespace tessera::io::testing
