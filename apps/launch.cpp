// `tessera launch`: checks, per-rank environment, and the supervisor (see launch.h and ARCHITECTURE.md).
#include "launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>

#include "backends/pjrt/pjrt_info.h"
#include "io/json_util.h"
#include "tessera/error.h"

extern char** environ;

namespace tessera::launch {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The one part of the library that reads the environment, being the supervisor that hands it on
// (ARCHITECTURE.md, "Options, not the environment"): `environ` goes to every rank, PATH finds the command,
// TMPDIR holds the status file, an OMPI_MCA_mpi_yield_when_idle already set is left to mpirun, and the rank
// shim reads mpirun's OMPI_COMM_WORLD_*. Devices (sysroot, CUDA_VISIBLE_DEVICES) come in Options.

// libtpu's per-process ports start here (torch_xla's configure_topology default base_port).
constexpr int kTpuBasePort = 8476;
// After SIGTERM (a failed rank, or a forwarded signal), the ranks get this long before SIGKILL.
constexpr auto kStopGrace = std::chrono::seconds(2);

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Entries of `dir` (under `sysroot`) named `prefix` followed by digits, or anything when `any_name`.
int count_entries(const std::string& sysroot, const std::string& dir, const std::string& prefix,
                  bool any_name = false) {
  std::error_code ec;
  int n = 0;
  for (fs::directory_iterator it(sysroot + dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (any_name || (name.rfind(prefix, 0) == 0 && all_digits(std::string_view(name).substr(prefix.size()))))
      ++n;
  }
  return n;
}

struct Found {
  int count = 0;
  std::string where;
};

// TPU chips: the same detection as `--device auto` and `tessera devices` (backends/pjrt/pjrt_info.h).
Found count_tpu_chips(const std::string& sysroot) {
  const pjrt::TpuChips chips = pjrt::find_tpu_chips(sysroot);
  return {chips.count, chips.where};
}

// NVIDIA GPUs: one directory per GPU under /proc/driver/nvidia/gpus, else the /dev/nvidia<N> nodes.
Found count_gpus(const std::string& sysroot) {
  if (int n = count_entries(sysroot, "/proc/driver/nvidia/gpus", "", true))
    return {n, "/proc/driver/nvidia/gpus/*"};
  if (int n = count_entries(sysroot, "/dev", "nvidia")) return {n, "/dev/nvidia[0-9]*"};
  return {0, "/proc/driver/nvidia/gpus/*, /dev/nvidia[0-9]*"};
}

std::string plural(int n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

std::vector<std::string> split_list(const std::string& s, char sep = ',') {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

// One chip per process: libtpu takes the processes of one host as a block of chips. The blocks of a host's
// 2x2 (v2-v5p, v5e/v6e-4) or 2x4 (v5e/v6e-8) grid are 1x1, 1x2 (chips 0,1), 2x2 and 2x4.
std::optional<std::string> tpu_process_bounds(int nproc) {
  switch (nproc) {
    case 1:
      return "1,1,1";
    case 2:
      return "1,2,1";
    case 4:
      return "2,2,1";
    case 8:
      return "2,4,1";
    default:
      return std::nullopt;
  }
}

std::string tpu_accepted_counts(int chips) {
  std::vector<int> ok;
  for (int n : {1, 2, 4, 8})
    if (n <= chips) ok.push_back(n);
  std::string s;
  for (size_t i = 0; i < ok.size(); ++i)
    s += (i == 0 ? "" : i + 1 == ok.size() ? " or " : ", ") + std::to_string(ok[i]);
  return s;
}

std::optional<std::string> find_executable(const std::string& name) {
  auto runnable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos)
    return runnable(name) ? std::optional<std::string>(name) : std::nullopt;
  const char* path = std::getenv("PATH");
  for (const std::string& dir : split_list(path ? std::string(path) : "/usr/local/bin:/usr/bin:/bin", ':')) {
    std::string cand = dir + "/" + name;
    if (runnable(cand)) return cand;
  }
  return std::nullopt;
}

std::string resolve_command(const std::string& name) {
  if (auto p = find_executable(name)) return *p;
  if (name.find('/') != std::string::npos) fail("launch: cannot run '", name, "': not an executable file");
  fail("launch: cannot run '", name, "': not found on PATH");
}

std::string self_path() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) fail("launch: cannot find the tessera executable (/proc/self/exe): ", ec.message());
  return p.string();
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (std::string& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The current environment with `vars` replacing or adding entries.
std::vector<std::string> merged_environment(const std::vector<std::pair<std::string, std::string>>& vars) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    std::string_view key = entry.substr(0, entry.find('='));
    if (std::none_of(vars.begin(), vars.end(), [&](const auto& kv) { return kv.first == key; }))
      env.emplace_back(entry);
  }
  for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
  return env;
}

int status_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return "was killed by signal " + std::to_string(sig) + (name ? " (" + std::string(name) + ")" : "");
  }
  return "exited with code " + std::to_string(status_code(status));
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(fd, s.data(), s.size());
    if (n > 0) {
      s.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
    } else {
      return;  // EPIPE and the like: the reader is gone; drop the output
    }
  }
}

// ---- the supervisor ----

struct Spawn {
  std::string path;
  std::vector<std::string> argv, env;
  int rank = -1;  // -1: mpirun
  bool stdin_null = false;
  bool stdout_null = false;
  bool pipe_output = false;  // stdout and stderr through the launcher (--all-output)
};

struct Proc {
  pid_t pid = -1;
  int rank = -1;
  bool done = false;
  int status = 0;
};

// One output stream of a rank (or of mpirun with --tag-output) relayed line by line with "[rank N] ".
struct Relay {
  int fd = -1;
  int rank = -1;  // -1: lines carry mpirun's "[job,rank]<stdout>:" tags
  bool to_stderr = false;
  std::string buf;
};

std::string relay_prefix(const Relay& r, std::string_view& line) {
  if (r.rank >= 0) return "[rank " + std::to_string(r.rank) + "] ";
  // mpirun --tag-output: "[1,3]<stdout>:text" -> "[rank 3] text"; other lines (mpirun's own) pass as they
  // are.
  const size_t comma = line.find(','), close = line.find(']');
  if (line.empty() || line[0] != '[' || comma == std::string_view::npos || close == std::string_view::npos ||
      comma > close)
    return "";
  std::string_view rank = line.substr(comma + 1, close - comma - 1), rest = line.substr(close + 1);
  for (std::string_view tag : {"<stdout>:", "<stderr>:"}) {
    if (all_digits(rank) && rest.substr(0, tag.size()) == tag) {
      line = rest.substr(tag.size());
      return "[rank " + std::string(rank) + "] ";
    }
  }
  return "";
}

void relay_lines(Relay& r, bool eof) {
  size_t start = 0;
  while (start < r.buf.size()) {
    const size_t nl = r.buf.find('\n', start);
    size_t end;
    if (nl != std::string::npos)
      end = nl + 1;
    else if (eof || r.buf.size() - start > (1u << 16))
      end = r.buf.size();
    else
      break;
    std::string_view line(r.buf.data() + start, (nl != std::string::npos ? nl : end) - start);
    std::string out = relay_prefix(r, line);
    out.append(line);
    out += '\n';
    write_all(r.to_stderr ? STDERR_FILENO : STDOUT_FILENO, out);
    start = end;
  }
  r.buf.erase(0, start);
}

// Returns false at end of file.
bool relay_read(Relay& r) {
  char chunk[65536];
  while (true) {
    ssize_t n = ::read(r.fd, chunk, sizeof chunk);
    if (n > 0) {
      r.buf.append(chunk, static_cast<size_t>(n));
      relay_lines(r, false);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    relay_lines(r, true);
    return false;
  }
}

// Processes whose parent is `parent` (for this process: children, and orphans reparented to us as the
// subreaper).
std::vector<pid_t> list_children(pid_t parent) {
  std::vector<pid_t> kids;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!all_digits(name)) continue;
    // read(2), not a stream: a process that exits while its stat file is read makes read() fail with ESRCH,
    // which libstdc++'s filebuf turns into an exception.
    std::string stat;
    const int fd = ::open(("/proc/" + name + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[512];
    const ssize_t got = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (got <= 0) continue;
    stat.assign(buf, static_cast<size_t>(got));
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    char state = 0;
    long ppid = 0;
    if (std::sscanf(stat.c_str() + paren + 1, " %c %ld", &state, &ppid) == 2 && ppid == parent)
      kids.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return kids;
}

class Supervisor {
 public:
  Supervisor(bool mpi, std::string status_path, std::chrono::seconds signal_grace)
      : mpi_(mpi), status_path_(std::move(status_path)), signal_grace_(signal_grace) {}
  ~Supervisor() { restore(); }

  int run(std::vector<Spawn> spawns) {
    setup();
    for (Spawn& s : spawns) {
      if (!start(s)) {
        stop(SIGKILL);
        cleanup();
        fail("launch: cannot start '", s.path, "': ", std::strerror(errno));
      }
    }
    loop();
    cleanup();
    return exit_code();
  }

 private:
  void setup() {
    std::fflush(nullptr);
    sigemptyset(&watched_);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&watched_, s);
    sigset_t blocked = watched_;
    // SIGPIPE: a closed terminal/pipe gives EPIPE instead of killing the launcher; SIGTTOU: tcsetpgrp below.
    sigaddset(&blocked, SIGPIPE);
    sigaddset(&blocked, SIGTTOU);
    sigprocmask(SIG_BLOCK, &blocked, &old_mask_);
    set_up_ = true;
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &dfl, &old_chld_);  // SIG_IGN inherited from a parent would auto-reap the ranks
    sfd_ = signalfd(-1, &watched_, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd_ < 0) fail("launch: signalfd: ", std::strerror(errno));
    prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphaned grandchildren come back to us, so none is left behind
    devnull_ = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    // In an interactive terminal the ranks' process group becomes the foreground group (as a shell does for a
    // job): rank 0 may read the terminal, and Ctrl-C reaches the ranks directly. mpirun stays in the
    // launcher's group (it reads the terminal for rank 0 and puts each rank in a group of its own).
    tty_ = !mpi_ && ::isatty(STDIN_FILENO) && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();
  }

  void restore() {
    if (!set_up_) return;
    set_up_ = false;
    if (tty_) ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
    for (Relay& r : relays_) ::close(r.fd);
    relays_.clear();
    if (devnull_ >= 0) ::close(devnull_);
    if (sfd_ >= 0) ::close(sfd_);
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    sigaction(SIGCHLD, &old_chld_, nullptr);
    sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  }

  bool start(Spawn& s) {
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (s.pipe_output && (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)) return false;
    std::vector<char*> argv = c_strings(s.argv), envp = c_strings(s.env);
    const std::string exec_error = "tessera: error: launch: cannot execute '" + s.path + "'\n";
    const pid_t parent = ::getpid(), group = pgid_;
    const bool own_group = !mpi_, leader = pgid_ == 0, tty = tty_;
    const int deathsig = s.rank < 0 ? SIGTERM : SIGKILL;  // mpirun stops its ranks on SIGTERM
    const pid_t pid = ::fork();
    if (pid < 0) return false;
    if (pid == 0) {
      // Child: async-signal-safe calls only.
      if (own_group) ::setpgid(0, group);
      if (leader && tty) ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
      ::prctl(PR_SET_PDEATHSIG, deathsig);
      if (::getppid() != parent) ::_exit(1);
      if (s.stdin_null) ::dup2(devnull_, STDIN_FILENO);
      if (s.pipe_output) {
        ::dup2(out[1], STDOUT_FILENO);
        ::dup2(err[1], STDERR_FILENO);
      } else if (s.stdout_null) {
        ::dup2(devnull_, STDOUT_FILENO);
      }
      // The launcher forwards these, so the ranks must not inherit them ignored (as `cmd &` in a script
      // does).
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int sig : {SIGINT, SIGQUIT, SIGTERM}) ::sigaction(sig, &dfl, nullptr);
      ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
      ::execve(s.path.c_str(), argv.data(), envp.data());
      ssize_t ignored = ::write(STDERR_FILENO, exec_error.data(), exec_error.size());
      (void)ignored;
      ::_exit(127);
    }
    if (own_group) {
      if (pgid_ == 0) pgid_ = pid;
      ::setpgid(pid, pgid_);  // also here, so signals to the group never miss a rank that has not run yet
      if (leader && tty_) ::tcsetpgrp(STDIN_FILENO, pgid_);
    }
    procs_.push_back({pid, s.rank, false, 0});
    if (s.pipe_output) {
      ::close(out[1]);
      ::close(err[1]);
      for (int fd : {out[0], err[0]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
      relays_.push_back({out[0], s.rank, false, {}});
      relays_.push_back({err[0], s.rank, true, {}});
    }
    return true;
  }

  int live() const {
    return static_cast<int>(
        std::count_if(procs_.begin(), procs_.end(), [](const Proc& p) { return !p.done; }));
  }

  // Sends `sig` to every rank: the launch's process group, or on the mpirun path each child of mpirun (a
  // rank, which mpirun made the leader of a group of its own) with its group; SIGKILL also kills mpirun.
  // mpirun itself is not sent SIGINT/SIGTERM: it would turn them into SIGTERM, a second later, and its exit
  // code into 1.
  void stop(int sig, std::chrono::seconds grace = kStopGrace) {
    if (mpi_) {
      for (const Proc& p : procs_) {
        if (p.done) continue;
        for (pid_t rank : list_children(p.pid)) {
          if (::getpgid(rank) == rank) ::killpg(rank, sig);
          ::kill(rank, sig);
        }
        if (sig == SIGKILL) ::kill(p.pid, SIGKILL);
      }
    } else if (pgid_ > 0) {
      ::killpg(pgid_, sig);
    }
    // A stopped rank (SIGSTOP, Ctrl-Z in its own terminal) acts on nothing but SIGKILL until continued.
    if (sig != SIGKILL && sig != SIGCONT) stop(SIGCONT, grace);
    if (sig == SIGKILL) {
      kill_at_.reset();
    } else if (sig != SIGCONT && !kill_at_) {
      kill_at_ = Clock::now() + grace;
    }
  }

  // mpirun path: the first failure a rank's shim recorded in the status file. The launcher says which rank
  // failed and stops the job itself (mpirun also would, but it cannot stop a rank that SIGSTOP stopped).
  void read_status() {
    if (status_path_.empty() || rank_failure_) return;
    const int fd = ::open(status_path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[4096];
    const ssize_t got = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    if (got <= 0) return;
    const std::string text(buf, static_cast<size_t>(got));
    const size_t nl = text.find('\n');
    if (nl == std::string::npos) return;  // the first line is not complete yet
    rank_failure_ = parse_status_line(text.substr(0, nl));
    if (!rank_failure_ || interrupted_) return;
    std::fprintf(stderr, "tessera: error: launch: %s; stopping the other ranks\n",
                 describe_failure(*rank_failure_).c_str());
    stop(SIGTERM);
  }

  void reap() {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED)) > 0) {
      auto it =
          std::find_if(procs_.begin(), procs_.end(), [&](const Proc& p) { return p.pid == pid && !p.done; });
      if (it == procs_.end()) continue;  // an orphan reparented to us: just reaped
      if (WIFSTOPPED(status)) {
        // Ctrl-Z: a launch cannot be suspended (the launcher would wait forever on stopped ranks).
        std::fprintf(stderr, "tessera: launch: suspending the ranks is not supported; continuing them\n");
        if (pgid_ > 0)
          ::killpg(pgid_, SIGCONT);
        else
          ::kill(pid, SIGCONT);
        continue;
      }
      it->done = true;
      it->status = status;
      if (mpi_ || failed_ >= 0 || interrupted_ || status_code(status) == 0) continue;
      failed_ = static_cast<int>(it - procs_.begin());
      const int others = live();
      std::fprintf(stderr, "tessera: error: launch: %s%s\n",
                   describe_failure({it->rank, host_name(), status}).c_str(),
                   others > 0 ? ("; stopping the other " + plural(others, "rank")).c_str() : "");
      if (others > 0) stop(SIGTERM);
    }
  }

  void on_signal(int sig) {
    if (sig == SIGCHLD) return reap();
    if (interrupted_ || failed_ >= 0) {
      stop(SIGKILL);  // a second signal: no more grace
      return;
    }
    interrupted_ = sig;
    std::fprintf(stderr, "tessera: launch: SIG%s received; passing it to the ranks\n",
                 sigabbrev_np(sig) ? sigabbrev_np(sig) : std::to_string(sig).c_str());
    stop(sig, signal_grace_);
  }

  void loop() {
    while (live() > 0) {
      std::vector<pollfd> fds{{sfd_, POLLIN, 0}};
      for (const Relay& r : relays_) fds.push_back({r.fd, POLLIN, 0});
      int timeout = mpi_ ? 250 : -1;  // mpirun: look for leftovers now and then
      if (kill_at_) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*kill_at_ - Clock::now()).count();
        timeout = static_cast<int>(std::clamp<long long>(ms, 0, timeout < 0 ? 60000 : timeout));
      }
      int n = ::poll(fds.data(), fds.size(), timeout);
      if (n < 0 && errno != EINTR) break;
      if (kill_at_ && Clock::now() >= *kill_at_) stop(SIGKILL);
      if (fds[0].revents & POLLIN) {
        signalfd_siginfo si{};
        while (::read(sfd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si))
          on_signal(static_cast<int>(si.ssi_signo));
      }
      for (size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) pump(fds[i].fd);
      reap();  // a SIGCHLD merged with another one is still seen
      if (mpi_) {
        read_status();
        kill_leftovers_of_finished_ranks();
      }
    }
  }

  // mpirun waits for its ranks' output to close, so a process a rank left behind (reparented to us, the
  // subreaper) that holds the rank's stdout would keep mpirun, and us, waiting. Once mpirun has no rank left,
  // such leftovers get a second, then SIGKILL.
  void kill_leftovers_of_finished_ranks() {
    const Proc& m = procs_.front();
    if (m.done) return;
    std::vector<pid_t> leftovers = list_children(::getpid());
    std::erase(leftovers, m.pid);
    if (leftovers.empty() || !list_children(m.pid).empty()) {
      leftovers_since_.reset();
      return;
    }
    if (!leftovers_since_) leftovers_since_ = Clock::now();
    if (Clock::now() - *leftovers_since_ < std::chrono::seconds(1)) return;
    kill_with_group(leftovers);
  }

  void kill_with_group(const std::vector<pid_t>& pids) {
    const pid_t own_group = ::getpgrp(), parent_group = ::getpgid(::getppid());
    for (pid_t k : pids) {
      const pid_t g = ::getpgid(k);
      if (g > 0 && g != own_group && g != parent_group) ::killpg(g, SIGKILL);
      ::kill(k, SIGKILL);
    }
  }

  void pump(int fd) {
    auto it = std::find_if(relays_.begin(), relays_.end(), [&](const Relay& r) { return r.fd == fd; });
    if (it == relays_.end() || relay_read(*it)) return;
    ::close(it->fd);
    relays_.erase(it);
  }

  // After the ranks (or mpirun) are gone: nothing of the launch may outlive it.
  void cleanup() {
    if (pgid_ > 0) ::killpg(pgid_, SIGKILL);
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    while (Clock::now() < deadline) {
      std::vector<pid_t> kids = list_children(::getpid());
      if (kids.empty()) break;
      kill_with_group(kids);
      ::usleep(10000);
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {
      }
    }
    // The output still buffered in the pipes (every writer is gone now).
    const auto drain_until = Clock::now() + std::chrono::seconds(1);
    while (!relays_.empty() && Clock::now() < drain_until) {
      pollfd p{relays_.front().fd, POLLIN, 0};
      ::poll(&p, 1, 100);
      pump(relays_.front().fd);
    }
    restore();
  }

  int exit_code() {
    if (failed_ >= 0) return status_code(procs_[static_cast<size_t>(failed_)].status);
    if (interrupted_) {
      // Ranks that took the signal and exited 0 (a server that drained its requests) ended the job cleanly.
      read_status();
      const bool clean = !rank_failure_ && std::all_of(procs_.begin(), procs_.end(), [](const Proc& p) {
        return p.done && status_code(p.status) == 0;
      });
      return clean ? 0 : 128 + interrupted_;
    }
    const bool reported = rank_failure_.has_value();
    read_status();  // a failure recorded just before mpirun exited
    if (rank_failure_) {
      if (!reported)
        std::fprintf(stderr, "tessera: error: launch: %s (mpirun stopped the other ranks)\n",
                     describe_failure(*rank_failure_).c_str());
      return status_code(rank_failure_->status);
    }
    for (const Proc& p : procs_) {
      const int code = status_code(p.status);
      if (code == 0) continue;
      if (mpi_)
        std::fprintf(stderr,
                     "tessera: error: launch: a rank failed (which one is not known: it ran on another "
                     "host): mpirun %s (it stopped the other ranks)\n",
                     describe_status(p.status).c_str());
      return code;
    }
    return 0;
  }

  const bool mpi_;
  const std::string status_path_;
  const std::chrono::seconds signal_grace_;
  std::optional<RankFailure> rank_failure_;
  bool set_up_ = false, tty_ = false;
  sigset_t watched_{}, old_mask_{};
  struct sigaction old_chld_ {};
  int sfd_ = -1, devnull_ = -1;
  pid_t pgid_ = 0;
  std::vector<Proc> procs_;
  std::vector<Relay> relays_;
  int failed_ = -1;  // index in procs_ of the first rank that failed
  int interrupted_ = 0;
  std::optional<Clock::time_point> kill_at_, leftovers_since_;
};

// The rank's shim as its parent: signals it gets go on to the rank.
volatile sig_atomic_t g_shim_child = 0;
void forward_to_child(int sig) {
  if (g_shim_child > 0) ::kill(static_cast<pid_t>(g_shim_child), sig);
}

int shim_supervise(int rank, const std::string& status_file, const std::string& exe,
                   std::vector<char*>& argv) {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "tessera: error: launch: cannot start rank %d: %s\n", rank, std::strerror(errno));
    return 127;
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the shim killed (SIGKILL from mpirun): the rank goes too
    if (::getppid() != parent) ::_exit(1);
    ::execv(exe.c_str(), argv.data());
    std::fprintf(stderr, "tessera: error: launch: cannot execute '%s': %s\n", exe.c_str(),
                 std::strerror(errno));
    ::_exit(127);
  }
  g_shim_child = pid;
  struct sigaction fwd {};
  fwd.sa_handler = forward_to_child;
  sigemptyset(&fwd.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT})
    ::sigaction(sig, &fwd, nullptr);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_shim_child = 0;
  if (status != 0) {
    const std::string line =
        "rank=" + std::to_string(rank) + " host=" + host_name() + " status=" + std::to_string(status) + "\n";
    // O_APPEND, one write: lines of ranks failing together do not interleave. No O_CREAT: on another host
    // than the launcher's the file is not there, and one line on stderr says it instead.
    const int fd = ::open(status_file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd >= 0) {
      write_all(fd, line);
      ::close(fd);
    } else {
      std::fprintf(stderr, "tessera: error: launch: %s\n",
                   describe_failure({rank, host_name(), status}).c_str());
    }
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    std::signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    ::sigprocmask(SIG_UNBLOCK, &one, nullptr);
    ::kill(::getpid(), sig);  // die the same way, so that mpirun sees the same status
  }
  return status_code(status);
}

}  // namespace

namespace {

// An OpenMPI hostfile, checked before mpirun sees it (mpirun's own complaint would reach the user only as "a
// rank failed"): lines `HOST [slots=N] [max_slots=N]`, '#' comments, at least --nnodes hosts.
void check_hostfile(const std::string& path, int nnodes) {
  const std::string text = io::read_regular_file(path, size_t{1} << 20);
  int hosts = 0, lineno = 0;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    ++lineno;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::vector<std::string> words;
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
      size_t j = i;
      while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j]))) ++j;
      if (j > i) words.push_back(line.substr(i, j - i));
      i = j;
    }
    if (words.empty()) continue;
    for (char c : words[0])
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_' && c != ':')
        fail(path, ": line ", lineno, ": '", words[0], "' is not a host name (expected HOST slots=N)");
    for (size_t w = 1; w < words.size(); ++w) {
      const std::string& kv = words[w];
      const size_t eq = kv.find('=');
      const std::string key = kv.substr(0, eq == std::string::npos ? kv.size() : eq);
      const std::string value = eq == std::string::npos ? "" : kv.substr(eq + 1);
      const bool number =
          !value.empty() && value.size() < 7 &&
          std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
      if ((key != "slots" && key != "max_slots" && key != "max-slots") || !number || std::stoi(value) < 1)
        fail(path, ": line ", lineno, ": '", kv, "' is not slots=N or max_slots=N (N a positive integer)");
    }
    ++hosts;
  }
  if (hosts < nnodes)
    fail(path, ": lists ", hosts, " host", hosts == 1 ? "" : "s", ", --nnodes ", nnodes,
         " needs one line per node");
}

}  // namespace

void validate(const Options& o) {
  if (o.nproc_per_node < 1) fail("launch: --nproc-per-node must be at least 1 (got ", o.nproc_per_node, ")");
  if (o.nproc_per_node > 4096) fail("launch: --nproc-per-node ", o.nproc_per_node, " is more than 4096");
  if (o.nnodes < 1) fail("launch: --nnodes must be at least 1 (got ", o.nnodes, ")");
  if (o.nnodes > 65536) fail("launch: --nnodes ", o.nnodes, " is more than 65536");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    fail("launch: --node-rank ", o.node_rank, " is out of range for --nnodes ", o.nnodes, " (0..",
         o.nnodes - 1, ")");
  if (o.master_port < 1 || o.master_port > 65535)
    fail("launch: --master-port ", o.master_port, " is not a TCP port (1..65535)");
  if (static_cast<long long>(o.nproc_per_node) * o.nnodes > (1 << 20))
    fail("launch: ", o.nproc_per_node, " x ", o.nnodes, " ranks are too many");
  if (o.signal_grace_s < 0 || o.signal_grace_s > 86400)
    fail("launch: --signal-grace must be 0..86400 seconds (got ", o.signal_grace_s, ")");
  if (o.command.empty() || o.command[0].empty())
    fail("launch: no command given (usage: tessera launch --nproc-per-node N -- COMMAND [ARGS...])");
  if (o.nnodes > 1 && o.master_addr.empty())
    fail("launch: --nnodes ", o.nnodes, " needs --master-addr (the address of node 0)");
  if (!o.hostfile.empty() && (!o.use_mpi || o.nnodes == 1))
    fail(
        "launch: --hostfile is for --nnodes > 1 through mpirun (with --no-mpi, run launch on every node with "
        "its "
        "--node-rank)");
  if (o.use_mpi && o.nnodes > 1 && o.hostfile.empty())
    fail("launch: --nnodes ", o.nnodes,
         " through mpirun needs --hostfile FILE (one line per node: HOST slots=", o.nproc_per_node,
         "); or run launch --no-mpi on every node with its --node-rank");
  if (o.use_mpi && o.node_rank != 0)
    fail(
        "launch: through mpirun, run launch once, on node 0 (mpirun starts every node's ranks); --node-rank ",
        o.node_rank, " is for --no-mpi");
  if (o.use_mpi && o.nnodes > 1) check_hostfile(o.hostfile, o.nnodes);
}

std::string command_device(const std::vector<std::string>& command) {
  std::string device = "cpu";
  for (size_t i = 1; i < command.size(); ++i) {
    if (command[i] == "--device" && i + 1 < command.size())
      device = command[i + 1];
    else if (command[i].rfind("--device=", 0) == 0)
      device = command[i].substr(9);
  }
  return device;
}

DevicePlan plan_devices(const Options& o) {
  DevicePlan plan;
  plan.device = command_device(o.command);
  const int n = o.nproc_per_node;
  std::string kind = plan.device;
  const Found tpu = (kind == "tpu" || kind == "auto") ? count_tpu_chips(o.sysroot) : Found{};
  const Found gpu = (kind == "cuda" || kind == "auto") ? count_gpus(o.sysroot) : Found{};
  if (kind == "auto") kind = tpu.count > 0 ? "tpu" : gpu.count > 0 ? "cuda" : "cpu";
  if (kind == "tpu") {
    if (tpu.count == 0) fail("launch: --device ", plan.device, " but no TPU chip found (", tpu.where, ")");
    if (o.nnodes > 1)
      fail(
          "launch: --device tpu runs on one TPU host (--nnodes 1): a multi-host slice needs every host's "
          "address in "
          "TPU_PROCESS_ADDRESSES, which this launcher does not know");
    if (n > tpu.count)
      fail("launch: --nproc-per-node ", n, " but only ", plural(tpu.count, "TPU chip"), " found (", tpu.where,
           ")");
    std::optional<std::string> bounds = tpu_process_bounds(n);
    if (!bounds)
      fail("launch: --nproc-per-node ", n, " does not fit ", plural(tpu.count, "TPU chip"),
           ": with one chip per process libtpu takes a 1x1, 1x2, 2x2 or 2x4 block of chips, so use ",
           tpu_accepted_counts(tpu.count));
    plan.kind = DeviceKind::kTpu;
    plan.count = tpu.count;
    plan.found_in = tpu.where;
    plan.tpu_process_bounds = *bounds;
  } else if (kind == "cuda") {
    if (gpu.count == 0) fail("launch: --device ", plan.device, " but no NVIDIA GPU found (", gpu.where, ")");
    if (n > gpu.count)
      fail("launch: --nproc-per-node ", n, " but only ", plural(gpu.count, "GPU"), " found (", gpu.where,
           ")");
    if (o.cuda_visible_devices) {
      plan.cuda_ids = split_list(*o.cuda_visible_devices);
      if (static_cast<int>(plan.cuda_ids.size()) < n)
        fail("launch: --nproc-per-node ", n, " but CUDA_VISIBLE_DEVICES='", *o.cuda_visible_devices,
             "' lists only ", plural(static_cast<int>(plan.cuda_ids.size()), "GPU"));
      plan.cuda_ids.resize(static_cast<size_t>(n));
    } else {
      for (int i = 0; i < n; ++i) plan.cuda_ids.push_back(std::to_string(i));
    }
    plan.kind = DeviceKind::kCuda;
    plan.count = gpu.count;
    plan.found_in = gpu.where;
  }
  return plan;
}

std::vector<std::pair<std::string, std::string>> rank_environment(const Options& o, const DevicePlan& plan,
                                                                  const RankInfo& r) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"RANK", std::to_string(r.rank)},
      {"WORLD_SIZE", std::to_string(r.world_size)},
      {"LOCAL_RANK", std::to_string(r.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(r.local_world_size)},
      {"MASTER_ADDR", o.master_addr.empty() ? "127.0.0.1" : o.master_addr},
      {"MASTER_PORT", std::to_string(o.master_port)},
      {"TESSERA_LAUNCHED", "1"},
  };
  if (plan.kind == DeviceKind::kTpu) {
    // As torch_xla's configure_topology: one chip per process, a port per process on this host, the task id
    // being the global rank.
    std::string addresses;
    for (int i = 0; i < r.local_world_size; ++i)
      addresses += (i ? ",localhost:" : "localhost:") + std::to_string(kTpuBasePort + i);
    env.insert(env.end(), {{"TPU_VISIBLE_CHIPS", std::to_string(r.local_rank)},
                           {"TPU_CHIPS_PER_PROCESS_BOUNDS", "1,1,1"},
                           {"TPU_PROCESS_BOUNDS", plan.tpu_process_bounds},
                           {"TPU_PROCESS_ADDRESSES", addresses},
                           {"TPU_PROCESS_PORT", std::to_string(kTpuBasePort + r.local_rank)},
                           {"CLOUD_TPU_TASK_ID", std::to_string(r.rank)}});
  } else if (plan.kind == DeviceKind::kCuda) {
    const size_t i = static_cast<size_t>(r.local_rank);
    env.emplace_back("CUDA_VISIBLE_DEVICES", i < plan.cuda_ids.size() ? plan.cuda_ids[i] : std::to_string(i));
  }
  return env;
}

std::vector<std::string> mpirun_command(const Options& o, const std::string& mpirun,
                                        const std::string& self) {
  std::vector<std::string> argv = {mpirun, "-q", "--oversubscribe", "--bind-to", "none"};
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  // Ranks waiting in a collective yield the core instead of spinning: with more ranks (and their worker
  // threads) than cores, spinning waiters starve the rank doing the work (SmolLM2, 2 ranks on 2 busy
  // cores: 8.5 vs 2.8 tokens/s). An explicit OMPI_MCA_mpi_yield_when_idle in the environment wins.
  if (!std::getenv("OMPI_MCA_mpi_yield_when_idle"))
    argv.insert(argv.end(), {"--mca", "mpi_yield_when_idle", "1"});
  argv.insert(argv.end(), {"-np", std::to_string(o.nproc_per_node * o.nnodes)});
  if (o.nnodes > 1)
    argv.insert(argv.end(),
                {"--hostfile", o.hostfile, "--map-by", "ppr:" + std::to_string(o.nproc_per_node) + ":node"});
  if (o.all_output) argv.push_back("--tag-output");
  argv.insert(argv.end(),
              {self, "launch", "--rank-shim", "--nproc-per-node", std::to_string(o.nproc_per_node),
               "--nnodes", std::to_string(o.nnodes), "--master-port", std::to_string(o.master_port)});
  if (!o.master_addr.empty()) argv.insert(argv.end(), {"--master-addr", o.master_addr});
  if (o.all_output) argv.push_back("--all-output");
  if (!o.status_file.empty()) argv.insert(argv.end(), {"--status-file", o.status_file});
  argv.push_back("--");
  argv.insert(argv.end(), o.command.begin(), o.command.end());
  return argv;
}

int run(const Options& o) {
  validate(o);
  std::string status_file;  // mpirun path: removed on every way out
  struct Remove {
    std::string& path;
    ~Remove() {
      if (!path.empty()) ::unlink(path.c_str());
    }
  } remove{status_file};
  const DevicePlan plan = plan_devices(o);
  const std::string exe = resolve_command(o.command[0]);
  std::vector<Spawn> spawns;
  if (o.use_mpi) {
    std::optional<std::string> mpirun = find_executable("mpirun");
    if (!mpirun)
      fail(
          "launch: mpirun not found on PATH (Debian: apt-get install openmpi-bin); or start the ranks "
          "without MPI: "
          "--no-mpi");
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/tessera-launch-status-XXXXXX";
    const int fd = ::mkstemp(templ.data());
    if (fd >= 0) {
      ::close(fd);
      status_file = templ;
    }
    Options with_status = o;
    with_status.status_file = status_file;
    Spawn s;
    s.path = *mpirun;
    s.argv = mpirun_command(with_status, *mpirun, self_path());
    s.env = merged_environment({});
    s.pipe_output = o.all_output;
    spawns.push_back(std::move(s));
  } else {
    const int n = o.nproc_per_node;
    for (int local = 0; local < n; ++local) {
      const RankInfo r{o.node_rank * n + local, n * o.nnodes, local, n};
      Spawn s;
      s.path = exe;
      s.argv = o.command;
      s.env = merged_environment(rank_environment(o, plan, r));
      s.rank = r.rank;
      s.stdin_null = r.rank != 0;  // as mpirun: standard input goes to rank 0 only
      s.stdout_null = r.rank != 0 && !o.all_output;
      s.pipe_output = o.all_output;
      spawns.push_back(std::move(s));
    }
  }
  Supervisor sup(o.use_mpi, status_file, std::chrono::seconds(o.signal_grace_s));
  return sup.run(std::move(spawns));
}

int exec_rank_shim(const Options& o) {
  auto env_int = [](const char* name) {
    const char* v = std::getenv(name);
    if (!v || !all_digits(v)) fail("launch: --rank-shim runs inside mpirun (", name, " is not set)");
    return std::atoi(v);
  };
  RankInfo r{env_int("OMPI_COMM_WORLD_RANK"), env_int("OMPI_COMM_WORLD_SIZE"),
             env_int("OMPI_COMM_WORLD_LOCAL_RANK"), env_int("OMPI_COMM_WORLD_LOCAL_SIZE")};
  if (o.command.empty()) fail("launch: --rank-shim: no command");
  const DevicePlan plan = plan_devices(o);  // this node's devices
  for (const auto& [k, v] : rank_environment(o, plan, r)) ::setenv(k.c_str(), v.c_str(), 1);
  if (r.rank != 0 && !o.all_output) {
    int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) ::dup2(fd, STDOUT_FILENO);
  }
  const std::string exe = resolve_command(o.command[0]);
  std::vector<std::string> args = o.command;
  std::vector<char*> argv = c_strings(args);
  std::fflush(nullptr);
  if (o.status_file.empty()) {
    ::execv(exe.c_str(), argv.data());
    std::fprintf(stderr, "tessera: error: launch: cannot execute '%s': %s\n", exe.c_str(),
                 std::strerror(errno));
    return 127;
  }
  return shim_supervise(r.rank, o.status_file, exe, argv);
}

std::optional<RankFailure> parse_status_line(const std::string& line) {
  RankFailure f;
  char host[256] = {};
  if (std::sscanf(line.c_str(), "rank=%d host=%255s status=%d", &f.rank, host, &f.status) != 3 || f.rank < 0)
    return std::nullopt;
  f.host = host;
  return f;
}

std::string describe_failure(const RankFailure& f) {
  return "rank " + std::to_string(f.rank) + (f.host.empty() ? "" : " (host " + f.host + ")") + " " +
         describe_status(f.status);
}

}  // namespace tessera::launch
