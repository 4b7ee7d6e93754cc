// The environment the tessera command reads, turned into library options (the library reads none).
#pragma once
#include <string>
#include <vector>

#include "backends/pjrt/pjrt_info.h"
#include "launch.h"
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

// PJRT plugin search and start-up from the environment: $TESSERA_XLA_CPU_PLUGIN, $TPU_LIBRARY_PATH (libtpu's
// convention) and $TESSERA_XLA_CUDA_PLUGIN as plugin paths; site-packages of the .venv beside the running
// program (pjrt::venv_site_packages_near: its directory or up to two above, so build/tessera finds the source
// tree's .venv), of $VIRTUAL_ENV and of ~/.local; $TESSERA_PJRT_DUMP, $TESSERA_PJRT_START_TIMEOUT
// (plugin_start_timeout_s), $TESSERA_PJRT_LOG, $TESSERA_LAUNCH_SYSROOT. Throws Error naming the variable for
// a bad value.
pjrt::PjrtSettings pjrt_settings_from_env();

// $TESSERA_PJRT_START_TIMEOUT when set, else 120: seconds a plugin may take to initialise and create its
// client. Throws Error naming the variable for a bad value.
double plugin_start_timeout_s();

// pjrt_settings_from_env(), set as the process-wide default the library uses when LoadOptions::plugins is
// unset (pjrt::set_default_pjrt_settings). Once per process; throws Error naming a malformed variable.
void use_environment_plugin_settings();
// Where constrained decoding's library (llguidance) is looked for: $TESSERA_LLGUIDANCE when set (the file),
// else the site-packages the PJRT plugins are searched in (use_environment_plugin_settings).
void use_environment_constraint_settings();

// The CPU kernels' settings: $TESSERA_ISA (scalar, avx2, avx512, avx512bf16) selects the instruction set
// (cpu::set_isa); the worker pool gets `threads` workers when > 0 (the --threads flag), else
// $TESSERA_NUM_THREADS when set. Returns whether a worker count was given either way (else the pool keeps
// the library's default, the hardware concurrency). Throws Error naming a malformed or unsupported variable.
bool apply_cpu_environment(int threads);

// The Hugging Face hub directories a repo id is looked up in, in order: $HF_HUB_CACHE, $HF_HOME/hub,
// ~/.cache/huggingface/hub (each where its variable is set).
std::vector<std::string> hf_hub_dirs_from_env();
// hf_hub_dirs_from_env(), set for the library (io::set_hf_hub_dirs).
void use_environment_hub_dirs();

// What `tessera launch` takes from its environment: the test-only $TESSERA_LAUNCH_SYSROOT (a directory
// standing in for / when TPU chips and GPUs are counted) and $CUDA_VISIBLE_DEVICES (the GPUs the ranks may
// use).
void apply_launch_environment(launch::Options& o);

// The collective deadline a setting asks for: `seconds` when >= 0, else $TESSERA_COLLECTIVE_TIMEOUT when set,
// else the default (60 s). Throws Error naming the variable for a value that is not a number of seconds >= 0.
double collective_timeout_setting(double seconds);

// A library error as the command line says it: the library names its options (tp_size, device_map 'x',
// buckets:, collective_timeout_s), the command its flags (--tp-size, --device x, --buckets:, ...).
std::string cli_words(const std::string& library_message);

}  // namespace tessera::cli
