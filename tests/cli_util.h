// Running the `tessera` binary from tests. Header-only; tests only.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace tessera::testing {

struct CliResult {
  int code;
  std::string out, err;
};

// Runs `tessera <args>` (shell-quoted by the caller) with `input` on stdin; exit code 128+N for signal N.
inline CliResult run_cli(const std::string& args, const std::string& input = "") {
  static int n = 0;
  const std::string base =
      ::testing::TempDir() + "tessera_cli_" + std::to_string(::getpid()) + "_" + std::to_string(n++);
  std::ofstream(base + ".in") << input;
  const std::string cmd =
      std::string(TESSERA_CLI_PATH) + " " + args + " <" + base + ".in >" + base + ".out 2>" + base + ".err";
  const int status = std::system(cmd.c_str());
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  CliResult r{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp(base + ".out"),
              slurp(base + ".err")};
  for (const char* ext : {".in", ".out", ".err"}) std::remove((base + ext).c_str());
  return r;
}

}  // namespace tessera::testing
