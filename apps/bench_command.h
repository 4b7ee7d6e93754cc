// `tessera bench`: registered on the CLI app by main() with one call.
#pragma once
#include <CLI/CLI.hpp>

// Adds the `bench` subcommand and its flags to `app`. The benchmark runs from the subcommand's callback
// during app.parse(); a tessera::Error it throws reaches main()'s one catch site (`tessera: error: ...`, exit
// 1).
void add_bench_command(CLI::App& app);
