// `tessera bench`: load time, time to first token, prefill and decode throughput and peak RSS of one model,
// medians over repeated runs, set against the machine's read bandwidth and peak FLOP/s (bench_machine.h).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/model.h"
#include "tessera/tensor.h"

namespace tessera::bench {

struct BenchOptions {
  std::string model;           // directory, .gguf or repo id (the tessera command fills in its default)
  std::optional<DType> dtype;  // unset: the checkpoint's
  int prompt_tokens = 512;     // prefill length (token ids, no tokenizer involved)
  int new_tokens = 128;        // greedy decode steps, eos disabled
  int repeats = 3;             // each repeat loads the model afresh and generates once
  int threads = 0;             // 0: leave the pool as configured
  size_t bandwidth_bytes = size_t{512} << 20;  // read-bandwidth buffer
  double peak_seconds = 0.6;                   // per FLOP probe
  bool probe_machine = true;
  bool exact_bf16_matmul = false;       // LoadOptions::exact_bf16_matmul
  std::string kv_cache_dtype = "auto";  // LoadOptions::kv_cache_dtype
  int prefill_chunk = -1;               // LoadOptions::prefill_chunk
  std::vector<std::string> kernels;     // LoadOptions::kernels (--kernels DIR, repeatable)
};

// One repeat.
struct RunTimes {
  double load_s = 0, ttft_s = 0, prefill_s = 0, prefill_tokens_per_s = 0, decode_s = 0,
         decode_tokens_per_s = 0;
};

// Sizes that turn throughput into bandwidth and FLOP fractions.
struct ModelCounts {
  int64_t layer_matrix_params = 0;  // every 2-D weight inside the decoder layers (of stacked experts, the
                                    // num_experts_per_tok a token reads)
  int64_t embedding_params = 0;     // vocab × hidden
  int64_t lm_head_params = 0;       // = embedding_params when tied (the same matrix is read)
  bool tied = false;
  // Of the layer matrices and the LM head: the bytes of those a GGUF stores block-quantised (what the cpu
  // backend reads when it keeps the blocks) and the parameters of the others.
  int64_t quantized_bytes = 0, unquantized_params = 0;
  int64_t num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, hidden = 0;
};

struct BenchReport {
  BenchOptions options;
  std::string model_path, architecture, dtype, isa, cpu;
  std::string int8_dot;  // cpu::int8_dot_in_use()
  bool amx = false;      // cpu::amx_in_use(): the bf16 prefill gemm on AMX tiles
  int threads = 0;
  size_t weight_bytes = 0;        // ModelInfo::weight_bytes (everything the backend holds)
  size_t kv_bytes_per_token = 0;  // ModelInfo::kv_bytes_per_token
  std::string kv_cache_dtype;     // ModelInfo::kv_cache_dtype's name
  bool quantized = false;         // some matrices kept block-quantised (ModelInfo::quantized_matrices)
  ModelCounts counts;
  std::vector<RunTimes> runs;
  RunTimes median;
  double peak_rss_mb = 0;  // getrusage ru_maxrss after the model runs, before the machine probes
  double read_bandwidth_gbs = 0, peak_f32_gflops = 0;
  std::optional<double> peak_bf16_gflops;
  std::string peak_f32_isa;
  std::vector<KernelInUse> kernels;  // ModelInfo::kernels: the packages of BenchOptions::kernels in use
};

// Pseudo-random token ids in [10, vocab) (fixed seed), so prefill length is exact and tokenizer-free.
std::vector<int32_t> bench_prompt(int n, int64_t vocab);

// Runs the benchmark. Throws Error on a bad model or option (naming it).
BenchReport run_bench(const BenchOptions& options);

// Bytes read per decode step: layer matrices + lm_head in the weight dtype (norms and the one embedding
// row are negligible), and the KV cache read by attention, averaged over the decode steps.
double decode_weight_bytes_per_token(const BenchReport& r);
double decode_kv_bytes_per_token(const BenchReport& r);
// FLOPs of one prefill: 2 × layer matrices × N + the last row's lm_head + causal attention (QKᵀ and PV).
double prefill_flops(const BenchReport& r);

nlohmann::ordered_json to_json(const BenchReport& r);
std::string to_text(const BenchReport& r);

}  // namespace tessera::bench
