// The compile flags `generate`, `chat` and `serve` share: prompt buckets, the recompile guard, the on-disk
// compile cache (each command has its own --warmup).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "tessera/model.h"

namespace tessera::cli {

struct CompileFlags {
  std::string buckets = "auto", compile_cache_dir;
  int max_recompiles = -1;  // -1: $TESSERA_MAX_RECOMPILES (cli_env.cpp), else no limit
};

void add_compile_flags(CLI::App* cmd, CompileFlags& f);
// Sets LoadOptions::buckets, compile_cache_dir and max_recompiles.
void apply_compile_flags(const CompileFlags& f, LoadOptions& opt);

// --kv-cache-dtype (generate, serve, forward, bench): the names parse_kv_cache_dtype accepts, checked by it.
void add_kv_cache_dtype_flag(CLI::App* cmd, std::string& value, const std::string& help);

}  // namespace tessera::cli
