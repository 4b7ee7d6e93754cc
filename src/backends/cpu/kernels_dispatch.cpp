// Instruction-set selection, the per-ISA tables of vector primitives, and per-thread scratch.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_simd.h"
#include "tessera/error.h"

namespace tessera::cpu {

namespace isa_scalar {
using V = VScalar;
#include "backends/cpu/kernels_vec.inc"
}  // namespace isa_scalar

#if TESSERA_CPU_WIDE
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace isa_avx2 {
using V = VAvx2;
#include "backends/cpu/kernels_vec.inc"
}  // namespace isa_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC diagnostic push
// GCC 12 intrinsics self-initialise "undefined" vectors (__m512 __Y = __Y), which -Wuninitialized flags.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
namespace isa_avx512 {
using V = VAvx512;
#include "backends/cpu/kernels_vec.inc"
}  // namespace isa_avx512
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif  // TESSERA_CPU_WIDE

namespace {

#if TESSERA_CPU_WIDE
bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

bool cpu_has_avx512bf16() {
  __builtin_cpu_init();
  return cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
}

bool cpu_has_avxvnni() {
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avxvnni");
}

bool cpu_has_avx512vnni() {
  __builtin_cpu_init();
  return cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");
}
#else
bool cpu_has_avx2() { return false; }
bool cpu_has_avx512() { return false; }
bool cpu_has_avx512bf16() { return false; }
bool cpu_has_avxvnni() { return false; }
bool cpu_has_avx512vnni() { return false; }
#endif

Isa& current_isa() {
  static Isa isa = best_isa();  // until set_isa (the tessera command: $TESSERA_ISA)
  return isa;
}

std::optional<Int8Dot>& forced_int8_dot() {
  static std::optional<Int8Dot> d;  // set_int8_dot (tests)
  return d;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx512Bf16:
      return "avx512bf16";
  }
  return "?";
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return true;
    case Isa::Avx2:
      return cpu_has_avx2();
    case Isa::Avx512:
      return cpu_has_avx512();
    case Isa::Avx512Bf16:
      return cpu_has_avx512bf16();
  }
  return false;
}

Isa best_isa() {
  if (cpu_has_avx512bf16()) return Isa::Avx512Bf16;
  if (cpu_has_avx512()) return Isa::Avx512;
  if (cpu_has_avx2()) return Isa::Avx2;
  return Isa::Scalar;
}

Isa parse_isa(const char* name) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16}) {
    if (std::strcmp(name, isa_name(isa)) == 0) return isa;
  }
  fail("unknown instruction set '", name, "' (expected scalar, avx2, avx512 or avx512bf16)");
}

Isa active_isa() { return current_isa(); }

void set_isa(Isa isa) {
  if (!isa_supported(isa)) fail("instruction set ", isa_name(isa), " is not supported by this CPU");
  current_isa() = isa;
}

const char* int8_dot_name(Int8Dot d) {
  switch (d) {
    case Int8Dot::Avx2:
      return "avx2";
    case Int8Dot::AvxVnni:
      return "avx-vnni";
    case Int8Dot::Avx512Vnni:
      return "avx512-vnni";
    case Int8Dot::EmulatedVnni:
      return "emulated-vnni";
  }
  return "?";
}

bool int8_dot_supported(Int8Dot d) {
  switch (d) {
    case Int8Dot::Avx2:
    case Int8Dot::EmulatedVnni:
      return cpu_has_avx2();
    case Int8Dot::AvxVnni:
      return cpu_has_avxvnni();
    case Int8Dot::Avx512Vnni:
      return cpu_has_avx512vnni();
  }
  return false;
}

Int8Dot active_int8_dot() {
  if (forced_int8_dot()) return *forced_int8_dot();
  static const bool avxvnni = cpu_has_avxvnni(), avx512vnni = cpu_has_avx512vnni();
  // AVX512-VNNI first where the level is AVX-512: its decode is AVX-VNNI's speed (the same instruction on
  // 256-bit vectors) and the prefill gemm runs it on 512-bit ones.
  const Isa isa = current_isa();
  if (avx512vnni && (isa == Isa::Avx512 || isa == Isa::Avx512Bf16)) return Int8Dot::Avx512Vnni;
  if (avxvnni) return Int8Dot::AvxVnni;
  return Int8Dot::Avx2;
}

void set_int8_dot(Int8Dot d) {
  if (!int8_dot_supported(d))
    fail("integer dot products ", int8_dot_name(d), " are not supported by this CPU");
  forced_int8_dot() = d;
}

void reset_int8_dot() { forced_int8_dot().reset(); }

namespace {
bool& amx_allowed() {
  static bool allowed = true;  // set_use_amx (tests)
  return allowed;
}
}  // namespace

namespace {
// Linux hands out AMX tile data only on request, once per process: arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023,
// XFEATURE_XTILEDATA = 18); a kernel without it (before 5.16) refuses, and AMX stays unused.
bool amx_tiles_granted() {
#if TESSERA_CPU_WIDE && defined(__linux__)
  static const bool ok = [] {
    __builtin_cpu_init();
    return cpu_has_avx512() && __builtin_cpu_supports("amx-tile") &&
           ::syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  }();
  return ok;
#else
  return false;
#endif
}
}  // namespace

bool amx_supported() {
#if TESSERA_CPU_WIDE
  static const bool ok = cpu_has_avx512bf16() && __builtin_cpu_supports("amx-bf16") && amx_tiles_granted();
  return ok;
#else
  return false;
#endif
}

bool amx_int8_supported() {
#if TESSERA_CPU_WIDE
  static const bool ok = cpu_has_avx512vnni() && __builtin_cpu_supports("amx-int8") && amx_tiles_granted();
  return ok;
#else
  return false;
#endif
}

void set_use_amx(bool use) { amx_allowed() = use; }

bool amx_in_use() { return current_isa() == Isa::Avx512Bf16 && amx_allowed() && amx_supported(); }

bool amx_int8_in_use() {
  return active_int8_dot() == Int8Dot::Avx512Vnni && current_isa() != Isa::Scalar && amx_allowed() &&
         amx_int8_supported();
}

const char* int8_dot_in_use() {
  return current_isa() == Isa::Scalar ? "scalar" : int8_dot_name(active_int8_dot());
}

const VecOps& vec_ops() {
  switch (current_isa()) {
#if TESSERA_CPU_WIDE
    case Isa::Avx512:
    case Isa::Avx512Bf16:
      return isa_avx512::kVecOps;
    case Isa::Avx2:
      return isa_avx2::kVecOps;
#else
    case Isa::Avx512:
    case Isa::Avx512Bf16:
    case Isa::Avx2:
#endif
    case Isa::Scalar:
      break;
  }
  return isa_scalar::kVecOps;
}

float* scratch(int slot, int64_t n) {
  struct Buffer {
    std::unique_ptr<float, decltype(&std::free)> data{nullptr, &std::free};
    int64_t capacity = 0;
  };
  thread_local Buffer buffers[7];
  TS_ASSERT(slot >= 0 && slot < 7, "scratch slot ", slot);
  Buffer& b = buffers[slot];
  if (n > b.capacity) {
    int64_t cap = std::max<int64_t>(n, 2 * b.capacity);
    size_t bytes = (static_cast<size_t>(cap) * sizeof(float) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    TS_ASSERT(p != nullptr, "out of memory for ", bytes, " bytes of kernel scratch");
    b.data.reset(static_cast<float*>(p));
    b.capacity = cap;
  }
  return b.data.get();
}

}  // namespace tessera::cpu
