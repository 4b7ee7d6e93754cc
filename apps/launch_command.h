// `tessera launch`: registered on the CLI app by main() with one call.
#pragma once
#include <CLI/CLI.hpp>

// Adds the `launch` subcommand (start one process per rank with RANK/WORLD_SIZE/... set) to `app`. Like
// add_bench_command, it runs from the subcommand's callback and reports failure by throwing
// CLI::RuntimeError(code).
void add_launch_command(CLI::App& app);
