// Host tensors: a dtype, a shape and a pointer that is either owned or a view
// into a mapped file (kept alive through `owner`).
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tessera {

// The block-quantised dtypes are GGML's formats, kept as a GGUF file stores them (weights only): each row of
// K values is K / B blocks of B values (B = 32, or 256 for the K-quants Q4_K, Q5_K, Q6_K); f16 fields:
//   Q8_0 {f16 d; i8 q[32]}: 34 bytes, d * q.     Q4_0 {f16 d; u8 qs[16]}: 18 bytes, d * (nibble - 8).
//   Q4_1 {f16 d; f16 m; u8 qs[16]}: 20 bytes, d * nibble + m.  (Nibbles: low ones values 0..15, high 16..31.)
//   Q5_0 {f16 d; u32 qh; u8 qs[16]}: 22 bytes, d * (q - 16), q = nibble | bit j of qh << 4.
//   Q5_1 {f16 d; f16 m; u32 qh; u8 qs[16]}: 24 bytes, d * q + m.
//   Q4_K {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}: 144 bytes; 8 sub-blocks of 32 with 6-bit scale sc and
//        min mn: d * sc * q - dmin * mn.  Q5_K {.. as Q4_K; u8 qh[32] before qs}: 176 bytes, 5-bit q.
//   Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: 210 bytes, d * scale (per 16 values) * (q - 32).
// (src/common/ggml_blocks.h and kernels_quant.cpp spell out where each value's bits are.)
//   MXFP4 {u8 e; u8 qs[16]}: 17 bytes (OCP microscaling FP4, as GGML stores it), FP4_E2M1(nibble) * 2^(e -
//   127);
//        nibbles as Q4_0's. The kernels read it as d * q with q = 2 * FP4 (integers -12..12), d = 2^(e -
//        128).
// Q4_K_R8, Q6_K_R8, Q4_0_R8, Q4_1_R8 and MXFP4_R8 are the cpu backend's own forms of Q4_K, Q6_K, Q4_0, Q4_1
// and MXFP4 matrices (never in a file): the same bytes per block, each group of 8 rows stored as one run of
// blocks with the 8 rows' fields interleaved (kernels_quant.cpp), so a decode kernel computes 8 rows per
// vector lane.
enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  I32,
  I64,
  Q8_0,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q4_K,
  Q5_K,
  Q6_K,
  Q4_K_R8,
  Q6_K_R8,
  Q4_0_R8,
  Q4_1_R8,
  MXFP4,
  MXFP4_R8,
  I8,      // the integers of block-quantised weights on a PJRT device (pjrt_backend.cpp), never a model dtype
  F8_E4M3  // float8 e4m3fn (finite only, max 448): an --kv-cache-dtype fp8 cache's values, never a model
           // dtype
};

// Bytes per element of a plain dtype; an internal error for a block-quantised one (use dtype_bytes).
size_t dtype_size(DType dt);
// Whether dt is block-quantised (Q8_0 .. MXFP4_R8).
bool is_quantized(DType dt);
// Elements per block: 32 for Q8_0 .. Q5_1, 256 for the K-quants (and their _R8 forms), 1 otherwise.
int64_t dtype_block(DType dt);
// Bytes of n consecutive elements (n a multiple of dtype_block(dt)).
size_t dtype_bytes(DType dt, int64_t n);
// "float32", "float16", "bfloat16", "int32", "int64", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k",
// "q6_k", "q4_k_r8", "q6_k_r8", "q4_0_r8", "q4_1_r8", "mxfp4", "mxfp4_r8"
const char* dtype_name(DType dt);
// The block-quantised dtype of a GGML type name as a GGUF stores it ("Q8_0", "Q4_K", ...); F32 for any other
// name (a float type or one without a kernel).
DType block_dtype_of_ggml(const std::string& ggml_type);
// Accepts "float32"/"f32"/"fp32", "bfloat16"/"bf16", "float16"/"f16"/"fp16"; throws Error otherwise.
DType parse_dtype(const std::string& s);
// A dtype to load weights as: parse_dtype's names, or "q8_0" / "q4_0" (matrices quantised at load).
DType parse_load_dtype(const std::string& s);
// A KV cache dtype (LoadOptions::kv_cache_dtype): "auto" -> nullopt (the backend's default); "float32" /
// "f32" / "fp32", "bfloat16" / "bf16", "q8_0", "fp8" / "fp8_e4m3" / "float8_e4m3fn"; throws Error otherwise.
std::optional<DType> parse_kv_cache_dtype(const std::string& s);
// The values a KV cache row of hd values holds in a KV cache dtype (F32, BF16, Q8_0, F8_E4M3): hd, or for
// Q8_0 hd rounded up to whole blocks of 32 (the last one padded with zeros), and their bytes (every backend's
// cache rows: the native cpu cache and PJRT's int8 q8_0 buffers alike).
int64_t kv_row_values(DType kv_dtype, int64_t hd);
size_t kv_row_bytes(DType kv_dtype, int64_t hd);
// Quantises rows [rows, K] (K a multiple of 32) of f32 x into blocks of q (Q8_0 or Q4_0), as GGML's reference
// quantisers define them: Q8_0 d = max|x| / 127, q = round(x / d); Q4_0 d = m / -8 for the value m of largest
// magnitude, q = min(15, trunc(x / d + 8.5)); d stored as f16.
void quantize_rows(const float* x, int64_t rows, int64_t K, DType q, void* out);

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3]"

struct Tensor {
  DType dtype = DType::F32;
  Shape shape;
  void* data = nullptr;
  std::shared_ptr<void> owner;  // keeps `data` alive (heap block or file mapping)

  int64_t numel() const { return shape_numel(shape); }
  size_t nbytes() const { return dtype_bytes(dtype, numel()); }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }

  // A new zero-filled tensor owning its memory (64-byte aligned; from 2 MiB up, 2 MiB-aligned and backed by
  // transparent huge pages where the kernel allows them).
  static Tensor empty(DType dt, Shape shape);
  // A view of external memory kept alive by `owner`.
  static Tensor view(DType dt, Shape shape, void* data, std::shared_ptr<void> owner);
  // Whether the memory is an allocation of empty() marked for 2 MiB pages (or a view of one).
  bool huge_page_backed() const;
};

// Scalar conversions (round-to-nearest-even for float -> bf16, as PyTorch does).
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
// float8 e4m3fn (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no infinities, 0x7f/0xff are NaN):
// round to nearest even, saturating at +-448 (as CUDA's satfinite conversion, which vLLM's fp8 cache uses);
// every value is exact in float32 (and in bfloat16).
uint8_t f32_to_f8e4m3(float f);
float f8e4m3_to_f32(uint8_t b);

// Converts `n` elements between float dtypes (F32/F16/BF16).
void convert(const void* src, DType src_dt, void* dst, DType dst_dt, int64_t n);
// Returns `t` converted to `dt` (a copy; or `t` itself when the dtype already fits).
Tensor to_dtype(const Tensor& t, DType dt);

}  // namespace tessera
