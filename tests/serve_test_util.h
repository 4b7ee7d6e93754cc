// Shared by the `tessera serve` tests: the real binary as a subprocess on a free port of 127.0.0.1, a
// cpp-httplib client with timeouts, SSE parsing, and `tessera generate` alone as the reference. Header-only;
// tests only.
#pragma once
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli_util.h"

namespace tessera::testing::serve {

using nlohmann::json;

// A `tessera serve` process. Its stderr goes to a file, read for the port it chose.
class ServeProcess {
 public:
  // `ranks` > 1: `tessera launch --nproc-per-node RANKS -- tessera serve ARGS` (rank 0 serves).
  explicit ServeProcess(const std::vector<std::string>& args, int ranks = 1) {
    static int n = 0;
    err_path_ =
        ::testing::TempDir() + "tessera_serve_" + std::to_string(::getpid()) + "_" + std::to_string(n++);
    pid_ = ::fork();
    if (pid_ == 0) {
      std::FILE* f = std::freopen(err_path_.c_str(), "w", stderr);
      (void)f;
      std::vector<std::string> all = {TESSERA_CLI_PATH};
      if (ranks > 1)
        all.insert(all.end(), {"launch", "--nproc-per-node", std::to_string(ranks), "--", TESSERA_CLI_PATH});
      all.push_back("serve");
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~ServeProcess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::remove(err_path_.c_str());
  }
  std::string err() const {
    std::ifstream f(err_path_);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  // The port from "listening on http://127.0.0.1:PORT" (0 when it did not start within `limit_s`).
  int port(double limit_s = 30) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
    while (std::chrono::steady_clock::now() < until) {
      const std::string e = err();
      const size_t at = e.find("listening on http://127.0.0.1:");
      if (at != std::string::npos) return std::atoi(e.c_str() + at + 30);
      if (exited()) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return 0;
  }
  pid_t pid() const { return pid_; }
  bool exited() {
    if (exited_) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return exited_;
  }
  // SIGTERM, then the exit code (or -1 when it had not exited after `limit_s`; it is then killed).
  int terminate(double limit_s = 30) {
    if (!exited()) ::kill(pid_, SIGTERM);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
    while (!exited() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return exited_ ? code_ : -1;
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int code_ = -1;
  std::string err_path_;
};

inline std::unique_ptr<httplib::Client> client(int port) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  c->set_connection_timeout(5, 0);
  c->set_read_timeout(120, 0);
  c->set_write_timeout(10, 0);
  return c;
}

// Waits until /health says 200 (the model loaded), up to `limit_s`.
inline bool wait_ready(int port, double limit_s = 120) {
  auto c = client(port);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (std::chrono::steady_clock::now() < until) {
    auto r = c->Get("/health");
    if (r && r->status == 200) return true;
    if (r && r->status != 503) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Waits (up to 30 s) until /metrics shows exactly one request running.
inline bool one_running(int port) {
  auto c = client(port);
  for (int i = 0; i < 3000; ++i) {
    auto m = c->Get("/metrics");
    if (m && m->body.find("tessera:num_requests_running{model_name=\"smollm2\"} 1\n") != std::string::npos)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

struct Server {
  std::unique_ptr<ServeProcess> proc;
  int port = 0;
};

inline Server start(std::vector<std::string> args, int ranks = 1) {
  Server s;
  args.insert(args.end(), {"--port", "0", "--served-model-name", "smollm2"});
  s.proc = std::make_unique<ServeProcess>(args, ranks);
  s.port = s.proc->port();
  return s;
}

// The SSE events of a stream body: the JSON of every "data:" line but the last, which must be [DONE].
inline std::vector<json> events(const std::string& body) {
  std::vector<json> out;
  size_t at = 0;
  bool done = false;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "unterminated event: " << body.substr(at);
    if (end == std::string::npos) break;
    const std::string ev = body.substr(at, end - at);
    at = end + 2;
    EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    EXPECT_FALSE(done) << "event after [DONE]: " << ev;
    if (ev == "data: [DONE]")
      done = true;
    else
      out.push_back(json::parse(ev.substr(6)));
  }
  EXPECT_TRUE(done) << body;
  return out;
}

// `text` in single quotes for the shell run_cli uses.
inline std::string shell_quoted(const std::string& text) {
  std::string out = "'";
  for (char ch : text) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

// What `tessera generate --chat` gives for one user turn, greedy (the reference for the server's chat);
// `flags`: more of generate's flags (the server's --device, --dtype, --buckets ...).
inline json generate_alone(const std::string& prompt, int new_tokens, const std::string& flags = "") {
  auto r = tessera::testing::run_cli("generate --chat -q --json --greedy --max-new-tokens " +
                                     std::to_string(new_tokens) + " " + flags + " --prompt " +
                                     shell_quoted(prompt));
  EXPECT_EQ(r.code, 0) << r.err;
  return r.code == 0 ? json::parse(r.out) : json::object();
}

}  // namespace tessera::testing::serve

// Starts `tessera serve ARGS --port 0 --served-model-name smollm2` as `s` and waits until /health says ready;
// the test fails (with the server's stderr) when it does not.
#define START_OR_FAIL(s, ...)                                                          \
  ::tessera::testing::serve::Server s = ::tessera::testing::serve::start(__VA_ARGS__); \
  ASSERT_GT(s.port, 0) << s.proc->err();                                               \
  ASSERT_TRUE(::tessera::testing::serve::wait_ready(s.port)) << s.proc->err()
