// `tessera launch` — placeholder registration; the launcher itself is being written (issue 5).
#include "launch_command.h"

#include <cstdio>

void add_launch_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("launch", "Start one process per rank (not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] {
    std::fprintf(stderr, "tessera: error: launch is not implemented yet\n");
    throw CLI::RuntimeError(1);
  });
}
