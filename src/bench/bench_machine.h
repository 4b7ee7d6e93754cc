// Machine probes for the benchmark harness (`tessera bench`): streaming read bandwidth and the peak
// multiply-add rate of the cores, the two ceilings that decode (memory-bound) and prefill (compute-bound)
// are compared against. Also usable from micro-benchmarks (bench/bench_kernels.cpp).
#pragma once
#include <cstddef>
#include <optional>
#include <string>

namespace tessera::bench {

// GB/s (1e9 bytes/s) of a multi-threaded streaming read of a `bytes`-sized buffer (make it much larger than
// the last-level cache), on the CPU thread pool's threads; the fastest of `reps` timed passes after a warm-up
// (a ceiling, like the FLOP probes: the fractions of it that the benchmark reports are then conservative).
double read_bandwidth_gbs(size_t bytes, int reps);

// Peak float32 GFLOP/s: each pool thread runs a register-resident loop of independent FMAs (AVX-512 when
// the CPU has it, else AVX2+FMA, else a scalar loop); one FMA lane counts 2 FLOPs. Runs about `seconds`.
double peak_f32_gflops(double seconds);

// Peak bf16 GFLOP/s of AVX512_BF16 `vdpbf16ps` (each lane does two bf16 products accumulated in float32:
// 4 FLOPs per lane), or nullopt when the CPU lacks AVX512_BF16.
std::optional<double> peak_bf16_gflops(double seconds);

// Which vector width the f32 probe used: "avx512", "avx2" or "scalar".
std::string peak_f32_isa();

// /proc/cpuinfo's "model name" (or "unknown").
std::string cpu_model_name();

}  // namespace tessera::bench
