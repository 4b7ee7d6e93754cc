// The environment the tessera command reads, turned into library options (the library reads none).
#pragma once
#include <string>

#include "tessera/model.h"

namespace tessera::cli {

// Fills what the command line left unset from the environment:
//   compile_cache_dir     <- TESSERA_COMPILE_CACHE          (when --compile-cache-dir is not given)
//   max_recompiles        <- TESSERA_MAX_RECOMPILES         (when --max-recompiles is not given)
//   verbose_compiles      <- TESSERA_VERBOSE=1
//   collective_timeout_s  <- TESSERA_COLLECTIVE_TIMEOUT     (when --collective-timeout is not given)
//   distributed.world_size, .rank, .mpi <- WORLD_SIZE, RANK (tessera launch) and OMPI_COMM_WORLD_SIZE /
//                                          OMPI_COMM_WORLD_RANK (mpirun)
// Throws Error naming the variable for a malformed value.
void apply_environment(LoadOptions& opt);

// PJRT plugin search and start-up from the environment (pjrt::pjrt_settings_from_env: plugin paths, the .venv
// beside this program, dump dir, start-up timeout, plugin log), set as the process-wide default the library
// uses when LoadOptions::plugins is unset. Once per process; throws Error naming a malformed variable.
void use_environment_plugin_settings();

// The collective deadline a setting asks for: `seconds` when >= 0, else $TESSERA_COLLECTIVE_TIMEOUT when set,
// else the default (60 s). Throws Error naming the variable for a value that is not a number of seconds >= 0.
double collective_timeout_setting(double seconds);

// A library error as the command line says it: the library names its options (tp_size, device_map 'x',
// buckets:, collective_timeout_s), the command its flags (--tp-size, --device x, --buckets:, ...).
std::string cli_words(const std::string& library_message);

}  // namespace tessera::cli
