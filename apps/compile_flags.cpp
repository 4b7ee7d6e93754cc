#include "compile_flags.h"

#include "tessera/error.h"
#include "tessera/tensor.h"

namespace tessera::cli {

void add_compile_flags(CLI::App* cmd, CompileFlags& f) {
  cmd->add_option(
      "--buckets", f.buckets,
      "Prompt-length buckets for the prefill: auto (pow2 on PJRT devices, exact on cpu), pow2 (16, 32, "
      "64, ...), exact, or a list like 16,32,64,128");
  cmd->add_option(
         "--max-recompiles", f.max_recompiles,
         "After warm-up (or the first generation), more than N new compiled shapes is an error naming "
         "the key that changed (default: $TESSERA_MAX_RECOMPILES, else no limit)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_option(
      "--compile-cache-dir", f.compile_cache_dir,
      "Keep compiled programs in DIR across runs (PJRT devices; default: $TESSERA_COMPILE_CACHE, else off)");
}

void apply_compile_flags(const CompileFlags& f, LoadOptions& opt) {
  opt.buckets = f.buckets;
  opt.compile_cache_dir = f.compile_cache_dir;
  opt.max_recompiles = f.max_recompiles;
}

void add_kv_cache_dtype_flag(CLI::App* cmd, std::string& value, const std::string& help) {
  cmd->add_option("--kv-cache-dtype", value, help)
      ->check(CLI::Validator(
          [](const std::string& v) {
            try {
              parse_kv_cache_dtype(v);
              return std::string();
            } catch (const Error&) {
              return "'" + v + "' is not one of auto, bfloat16, float32, q8_0, fp8";
            }
          },
          "DTYPE"));
}

}  // namespace tessera::cli
