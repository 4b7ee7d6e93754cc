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

}  // namespace tessera::cli
