// Machine probes: see bench_machine.h. The wide loops use per-function target attributes (not a
// `#pragma GCC target` region), so no standard header is compiled for a wider target than the baseline.
#include "bench/bench_machine.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <span>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_simd.h"
#include "backends/cpu/thread_pool.h"

namespace tessera::bench {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Results of the probe loops land here so the compiler cannot drop the loops.
std::atomic<double> g_sink{0};

constexpr int kAcc = 16;  // independent accumulators: enough to hide FMA latency on 2 pipes

#if defined(__x86_64__)
// Every lane of the kAcc accumulators of a 512-bit probe loop, summed (the result the loop must produce).
__attribute__((target("avx512f"))) double sum_lanes(const __m512 (&acc)[kAcc]) {
  __m512 s = acc[0];
  for (int k = 1; k < kAcc; ++k) s = _mm512_add_ps(s, acc[k]);
  float out[16];
  _mm512_storeu_ps(out, s);
  double total = 0;
  for (float v : out) total += v;
  return total;
}

__attribute__((target("avx512f"))) double fma_loop_avx512(int64_t iters) {
  __m512 acc[kAcc];
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_set1_ps(static_cast<float>(k));
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_fmadd_ps(acc[k], m, c);
  }
  return sum_lanes(acc);
}

__attribute__((target("avx2,fma"))) double fma_loop_avx2(int64_t iters) {
  __m256 acc[kAcc];
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm256_set1_ps(static_cast<float>(k));
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < kAcc; ++k) acc[k] = _mm256_fmadd_ps(acc[k], m, c);
  }
  float out[8];
  __m256 s = acc[0];
  for (int k = 1; k < kAcc; ++k) s = _mm256_add_ps(s, acc[k]);
  _mm256_storeu_ps(out, s);
  double total = 0;
  for (float v : out) total += v;
  return total;
}

// vdpbf16ps: per float32 lane, acc += a[2i]*b[2i] + a[2i+1]*b[2i+1] (bf16 inputs).
__attribute__((target("avx512f,avx512bf16"))) double bf16_loop_avx512(int64_t iters) {
  __m512 acc[kAcc];
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_setzero_ps();
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3580);  // bf16 ~1e-6
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], a, b);
  }
  return sum_lanes(acc);
}

bool cpu_has(const char* feature) {
  __builtin_cpu_init();
  if (std::string(feature) == "avx512f") return __builtin_cpu_supports("avx512f");
  if (std::string(feature) == "avx2") return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (std::string(feature) == "avx512bf16") return __builtin_cpu_supports("avx512bf16");
  return false;
}
#endif

double fma_loop_scalar(int64_t iters) {
  float acc[kAcc];
  for (int k = 0; k < kAcc; ++k) acc[k] = static_cast<float>(k);
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < kAcc; ++k) acc[k] = acc[k] * 0.999999f + 1e-6f;
  }
  double s = 0;
  for (float v : acc) s += v;
  return s;
}

// One probe: `loop(iters)` runs iters × kAcc vector instructions of `flops_per_instr` FLOPs each.
// Calibrates iters to about `seconds` per pass, then returns the best of three passes on all pool threads.
template <typename Loop>
double peak_gflops(Loop loop, double flops_per_instr, double seconds) {
  cpu::ThreadPool& pool = cpu::ThreadPool::instance();
  auto pass = [&](int64_t iters) {
    double t0 = now_s();
    pool.run([&](int, int) { g_sink = g_sink + loop(iters); });
    return now_s() - t0;
  };
  int64_t iters = 1 << 14;
  while (pass(iters) < 0.02 && iters < (int64_t{1} << 40)) iters *= 4;  // warm-up and calibration
  const double per_iter = pass(iters) / static_cast<double>(iters);
  iters = std::max<int64_t>(1, static_cast<int64_t>(seconds / 3 / std::max(per_iter, 1e-12)));
  double best = 1e30;
  for (int r = 0; r < 3; ++r) best = std::min(best, pass(iters));
  const double flops = static_cast<double>(pool.num_threads()) * static_cast<double>(iters) * kAcc * flops_per_instr;
  return flops / best / 1e9;
}

}  // namespace

double read_bandwidth_gbs(size_t bytes, int reps) {
  // Allocated as weights are (Tensor::empty: 2 MiB pages where granted), so the limit is the one the decode
  // kernels could reach; touched once so the pages exist.
  Tensor storage = Tensor::empty(DType::F32, {static_cast<int64_t>(bytes / sizeof(float))});
  const std::span<float> buf(storage.ptr<float>(), bytes / sizeof(float));
  std::fill(buf.begin(), buf.end(), 1.0f);
  std::vector<double> sums(1024);                       // one result per thread
  cpu::ThreadPool& pool = cpu::ThreadPool::instance();
  auto pass = [&] {
    double t0 = now_s();
    pool.run([&](int tid, int nth) {
      const size_t n = buf.size(), b = n * static_cast<size_t>(tid) / static_cast<size_t>(nth),
                   e = n * static_cast<size_t>(tid + 1) / static_cast<size_t>(nth);
      // The kernels' vectorised sum of squares: one load per vector, negligible arithmetic.
      sums[static_cast<size_t>(tid) % sums.size()] = cpu::vec_ops().sumsq(buf.data() + b, static_cast<int64_t>(e - b));
    });
    return now_s() - t0;
  };
  pass();  // warm-up
  std::vector<double> t;
  for (int r = 0; r < std::max(reps, 1); ++r) t.push_back(pass());
  g_sink = g_sink + sums[0];
  return static_cast<double>(buf.size() * sizeof(float)) / *std::min_element(t.begin(), t.end()) / 1e9;
}

std::string peak_f32_isa() {
#if defined(__x86_64__)
  if (cpu_has("avx512f")) return "avx512";
  if (cpu_has("avx2")) return "avx2";
#endif
  return "scalar";
}

double peak_f32_gflops(double seconds) {
#if defined(__x86_64__)
  const std::string isa = peak_f32_isa();
  if (isa == "avx512") return peak_gflops(fma_loop_avx512, 16 * 2, seconds);
  if (isa == "avx2") return peak_gflops(fma_loop_avx2, 8 * 2, seconds);
#endif
  return peak_gflops(fma_loop_scalar, 2, seconds);
}

std::optional<double> peak_bf16_gflops(double seconds) {
#if defined(__x86_64__)
  if (cpu_has("avx512f") && cpu_has("avx512bf16")) return peak_gflops(bf16_loop_avx512, 16 * 4, seconds);
#endif
  (void)seconds;
  return std::nullopt;
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        size_t b = line.find_first_not_of(" \t", colon + 1);
        return b == std::string::npos ? "unknown" : line.substr(b);
      }
    }
  }
  return "unknown";
}

}  // namespace tessera::bench
