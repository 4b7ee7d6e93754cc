// `tessera bench`: registered on the CLI app by main() with one call.
#pragma once
#include <CLI/CLI.hpp>

// Adds the `bench` subcommand and its flags to `app`. The benchmark runs from the subcommand's callback
// during app.parse(); on an error it prints "tessera: error: ..." and throws CLI::RuntimeError(1), which
// main()'s existing `catch (const CLI::ParseError& e) { return app.exit(e); }` turns into exit code 1.
void add_bench_command(CLI::App& app);
