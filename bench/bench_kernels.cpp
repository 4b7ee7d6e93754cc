// Micro-benchmark of the CPU kernels: read bandwidth, thread-pool fork-join cost, matmul at M=1 (weights
// streamed from memory: GB/s) and M=512 (GFLOP/s) for SmolLM2 / Qwen3-0.6B shapes, attention.
// Usage: bench_kernels [--quick] [--attention-only] [--decode-rows] [--quant-gemm] [--threads N] [--isa
// scalar|avx2|avx512]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_simd.h"
#include "backends/cpu/thread_pool.h"
#include "bench/bench_machine.h"
#include "tessera/error.h"
#include "tessera/tensor.h"

using namespace tessera;
using namespace tessera::cpu;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median seconds per call of fn over `reps` timed runs (after one warm-up).
template <typename Fn>
double time_it(int reps, const Fn& fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    double t0 = now_s();
    fn();
    t.push_back(now_s() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double fork_join_ns() {
  ThreadPool& pool = ThreadPool::instance();
  const int n = 20000;
  double t0 = now_s();
  for (int i = 0; i < n; ++i) pool.run([](int, int) {});
  return (now_s() - t0) / n * 1e9;
}

struct MatShape {
  const char* name;
  int64_t K, N;
};

void bench_matmul(const MatShape& s, DType dt, bool quick) {
  const size_t wbytes = static_cast<size_t>(s.K * s.N) * dtype_size(dt);
  // Enough distinct weight copies to exceed the last-level cache, so M=1 measures memory streaming.
  const size_t copies = std::max<size_t>(1, (quick ? 64u : 256u) * 1024 * 1024 / wbytes);
  // Allocated as the loader allocates weights (Tensor::empty: 2 MiB pages where the kernel grants them).
  Tensor wt = Tensor::empty(DType::BF16, {static_cast<int64_t>(wbytes * copies / 2)});
  uint8_t* w_bytes = static_cast<uint8_t*>(wt.data);
  for (size_t i = 0; i < wbytes * copies / 2; ++i)
    reinterpret_cast<uint16_t*>(w_bytes)[i] = static_cast<uint16_t>(0x3c00 + (i % 7));
  if (dt == DType::F32) {
    for (size_t i = 0; i < wbytes * copies / 4; ++i)
      reinterpret_cast<float*>(w_bytes)[i] = 0.01f * static_cast<float>(i % 5);
  }
  std::vector<float> x(static_cast<size_t>(512 * s.K), 0.5f), y(static_cast<size_t>(512 * s.N));
  size_t c = 0;
  double t1 = time_it(quick ? 20 : 200, [&] {
    matmul(x.data(), 1, s.K, w_bytes + (c++ % copies) * wbytes, dt, s.N, nullptr, y.data(), Bf16Dot::RoundX);
  });
  double t512 = time_it(quick ? 2 : 5, [&] {
    matmul(x.data(), 512, s.K, w_bytes, dt, s.N, nullptr, y.data(), Bf16Dot::RoundX);
  });
  std::printf("  %-22s %-8s M=1: %7.1f us  %6.1f GB/s of weights   M=512: %8.2f ms  %6.1f GFLOP/s\n", s.name,
              dtype_name(dt), t1 * 1e6, wbytes / t1 / 1e9, t512 * 1e3, 2.0 * 512 * s.K * s.N / t512 / 1e9);
}

// T query rows at the end of `ctx` filled slots of a cache of max(ctx, T) slots; window > 0: sliding.
void bench_attention(int64_t T, int64_t ctx, DType kv_dtype, bool quick, int64_t window = 0) {
  const int64_t nh = 9, nkv = 3, hd = 64, cache = std::max<int64_t>(ctx, T);
  std::vector<float> q(static_cast<size_t>(T * nh * hd), 0.1f),
      k(static_cast<size_t>(nkv * cache * hd), 0.2f), v(k.size(), 0.3f), out(q.size());
  std::vector<uint16_t> kb(k.size(), f32_to_bf16(0.2f)), vb(k.size(), f32_to_bf16(0.3f));
  const void* kp = kv_dtype == DType::BF16 ? static_cast<const void*>(kb.data()) : k.data();
  const void* vp = kv_dtype == DType::BF16 ? static_cast<const void*>(vb.data()) : v.data();
  std::vector<int32_t> slot(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) slot[t] = static_cast<int32_t>(ctx - T + t);
  double s = time_it(quick ? 3 : 20, [&] {
    attention(q.data(), T, nh, hd, kp, vp, kv_dtype, nkv, cache, slot.data(), 0, 0.125f, out.data(), window);
  });
  std::printf("  attention nh=9 nkv=3 hd=64 T=%-4lld ctx=%-5lld window=%-4lld %-8s cache %9.1f us\n",
              static_cast<long long>(T), static_cast<long long>(ctx), static_cast<long long>(window),
              dtype_name(kv_dtype), s * 1e6);
}

// One SmolLM2-135M decode step's matmuls (30 layers of q/k/v, o, gate/up, down and the 49152-row LM head,
// bf16 weights, distinct per layer as in the model) over M rows: ms per step.
void bench_decode_rows(bool quick) {
  const int64_t d = 576, kv = 192, ff = 1536, vocab = 49152, layers = 30;
  const int64_t per_layer = d * d + 2 * kv * d + d * d + 2 * ff * d + d * ff;
  Tensor wt = Tensor::empty(DType::BF16, {per_layer * layers + vocab * d});
  auto* w = static_cast<uint16_t*>(wt.data);
  for (int64_t i = 0; i < wt.numel(); ++i) w[i] = static_cast<uint16_t>(0x3c00 + (i % 7));
  const int64_t maxM = 16;
  std::vector<float> x(static_cast<size_t>(maxM * ff), 0.5f), q(static_cast<size_t>(maxM * d)),
      k(static_cast<size_t>(maxM * kv)), v(k.size()), g(static_cast<size_t>(maxM * ff)), u(g.size()),
      logits(static_cast<size_t>(maxM * vocab));
  for (int64_t M : {1, 2, 4, 8, 16}) {
    double tl = 0;
    double t = time_it(quick ? 2 : 7, [&] {
      const uint16_t* p = w;
      for (int64_t l = 0; l < layers; ++l) {
        const MatmulOut qkv[3] = {{p, d, nullptr, q.data()},
                                  {p + d * d, kv, nullptr, k.data()},
                                  {p + d * d + kv * d, kv, nullptr, v.data()}};
        p += d * d + 2 * kv * d;
        matmul_rows(x.data(), M, d, DType::BF16, qkv, 3, Bf16Dot::RoundX);
        const MatmulOut o{p, d, nullptr, x.data()};
        matmul_rows(q.data(), M, d, DType::BF16, &o, 1, Bf16Dot::RoundX);
        p += d * d;
        const MatmulOut gu[2] = {{p, ff, nullptr, g.data()}, {p + ff * d, ff, nullptr, u.data()}};
        p += 2 * ff * d;
        matmul_rows(x.data(), M, d, DType::BF16, gu, 2, Bf16Dot::RoundX);
        const MatmulOut dn{p, d, nullptr, x.data()};
        matmul_rows(g.data(), M, ff, DType::BF16, &dn, 1, Bf16Dot::RoundX);
        p += d * ff;
      }
      const double t0 = now_s();
      const MatmulOut lm{p, vocab, nullptr, logits.data()};
      matmul_rows(x.data(), M, d, DType::BF16, &lm, 1, Bf16Dot::RoundX);
      tl = now_s() - t0;
    });
    std::printf("  smollm2 decode-step matmuls M=%-3lld %8.2f ms/step (lm head %6.2f ms)  %7.2f ms/row\n",
                static_cast<long long>(M), t * 1e3, tl * 1e3, t * 1e3 / static_cast<double>(M));
  }
}

}  // namespace

// Block-quantised weights [N, K] of random quants with sane f16 scales (d, and m / dmin where the format has
// one; MXFP4 its scale byte), for timing only.
std::vector<uint8_t> random_blocks(DType dt, int64_t N, int64_t K) {
  const size_t bytes = dtype_bytes(dt, K) * static_cast<size_t>(N), bb = dtype_bytes(dt, dtype_block(dt));
  std::vector<uint8_t> w(bytes);
  uint32_t s = 12345;
  for (auto& b : w) b = static_cast<uint8_t>((s = s * 1664525u + 1013904223u) >> 24);
  const uint16_t d = f32_to_f16(0.01f), m = f32_to_f16(-0.02f);
  for (size_t o = 0; o < bytes; o += bb) {
    if (dt == DType::MXFP4) {  // its scale byte: 2^(120 - 127)
      w[o] = 120;
      continue;
    }
    const size_t at = dt == DType::Q6_K ? 208 : 0;
    std::memcpy(&w[o + at], &d, 2);
    if (dt == DType::Q4_1 || dt == DType::Q4_K || dt == DType::Q5_K) std::memcpy(&w[o + 2], &m, 2);
  }
  return w;
}

// The decode matmul (M = 1) of block-quantised weights: a [N, 4096] matrix streamed once per call, in GB/s of
// weight bytes, the _R8 form where the cpu binds one. N = 16384 (37-70 MB), or $BIGN (163840: 370-700 MB,
// past any last-level cache share).
void bench_quant_decode(bool quick) {
  const int64_t N = quick ? 4096 : (std::getenv("BIGN") ? std::atoll(std::getenv("BIGN")) : 16384), K = 4096;
  std::vector<float> x(static_cast<size_t>(K)), y(static_cast<size_t>(N));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 2001) / 1000.0f - 1.0f;
  for (DType dt :
       {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4}) {
    const std::vector<uint8_t> blocks = random_blocks(dt, N, K);
    // Allocated as a model's weights are (Tensor::empty: 2 MiB pages where granted).
    Tensor storage = Tensor::empty(DType::F32, {static_cast<int64_t>(blocks.size() / 4 + 1)});
    auto* w = reinterpret_cast<uint8_t*>(storage.ptr<float>());
    std::memcpy(w, blocks.data(), blocks.size());
    const DType bound = rows8_dtype(dt);
    if (bound != dt) interleave_rows8(dt, w, N, K);
    const double s = time_it(
        quick ? 2 : 10, [&] { matmul(x.data(), 1, K, w, bound, N, nullptr, y.data(), Bf16Dot::RoundX); });
    std::printf("  decode %-8s [%lld, %lld] M=1: %6.1f GB/s of weights (%.2f ms)\n", dtype_name(bound),
                static_cast<long long>(N), static_cast<long long>(K),
                static_cast<double>(blocks.size()) / s / 1e9, s * 1e3);
  }
}

// The prefill matmul (M = 512) of block-quantised weights: the int8 gemm (RoundX) against the dequantising
// f32 gemm (Exact), in GOP/s (2 M N K per call), the _R8 form where the cpu binds one.
void bench_quant_gemm(bool quick) {
  const int64_t M = quick ? 64 : 512;
  const MatShape shapes[] = {{"qwen3 up 1024x3072", 1024, 3072}, {"qwen3 down 3072x1024", 3072, 1024}};
  for (const MatShape& sh : shapes)
    for (DType dt :
         {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4}) {
      std::vector<uint8_t> w = random_blocks(dt, sh.N, sh.K);
      const DType bound = rows8_dtype(dt);
      if (bound != dt) interleave_rows8(dt, w.data(), sh.N, sh.K);
      std::vector<float> x(static_cast<size_t>(M * sh.K)), y(static_cast<size_t>(M * sh.N));
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 2001) / 1000.0f - 1.0f;
      const double ops = 2.0 * static_cast<double>(M * sh.N * sh.K) / 1e9;
      double rate[2];
      int i = 0;
      for (Bf16Dot dot : {Bf16Dot::RoundX, Bf16Dot::Exact})
        rate[i++] = ops / time_it(quick ? 1 : 5, [&] {
                      matmul(x.data(), M, sh.K, w.data(), bound, sh.N, nullptr, y.data(), dot);
                    });
      std::printf("  %-22s %-8s M=%lld: int8 gemm %6.1f GOP/s, dequantised f32 gemm %6.1f GFLOP/s (%.2fx)\n",
                  sh.name, dtype_name(bound), static_cast<long long>(M), rate[0], rate[1], rate[0] / rate[1]);
    }
}

int run(int argc, char** argv) {
  bool quick = false, matmuls = true, decode_rows = false, quant = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--attention-only") {
      matmuls = false;
    } else if (a == "--quant-gemm") {
      quant = true;
    } else if (a == "--decode-rows") {
      decode_rows = true;
    } else if (a == "--threads" && i + 1 < argc) {
      ThreadPool::instance().set_num_threads(std::atoi(argv[++i]));
    } else if (a == "--isa" && i + 1 < argc) {
      set_isa(parse_isa(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: bench_kernels [--quick] [--attention-only] [--decode-rows] [--quant-gemm] "
                   "[--threads N] [--isa scalar|avx2|avx512]\n");
      return 2;
    }
  }
  std::printf("isa %s, %d threads\n", isa_name(active_isa()), ThreadPool::instance().num_threads());
  if (quant) {
    std::printf("  read bandwidth: %.1f GB/s\n",
                tessera::bench::read_bandwidth_gbs(quick ? 128u << 20 : 512u << 20, 5));
    bench_quant_decode(quick);
    bench_quant_gemm(quick);
    return 0;
  }
  if (decode_rows) {
    bench_decode_rows(quick);
    return 0;
  }
  std::printf("  read bandwidth: %.1f GB/s\n",
              tessera::bench::read_bandwidth_gbs(quick ? 128u << 20 : 512u << 20, 5));
  std::printf("  thread-pool fork-join: %.0f ns\n", fork_join_ns());
  const MatShape shapes[] = {{"smollm2 q 576x576", 576, 576},
                             {"smollm2 up 576x1536", 576, 1536},
                             {"smollm2 down 1536x576", 1536, 576},
                             {"qwen3 up 1024x3072", 1024, 3072},
                             {"qwen3 down 3072x1024", 3072, 1024}};
  for (const MatShape& s : shapes) {
    for (DType dt : {DType::BF16, DType::F32}) {
      if (matmuls) bench_matmul(s, dt, quick);
    }
  }
  for (DType kv : {DType::F32, DType::BF16}) {
    bench_attention(1, 512, kv, quick);
    bench_attention(1, 2048, kv, quick);
    bench_attention(512, 512, kv, quick);
    // Mistral's sliding window (issue 16): the full-length cache masked beyond the window (ctx 4096, window
    // 256) against a cache holding only the window (ctx 256: what a ring buffer reads) and full attention.
    bench_attention(1, 4096, kv, quick, 256);
    bench_attention(1, 256, kv, quick);
    bench_attention(1, 4096, kv, quick);
    bench_attention(64, 4096, kv, quick, 256);
    bench_attention(64, 256, kv, quick);
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const tessera::Error& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    return 1;
  }
}
