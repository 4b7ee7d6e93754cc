#include "tessera/tensor.h"

#include <sys/mman.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

#include "common/ggml_blocks.h"
#include "tessera/error.h"

namespace tessera {

size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::F32:
      return 4;
    case DType::F16:
      return 2;
    case DType::BF16:
      return 2;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::I8:
    case DType::F8_E4M3:
      return 1;
    default:
      break;
  }
  TS_ASSERT(false, "dtype_size of block-quantised ", dtype_name(dt));
  return 0;
}

bool is_quantized(DType dt) { return dt >= DType::Q8_0 && dt <= DType::MXFP4_R8; }

int64_t dtype_block(DType dt) {
  if (dt == DType::Q4_K || dt == DType::Q5_K || dt == DType::Q6_K || dt == DType::Q4_K_R8 ||
      dt == DType::Q6_K_R8)
    return 256;
  return is_quantized(dt) ? 32 : 1;
}

size_t dtype_bytes(DType dt, int64_t n) {
  size_t block_bytes = 0;
  switch (dt) {
    case DType::Q8_0:
      block_bytes = 34;
      break;
    case DType::Q4_0:
    case DType::Q4_0_R8:
      block_bytes = 18;
      break;
    case DType::Q4_1:
    case DType::Q4_1_R8:
      block_bytes = 20;
      break;
    case DType::Q5_0:
      block_bytes = 22;
      break;
    case DType::Q5_1:
      block_bytes = 24;
      break;
    case DType::Q4_K:
    case DType::Q4_K_R8:
      block_bytes = 144;
      break;
    case DType::Q5_K:
      block_bytes = 176;
      break;
    case DType::Q6_K:
    case DType::Q6_K_R8:
      block_bytes = 210;
      break;
    case DType::MXFP4:
    case DType::MXFP4_R8:
      block_bytes = 17;
      break;
    default:
      return static_cast<size_t>(n) * dtype_size(dt);
  }
  return static_cast<size_t>(n / dtype_block(dt)) * block_bytes;
}

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::F32:
      return "float32";
    case DType::F16:
      return "float16";
    case DType::BF16:
      return "bfloat16";
    case DType::I32:
      return "int32";
    case DType::I64:
      return "int64";
    case DType::I8:
      return "int8";
    case DType::F8_E4M3:
      return "float8_e4m3fn";
    case DType::Q8_0:
      return "q8_0";
    case DType::Q4_0:
      return "q4_0";
    case DType::Q4_1:
      return "q4_1";
    case DType::Q5_0:
      return "q5_0";
    case DType::Q5_1:
      return "q5_1";
    case DType::Q4_K:
      return "q4_k";
    case DType::Q5_K:
      return "q5_k";
    case DType::Q6_K:
      return "q6_k";
    case DType::Q4_K_R8:
      return "q4_k_r8";
    case DType::Q6_K_R8:
      return "q6_k_r8";
    case DType::Q4_0_R8:
      return "q4_0_r8";
    case DType::Q4_1_R8:
      return "q4_1_r8";
    case DType::MXFP4:
      return "mxfp4";
    case DType::MXFP4_R8:
      return "mxfp4_r8";
  }
  return "?";
}

DType block_dtype_of_ggml(const std::string& ggml_type) {
  for (DType dt : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K,
                   DType::Q6_K, DType::MXFP4}) {
    std::string upper = dtype_name(dt);
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (upper == ggml_type) return dt;
  }
  return DType::F32;
}

DType parse_dtype(const std::string& s) {
  if (s == "float32" || s == "f32" || s == "fp32") return DType::F32;
  if (s == "bfloat16" || s == "bf16") return DType::BF16;
  if (s == "float16" || s == "f16" || s == "fp16" || s == "half") return DType::F16;
  fail("unsupported dtype '", s, "' (expected float32, bfloat16 or float16)");
}

DType parse_load_dtype(const std::string& s) {
  if (s == "q8_0") return DType::Q8_0;
  if (s == "q4_0") return DType::Q4_0;
  if (s == "q4_k") return DType::Q4_K;
  if (s == "float32" || s == "f32" || s == "fp32" || s == "bfloat16" || s == "bf16" || s == "float16" ||
      s == "f16" || s == "fp16" || s == "half")
    return parse_dtype(s);
  fail("unsupported dtype '", s, "' (expected float32, bfloat16, float16, q8_0, q4_0 or q4_k)");
}

int64_t kv_row_values(DType kv_dtype, int64_t hd) {
  return kv_dtype == DType::Q8_0 ? (hd + 31) / 32 * 32 : hd;
}

size_t kv_row_bytes(DType kv_dtype, int64_t hd) { return dtype_bytes(kv_dtype, kv_row_values(kv_dtype, hd)); }

std::optional<DType> parse_kv_cache_dtype(const std::string& s) {
  if (s == "auto") return std::nullopt;
  if (s == "float32" || s == "f32" || s == "fp32") return DType::F32;
  if (s == "bfloat16" || s == "bf16") return DType::BF16;
  if (s == "q8_0") return DType::Q8_0;
  if (s == "fp8" || s == "fp8_e4m3" || s == "float8_e4m3fn") return DType::F8_E4M3;
  fail("kv_cache_dtype '", s, "': not a KV cache dtype (expected auto, bfloat16, float32, q8_0 or fp8)");
}

namespace {

// One Q4_K block (256 values, 144 bytes: f16 d and dmin, 12 bytes of 6-bit sub-block scales and mins, 128
// bytes of nibbles; value = d * sc * q - dmin * mn). Per sub-block of 32, the affine fit x ~ a * q - b with q
// in 0..15 and b >= 0 (the range [min(x, 0), max(x)] over 15 steps, then two least-squares refits of a and b
// to the codes it gives); then the 8 a's and b's quantised to 6 bits against the block's largest (d, dmin in
// f16) and the codes chosen again for the scales actually stored.
void quantize_q4_k_block(const float* x, uint8_t* dst) {
  float a[8], b[8];
  for (int s = 0; s < 8; ++s) {
    const float* xs = x + 32 * s;
    float lo = 0.0f, hi = 0.0f;
    for (int j = 0; j < 32; ++j) {
      lo = std::min(lo, xs[j]);
      hi = std::max(hi, xs[j]);
    }
    a[s] = (hi - lo) / 15.0f;
    b[s] = -lo;
    for (int it = 0; it < 2 && a[s] > 0.0f; ++it) {
      // Least squares of x = a q - b over the current codes: n, sum q, sum q^2, sum x, sum q x.
      double sq = 0, sqq = 0, sx = 0, sqx = 0;
      for (int j = 0; j < 32; ++j) {
        const double q = std::clamp(std::nearbyint((xs[j] + b[s]) / a[s]), 0.0f, 15.0f);
        sq += q;
        sqq += q * q;
        sx += xs[j];
        sqx += q * xs[j];
      }
      const double det = 32 * sqq - sq * sq;
      if (det <= 0) break;
      double na = (32 * sqx - sq * sx) / det, nb = (sq * sqx - sqq * sx) / det;  // x = na q - nb
      if (nb < 0) {  // the offset must subtract: refit the scale alone
        nb = 0;
        na = sqq > 0 ? sqx / sqq : 0;
      }
      if (!(na > 0)) break;
      a[s] = static_cast<float>(na);
      b[s] = static_cast<float>(nb);
    }
  }
  const float amax = *std::max_element(a, a + 8), bmax = *std::max_element(b, b + 8);
  const uint16_t dh = f32_to_f16(amax / 63.0f), mh = f32_to_f16(bmax / 63.0f);
  const float d = f16_to_f32(dh), dmin = f16_to_f32(mh);
  if (!std::isfinite(d) || !std::isfinite(dmin))
    fail("values up to ", std::max(amax * 15.0f, bmax), " are beyond Q4_K's float16 scales");
  uint8_t sc[8], mn[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = d > 0.0f ? static_cast<uint8_t>(std::clamp(std::nearbyint(a[s] / d), 0.0f, 63.0f)) : 0;
    mn[s] = dmin > 0.0f ? static_cast<uint8_t>(std::clamp(std::nearbyint(b[s] / dmin), 0.0f, 63.0f)) : 0;
  }
  std::memcpy(dst, &dh, 2);
  std::memcpy(dst + 2, &mh, 2);
  k_quant_pack_scale_min(sc, mn, dst + 4);
  uint8_t* qs = dst + 16;
  std::memset(qs, 0, 128);
  for (int s = 0; s < 8; ++s) {
    const float step = d * sc[s], off = dmin * mn[s];
    for (int j = 0; j < 32; ++j) {
      const float q =
          step > 0.0f ? std::clamp(std::nearbyint((x[32 * s + j] + off) / step), 0.0f, 15.0f) : 0.0f;
      // Sub-blocks 2c and 2c + 1: the low and high nibbles of bytes 32c .. 32c + 31.
      qs[32 * (s / 2) + j] |= static_cast<uint8_t>(static_cast<int>(q) << (4 * (s & 1)));
    }
  }
}

}  // namespace

void quantize_rows(const float* x, int64_t rows, int64_t K, DType q, void* out) {
  TS_ASSERT((q == DType::Q8_0 || q == DType::Q4_0 || q == DType::Q4_K) && K % dtype_block(q) == 0,
            "quantize_rows to ", dtype_name(q), " K ", K);
  auto* dst = static_cast<uint8_t*>(out);
  if (q == DType::Q4_K) {
    for (int64_t b = 0; b < rows * K / 256; ++b, x += 256, dst += 144) {
      for (int j = 0; j < 256; ++j)
        if (!std::isfinite(x[j])) fail("value ", x[j], " cannot be quantised to ", dtype_name(q));
      quantize_q4_k_block(x, dst);
    }
    return;
  }
  for (int64_t b = 0; b < rows * K / 32; ++b, x += 32) {
    float amax = 0.0f, extreme = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (!std::isfinite(x[j])) fail("value ", x[j], " cannot be quantised to ", dtype_name(q));
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        extreme = x[j];
      }
    }
    const float d = q == DType::Q8_0 ? amax / 127.0f : extreme / -8.0f;
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(dst, &dh, 2);
    if (q == DType::Q8_0) {
      for (int j = 0; j < 32; ++j)
        dst[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(x[j] * inv)));
      dst += 34;
    } else {
      for (int j = 0; j < 16; ++j) {
        const auto lo = static_cast<uint8_t>(std::min(15, static_cast<int>(x[j] * inv + 8.5f)));
        const auto hi = static_cast<uint8_t>(std::min(15, static_cast<int>(x[j + 16] * inv + 8.5f)));
        dst[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
      }
      dst += 18;
    }
  }
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

namespace {

// Tensors of 2 MiB and more (weights, KV caches, activation arenas) live in their own anonymous mapping,
// aligned to 2 MiB and marked for transparent huge pages. Decode streams every weight once per token, and
// with 4 KiB pages each 4 KiB of weights costs a TLB miss (a two-level walk under a hypervisor): measured on
// the 2-core EPYC, one core reads 18 GB/s from 4 KiB pages and 31 GB/s from 2 MiB pages. Fresh anonymous
// pages are zero, so no memset.
constexpr size_t kHugePage = size_t{2} << 20;

// The mapped length of a huge-page tensor of `bytes`: whole 4 KiB pages.
size_t mapped_bytes(size_t bytes) { return (bytes + 4095) / 4096 * 4096; }

void* huge_alloc(size_t bytes) {
  const size_t span = bytes + kHugePage;
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TS_ASSERT(raw != MAP_FAILED, "out of memory allocating ", bytes, " bytes");
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
  // Unmap the unaligned head and the tail past the rounded-up size.
  const size_t head = aligned - begin;
  const size_t kept = mapped_bytes(bytes);
  if (head) ::munmap(raw, head);
  if (span - head > kept) ::munmap(reinterpret_cast<void*>(aligned + kept), span - head - kept);
  ::madvise(reinterpret_cast<void*>(aligned), kept, MADV_HUGEPAGE);  // advisory: fine if THP is off
  return reinterpret_cast<void*>(aligned);
}

struct HugeRelease {
  size_t bytes;
  void operator()(void* p) const { ::munmap(p, mapped_bytes(bytes)); }
};

}  // namespace

Tensor Tensor::empty(DType dt, Shape shape) {
  Tensor t;
  t.dtype = dt;
  t.shape = std::move(shape);
  size_t bytes = (t.nbytes() + 63) / 64 * 64;
  if (bytes == 0) bytes = 64;
  if (bytes >= kHugePage) {
    void* p = huge_alloc(bytes);
    t.data = p;
    t.owner = std::shared_ptr<void>(p, HugeRelease{bytes});
    return t;
  }
  void* p = std::aligned_alloc(64, bytes);
  TS_ASSERT(p != nullptr, "out of memory allocating ", bytes, " bytes");
  std::memset(p, 0, bytes);
  t.data = p;
  t.owner = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  return t;
}

bool Tensor::huge_page_backed() const { return std::get_deleter<HugeRelease>(owner) != nullptr; }

Tensor Tensor::view(DType dt, Shape shape, void* data, std::shared_ptr<void> owner) {
  Tensor t;
  t.dtype = dt;
  t.shape = std::move(shape);
  t.data = data;
  t.owner = std::move(owner);
  return t;
}

uint8_t f32_to_f8e4m3(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return 0x7f;  // NaN
  uint32_t bits;
  if (u < 0x3c800000u) {  // below 2^-6, the smallest normal: subnormal steps of 2^-9 (8 of them reach 2^-6)
    float a;
    std::memcpy(&a, &u, 4);
    bits = static_cast<uint32_t>(std::nearbyint(a * 512.0f));  // round half to even (the default mode)
  } else {
    // Keep 3 of float32's 23 mantissa bits, rounding half to even (a carry moves into the exponent), then
    // rebias the exponent from 127 to 7.
    bits = ((u + 0x7ffffu + ((u >> 20) & 1u)) >> 20) - ((127u - 7u) << 3);
  }
  return static_cast<uint8_t>(sign | std::min<uint32_t>(bits, 0x7e));  // 0x7e = 448: saturate
}

float f8e4m3_to_f32(uint8_t b) {
  const uint32_t e = (b >> 3) & 0xfu, m = b & 7u;
  float v;
  if (e == 15 && m == 7)
    v = std::numeric_limits<float>::quiet_NaN();
  else if (e == 0)
    v = std::ldexp(static_cast<float>(m), -9);
  else
    v = std::ldexp(static_cast<float>(8 + m), static_cast<int>(e) - 10);
  return (b & 0x80u) ? -v : v;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((u >> 23) & 0xff);
  uint32_t mant = u & 0x7fffffu;
  if (exp == 255) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  int32_t e = exp - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;
  return static_cast<uint16_t>(half);
}

namespace {
// One tight loop per (source, destination) pair: the switch is outside the loop.
template <typename Load, typename Store>
void convert_loop(int64_t n, Load load, Store store) {
  for (int64_t i = 0; i < n; ++i) store(i, load(i));
}
}  // namespace

void convert(const void* src, DType sdt, void* dst, DType ddt, int64_t n) {
  if (sdt == ddt) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(sdt));
    return;
  }
  const auto* f = static_cast<const float*>(src);
  const auto* h = static_cast<const uint16_t*>(src);
  auto* fo = static_cast<float*>(dst);
  auto* ho = static_cast<uint16_t*>(dst);
  auto to_f32 = [&](int64_t i, float v) { fo[i] = v; };
  auto to_bf16 = [&](int64_t i, float v) { ho[i] = f32_to_bf16(v); };
  auto to_f16 = [&](int64_t i, float v) { ho[i] = f32_to_f16(v); };
  auto from_f32 = [&](int64_t i) { return f[i]; };
  auto from_bf16 = [&](int64_t i) { return bf16_to_f32(h[i]); };
  auto from_f16 = [&](int64_t i) { return f16_to_f32(h[i]); };
  auto with_store = [&](auto load) {
    switch (ddt) {
      case DType::F32:
        return convert_loop(n, load, to_f32);
      case DType::BF16:
        return convert_loop(n, load, to_bf16);
      case DType::F16:
        return convert_loop(n, load, to_f16);
      default:
        TS_ASSERT(false, "convert: non-float destination dtype ", dtype_name(ddt));
    }
  };
  switch (sdt) {
    case DType::F32:
      return with_store(from_f32);
    case DType::BF16:
      return with_store(from_bf16);
    case DType::F16:
      return with_store(from_f16);
    default:
      TS_ASSERT(false, "convert: non-float source dtype ", dtype_name(sdt));
  }
}

Tensor to_dtype(const Tensor& t, DType dt) {
  if (t.dtype == dt) return t;
  Tensor out = Tensor::empty(dt, t.shape);
  convert(t.data, t.dtype, out.data, dt, t.numel());
  return out;
}

}  // namespace tessera
