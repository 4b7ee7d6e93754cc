// `tessera launch`: the checks and per-rank environment (Launch.*), and the CLI end to end on both paths,
// mpirun and --no-mpi (LaunchCli.*: they spawn the CLI, so scripts/test.sh's sanitizer stage skips them with
// the other Cli. suites). Devices are faked with TESSERA_LAUNCH_SYSROOT (test-only), which the tessera
// command passes as launch::Options::sysroot: a directory standing in for / when /dev and /proc are searched
// for TPU chips and GPUs.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "cli_env.h"
#include "launch.h"
#include "tessera/error.h"
#include "test_env_util.h"

extern char** environ;

namespace fs = std::filesystem;
namespace launch = tessera::launch;
using Clock = std::chrono::steady_clock;

namespace {

using ScratchDir = tessera::testing::TempDir;
using tessera::testing::ScopedEnv;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const tessera::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// As the tessera command makes them: the flags, then what it takes from its environment
// (cli::apply_launch_environment: $TESSERA_LAUNCH_SYSROOT, $CUDA_VISIBLE_DEVICES).
launch::Options options(int nproc, std::vector<std::string> command = {"sh", "-c", "true"}) {
  launch::Options o;
  o.nproc_per_node = nproc;
  o.command = std::move(command);
  tessera::cli::apply_launch_environment(o);
  return o;
}

std::map<std::string, std::string> as_map(const std::vector<std::pair<std::string, std::string>>& env) {
  return {env.begin(), env.end()};
}

// The file's text, or "" when it cannot be read (a /proc/PID file of a process exiting during the read makes
// read() fail with ESRCH, which libstdc++'s filebuf throws as an exception).
std::string slurp(const std::string& path) {
  try {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
  } catch (const std::exception&) {
    return "";
  }
}

// ---- unit: checks and environment ----

TEST(Launch, CommandDevice) {
  EXPECT_EQ(launch::command_device({"tessera", "generate", "m"}), "cpu");
  EXPECT_EQ(launch::command_device({"tessera", "generate", "--device", "tpu", "m"}), "tpu");
  EXPECT_EQ(launch::command_device({"tessera", "generate", "--device=cuda"}), "cuda");
  EXPECT_EQ(launch::command_device({"x", "--device", "cpu", "--device", "xla-cpu"}), "xla-cpu");
  EXPECT_EQ(launch::command_device({"x", "--device"}), "cpu");
}

TEST(Launch, ValidateRejectsBadFlags) {
  auto err = [](auto edit) {
    launch::Options o = options(2);
    edit(o);
    return error_of([&] { launch::validate(o); });
  };
  EXPECT_EQ(err([](launch::Options&) {}), "(no error)");
  EXPECT_EQ(err([](launch::Options& o) { o.nproc_per_node = 0; }),
            "launch: --nproc-per-node must be at least 1 (got 0)");
  EXPECT_EQ(err([](launch::Options& o) { o.nnodes = 0; }), "launch: --nnodes must be at least 1 (got 0)");
  EXPECT_EQ(err([](launch::Options& o) {
              o.use_mpi = false;
              o.nnodes = 2;
              o.node_rank = 2;
              o.master_addr = "10.0.0.1";
            }),
            "launch: --node-rank 2 is out of range for --nnodes 2 (0..1)");
  EXPECT_EQ(err([](launch::Options& o) { o.master_port = 0; }),
            "launch: --master-port 0 is not a TCP port (1..65535)");
  EXPECT_EQ(err([](launch::Options& o) { o.master_port = 65536; }),
            "launch: --master-port 65536 is not a TCP port (1..65535)");
  EXPECT_EQ(err([](launch::Options& o) { o.command.clear(); }),
            "launch: no command given (usage: tessera launch --nproc-per-node N -- COMMAND [ARGS...])");
  EXPECT_EQ(err([](launch::Options& o) {
              o.use_mpi = false;
              o.nnodes = 2;
            }),
            "launch: --nnodes 2 needs --master-addr (the address of node 0)");
  EXPECT_NE(err([](launch::Options& o) {
              o.nnodes = 2;
              o.master_addr = "10.0.0.1";
            }).find("needs --hostfile"),
            std::string::npos);
  EXPECT_NE(err([](launch::Options& o) {
              o.nnodes = 2;
              o.node_rank = 1;
              o.master_addr = "10.0.0.1";
              o.hostfile = "hosts";
            }).find("run launch once, on node 0"),
            std::string::npos);
}

TEST(Launch, RankEnvironmentOnCpu) {
  ScopedEnv root("TESSERA_LAUNCH_SYSROOT", "/nonexistent");
  launch::Options o = options(2);
  o.master_port = 1234;
  const launch::DevicePlan plan = launch::plan_devices(o);
  EXPECT_EQ(plan.kind, launch::DeviceKind::kNone);
  auto env = as_map(launch::rank_environment(o, plan, {3, 4, 1, 2}));
  EXPECT_EQ(env, (std::map<std::string, std::string>{{"RANK", "3"},
                                                     {"WORLD_SIZE", "4"},
                                                     {"LOCAL_RANK", "1"},
                                                     {"LOCAL_WORLD_SIZE", "2"},
                                                     {"MASTER_ADDR", "127.0.0.1"},
                                                     {"MASTER_PORT", "1234"},
                                                     {"TESSERA_LAUNCHED", "1"}}));
}

TEST(Launch, TpuChipsCountsAndVariables) {
  ScratchDir root;
  for (int i = 0; i < 4; ++i) root.touch("dev/accel" + std::to_string(i));
  ScopedEnv env_root("TESSERA_LAUNCH_SYSROOT", root.path());
  const std::vector<std::string> cmd = {"tessera", "generate", "--device", "tpu"};

  launch::Options o = options(4, cmd);
  launch::DevicePlan plan = launch::plan_devices(o);
  EXPECT_EQ(plan.kind, launch::DeviceKind::kTpu);
  EXPECT_EQ(plan.count, 4);
  EXPECT_EQ(plan.found_in, "/dev/accel*");
  auto env = as_map(launch::rank_environment(o, plan, {2, 4, 2, 4}));
  EXPECT_EQ(env["TPU_VISIBLE_CHIPS"], "2");
  EXPECT_EQ(env["TPU_CHIPS_PER_PROCESS_BOUNDS"], "1,1,1");
  EXPECT_EQ(env["TPU_PROCESS_BOUNDS"], "2,2,1");
  EXPECT_EQ(env["TPU_PROCESS_ADDRESSES"], "localhost:8476,localhost:8477,localhost:8478,localhost:8479");
  EXPECT_EQ(env["TPU_PROCESS_PORT"], "8478");
  EXPECT_EQ(env["CLOUD_TPU_TASK_ID"], "2");
  EXPECT_EQ(env["RANK"], "2");

  EXPECT_EQ(launch::plan_devices(options(1, cmd)).tpu_process_bounds, "1,1,1");
  EXPECT_EQ(launch::plan_devices(options(2, cmd)).tpu_process_bounds, "1,2,1");
  EXPECT_EQ(error_of([&] { launch::plan_devices(options(3, cmd)); }),
            "launch: --nproc-per-node 3 does not fit 4 TPU chips: with one chip per process libtpu takes a "
            "1x1, 1x2, "
            "2x2 or 2x4 block of chips, so use 1, 2 or 4");
  EXPECT_EQ(error_of([&] { launch::plan_devices(options(8, cmd)); }),
            "launch: --nproc-per-node 8 but only 4 TPU chips found (/dev/accel*)");
  launch::Options multi = options(4, cmd);
  multi.nnodes = 2;
  EXPECT_NE(error_of([&] { launch::plan_devices(multi); }).find("one TPU host"), std::string::npos);
  // auto picks the TPU when chips are present.
  EXPECT_EQ(launch::plan_devices(options(2, {"tessera", "generate", "--device=auto"})).kind,
            launch::DeviceKind::kTpu);
  // cpu / xla-cpu accept any count.
  EXPECT_EQ(launch::plan_devices(options(16, {"tessera", "generate", "--device", "xla-cpu"})).kind,
            launch::DeviceKind::kNone);
}

TEST(Launch, TpuChipsBehindVfio) {
  ScratchDir root;
  for (const char* f : {"dev/vfio/0", "dev/vfio/1", "dev/vfio/2", "dev/vfio/3", "dev/vfio/4", "dev/vfio/5",
                        "dev/vfio/6", "dev/vfio/7", "dev/vfio/vfio"})
    root.touch(f);
  ScopedEnv env_root("TESSERA_LAUNCH_SYSROOT", root.path());
  // VFIO groups alone are not TPU chips (any passed-through device has one): a Google PCI device must be
  // there.
  root.touch("sys/bus/pci/devices/0000:00:05.0/vendor", "0x10de\n");
  EXPECT_EQ(
      error_of([&] {
        launch::plan_devices(options(1, {"x", "--device", "tpu"}));
      }),
      "launch: --device tpu but no TPU chip found (/dev/accel*, /dev/vfio/[0-9]* with a PCI device of vendor "
      "0x1ae0)");
  EXPECT_EQ(launch::plan_devices(options(1, {"x", "--device", "auto"})).kind, launch::DeviceKind::kNone);
  root.touch("sys/bus/pci/devices/0000:00:04.0/vendor", "0x1ae0\n");
  launch::DevicePlan plan = launch::plan_devices(options(8, {"x", "--device", "tpu"}));
  EXPECT_EQ(plan.count, 8);
  EXPECT_EQ(plan.found_in, "/dev/vfio/[0-9]*");
  EXPECT_EQ(plan.tpu_process_bounds, "2,4,1");
  EXPECT_EQ(error_of([&] {
              launch::plan_devices(options(6, {"x", "--device", "tpu"}));
            }),
            "launch: --nproc-per-node 6 does not fit 8 TPU chips: with one chip per process libtpu takes a "
            "1x1, 1x2, "
            "2x2 or 2x4 block of chips, so use 1, 2, 4 or 8");
}

TEST(Launch, CudaGpusCountsAndVariables) {
  ScratchDir root;
  root.touch("proc/driver/nvidia/gpus/0000:01:00.0/information");
  root.touch("proc/driver/nvidia/gpus/0000:02:00.0/information");
  root.touch("dev/nvidiactl");
  ScopedEnv env_root("TESSERA_LAUNCH_SYSROOT", root.path());
  ScopedEnv visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  const std::vector<std::string> cmd = {"tessera", "generate", "--device=cuda"};
  launch::Options o = options(2, cmd);
  launch::DevicePlan plan = launch::plan_devices(o);
  EXPECT_EQ(plan.kind, launch::DeviceKind::kCuda);
  EXPECT_EQ(as_map(launch::rank_environment(o, plan, {1, 2, 1, 2}))["CUDA_VISIBLE_DEVICES"], "1");
  EXPECT_EQ(error_of([&] { launch::plan_devices(options(3, cmd)); }),
            "launch: --nproc-per-node 3 but only 2 GPUs found (/proc/driver/nvidia/gpus/*)");
  {
    ScopedEnv narrowed("CUDA_VISIBLE_DEVICES", "1");
    EXPECT_EQ(error_of([&] { launch::plan_devices(options(2, cmd)); }),
              "launch: --nproc-per-node 2 but CUDA_VISIBLE_DEVICES='1' lists only 1 GPU");
    EXPECT_EQ(as_map(launch::rank_environment(options(1, cmd), launch::plan_devices(options(1, cmd)),
                                              {}))["CUDA_VISIBLE_DEVICES"],
              "1");
  }
  EXPECT_EQ(launch::plan_devices(options(2, {"x", "--device", "auto"})).kind, launch::DeviceKind::kCuda);
}

TEST(Launch, CudaFallsBackToDeviceNodes) {
  ScratchDir root;
  for (const char* f : {"dev/nvidia0", "dev/nvidiactl", "dev/nvidia-uvm"}) root.touch(f);
  ScopedEnv env_root("TESSERA_LAUNCH_SYSROOT", root.path());
  ScopedEnv visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  EXPECT_EQ(error_of([&] {
              launch::plan_devices(options(2, {"x", "--device", "cuda"}));
            }),
            "launch: --nproc-per-node 2 but only 1 GPU found (/dev/nvidia[0-9]*)");
  ScopedEnv empty_root("TESSERA_LAUNCH_SYSROOT", "/nonexistent");
  EXPECT_EQ(error_of([&] {
              launch::plan_devices(options(1, {"x", "--device", "cuda"}));
            }),
            "launch: --device cuda but no NVIDIA GPU found (/proc/driver/nvidia/gpus/*, /dev/nvidia[0-9]*)");
}

TEST(Launch, StatusLinesNameRankHostAndStatus) {
  auto f = launch::parse_status_line("rank=3 host=node-b status=" + std::to_string(7 << 8));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(launch::describe_failure(*f), "rank 3 (host node-b) exited with code 7");
  f = launch::parse_status_line("rank=1 host=h status=9");  // WTERMSIG 9
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(launch::describe_failure(*f).rfind("rank 1 (host h) was killed by signal 9", 0), 0u);
  EXPECT_FALSE(launch::parse_status_line("rank=x host=h status=1").has_value());
  EXPECT_FALSE(launch::parse_status_line("").has_value());
  launch::Options o = options(2);
  o.status_file = "/tmp/s";
  std::string joined;
  for (const auto& a : launch::mpirun_command(o, "mpirun", "/x/tessera")) joined += a + " ";
  EXPECT_NE(
      joined.find(" --rank-shim --nproc-per-node 2 --nnodes 1 --master-port 29500 --status-file /tmp/s -- "),
      std::string::npos)
      << joined;
}

TEST(Launch, MpirunCommandLine) {
  launch::Options o = options(3, {"tessera", "generate", "--device", "cpu"});
  o.all_output = true;
  std::vector<std::string> argv = launch::mpirun_command(o, "/usr/bin/mpirun", "/x/tessera");
  std::string joined;
  for (const auto& a : argv) joined += a + " ";
  EXPECT_EQ(argv.front(), "/usr/bin/mpirun");
  EXPECT_NE(joined.find(" --oversubscribe --bind-to none "), std::string::npos) << joined;
  if (!std::getenv("OMPI_MCA_mpi_yield_when_idle")) {
    EXPECT_NE(joined.find(" --mca mpi_yield_when_idle 1 "), std::string::npos) << joined;
  }
  EXPECT_NE(joined.find(" -np 3 "), std::string::npos) << joined;
  EXPECT_NE(joined.find(" --tag-output "), std::string::npos) << joined;
  EXPECT_NE(joined.find(" /x/tessera launch --rank-shim --nproc-per-node 3 --nnodes 1 --master-port 29500 "
                        "--all-output -- tessera generate --device cpu "),
            std::string::npos)
      << joined;
  EXPECT_EQ(joined.find("--allow-run-as-root") != std::string::npos, ::geteuid() == 0);
}

// ---- end to end: the CLI binary ----

struct Running {
  pid_t pid = -1;
  std::string out_path, err_path;
  Clock::time_point start;
};

struct Finished {
  int code = -1;
  std::string out, err;
  double seconds = 0;
  bool timed_out = false;
};

// Starts `tessera launch ARGS` with stdout/stderr in files under `dir`, default signal dispositions, and the
// environment changed by `env` ("NAME=value" sets, "NAME" unsets).
Running start_cli(const ScratchDir& dir, const std::vector<std::string>& args,
                  const std::vector<std::string>& env = {}) {
  static int n = 0;
  Running r;
  r.out_path = dir / ("cli" + std::to_string(n) + ".out");
  r.err_path = dir / ("cli" + std::to_string(n++) + ".err");
  std::vector<std::string> argv = {TESSERA_CLI_PATH, "launch"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> envv;
  for (char** e = environ; *e; ++e) {
    std::string entry(*e), key = entry.substr(0, entry.find('='));
    bool replaced = key == "TESSERA_LAUNCH_SYSROOT";
    for (const std::string& change : env) replaced |= change.substr(0, change.find('=')) == key;
    if (!replaced) envv.push_back(entry);
  }
  for (const std::string& change : env)
    if (change.find('=') != std::string::npos) envv.push_back(change);
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : envv) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, r.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, r.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGCHLD, SIGPIPE}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  r.start = Clock::now();
  EXPECT_EQ(posix_spawn(&r.pid, argv[0].c_str(), &fa, &attr, cargv.data(), cenv.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  return r;
}

Finished wait_cli(const Running& r, double timeout_s = 20) {
  Finished f;
  int status = 0;
  while (true) {
    pid_t done = ::waitpid(r.pid, &status, WNOHANG);
    if (done == r.pid) break;
    if (std::chrono::duration<double>(Clock::now() - r.start).count() > timeout_s) {
      f.timed_out = true;
      ::kill(r.pid, SIGKILL);
      ::waitpid(r.pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  f.seconds = std::chrono::duration<double>(Clock::now() - r.start).count();
  f.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  f.out = slurp(r.out_path);
  f.err = slurp(r.err_path);
  return f;
}

Finished run_cli(const ScratchDir& dir, const std::vector<std::string>& args,
                 const std::vector<std::string>& env = {}) {
  return wait_cli(start_cli(dir, args, env));
}

// Alive and not a zombie.
bool alive(pid_t pid) {
  std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

pid_t pgid_of(pid_t pid) {
  std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  char state = 0;
  long ppid = 0, pgid = 0;
  if (paren == std::string::npos ||
      std::sscanf(stat.c_str() + paren + 1, " %c %ld %ld", &state, &ppid, &pgid) != 3)
    return -1;
  return static_cast<pid_t>(pgid);
}

bool wait_for_files(const std::vector<std::string>& paths, double timeout_s = 10) {
  const auto until = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < until) {
    if (std::all_of(paths.begin(), paths.end(), [](const std::string& p) { return fs::exists(p); }))
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::map<std::string, std::string> read_env_file(const std::string& path) {
  std::map<std::string, std::string> env;
  std::istringstream is(slurp(path));
  std::string line;
  while (std::getline(is, line))
    if (auto eq = line.find('='); eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  return env;
}

int line_count(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// Parameter: true = through mpirun (the default), false = --no-mpi.
class LaunchCli : public ::testing::TestWithParam<bool> {
 protected:
  std::vector<std::string> mode() const {
    return GetParam() ? std::vector<std::string>{} : std::vector<std::string>{"--no-mpi"};
  }
  std::vector<std::string> args(std::initializer_list<std::string> rest) const {
    std::vector<std::string> a = mode();
    a.insert(a.end(), rest);
    return a;
  }
  ScratchDir dir;
};

TEST_P(LaunchCli, EnvironmentPerRank) {
  Finished f = run_cli(dir, args({"--nproc-per-node", "3", "--master-port", "23456", "--", "sh", "-c",
                                  "env > \"$0/env.$RANK\"", dir.path()}));
  ASSERT_EQ(f.code, 0) << f.err;
  for (int rank = 0; rank < 3; ++rank) {
    auto env = read_env_file(dir / ("env." + std::to_string(rank)));
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["WORLD_SIZE"], "3");
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["MASTER_PORT"], "23456");
    EXPECT_EQ(env["TESSERA_LAUNCHED"], "1");
    EXPECT_EQ(env.count("TPU_VISIBLE_CHIPS"), 0u);
    EXPECT_EQ(env.count("OMPI_COMM_WORLD_RANK"), GetParam() ? 1u : 0u);
    if (GetParam()) {
      EXPECT_EQ(env["OMPI_COMM_WORLD_RANK"], std::to_string(rank));
    }
  }
}

TEST_P(LaunchCli, TpuAndCudaVariablesFromFakeDevices) {
  ScratchDir root;
  for (int i = 0; i < 4; ++i) root.touch("dev/accel" + std::to_string(i));
  root.touch("proc/driver/nvidia/gpus/0000:01:00.0/information");
  root.touch("proc/driver/nvidia/gpus/0000:02:00.0/information");
  const std::vector<std::string> env = {"TESSERA_LAUNCH_SYSROOT=" + root.path(), "CUDA_VISIBLE_DEVICES"};
  Finished f = run_cli(dir,
                       args({"--nproc-per-node", "4", "--", "sh", "-c", "env > \"$0/tpu.$RANK\"", dir.path(),
                             "--device", "tpu"}),
                       env);
  ASSERT_EQ(f.code, 0) << f.err;
  for (int rank = 0; rank < 4; ++rank) {
    auto e = read_env_file(dir / ("tpu." + std::to_string(rank)));
    EXPECT_EQ(e["TPU_VISIBLE_CHIPS"], std::to_string(rank));
    EXPECT_EQ(e["TPU_CHIPS_PER_PROCESS_BOUNDS"], "1,1,1");
    EXPECT_EQ(e["TPU_PROCESS_BOUNDS"], "2,2,1");
    EXPECT_EQ(e["TPU_PROCESS_ADDRESSES"], "localhost:8476,localhost:8477,localhost:8478,localhost:8479");
    EXPECT_EQ(e["TPU_PROCESS_PORT"], std::to_string(8476 + rank));
    EXPECT_EQ(e["CLOUD_TPU_TASK_ID"], std::to_string(rank));
  }
  f = run_cli(dir,
              args({"--nproc-per-node", "2", "--", "sh", "-c", "env > \"$0/cuda.$RANK\"", dir.path(),
                    "--device=cuda"}),
              env);
  ASSERT_EQ(f.code, 0) << f.err;
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_EQ(read_env_file(dir / ("cuda." + std::to_string(rank)))["CUDA_VISIBLE_DEVICES"],
              std::to_string(rank));
}

TEST_P(LaunchCli, OnlyRankZeroStdoutButEveryStderr) {
  Finished f =
      run_cli(dir, args({"--nproc-per-node", "3", "--", "sh", "-c", "echo out-$RANK; echo err-$RANK >&2"}));
  ASSERT_EQ(f.code, 0) << f.err;
  EXPECT_EQ(f.out, "out-0\n");
  for (const char* e : {"err-0\n", "err-1\n", "err-2\n"})
    EXPECT_NE(f.err.find(e), std::string::npos) << f.err;
}

TEST_P(LaunchCli, AllOutputPrefixesEveryLine) {
  Finished f = run_cli(dir, args({"--nproc-per-node", "3", "--all-output", "--", "sh", "-c",
                                  "echo out-$RANK; echo err-$RANK >&2; echo more-$RANK"}));
  ASSERT_EQ(f.code, 0) << f.err;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string r = std::to_string(rank);
    EXPECT_NE(f.out.find("[rank " + r + "] out-" + r + "\n"), std::string::npos) << f.out;
    EXPECT_NE(f.out.find("[rank " + r + "] more-" + r + "\n"), std::string::npos) << f.out;
    EXPECT_NE(f.err.find("[rank " + r + "] err-" + r + "\n"), std::string::npos) << f.err;
  }
  EXPECT_EQ(line_count(f.out), 6) << f.out;
}

TEST_P(LaunchCli, FailingRankStopsTheOthersWithItsExitCode) {
  Finished f =
      run_cli(dir, args({"--nproc-per-node", "3", "--", "sh", "-c",
                         "echo $$ > \"$0/pid.$RANK\"; if [ $RANK = 1 ]; then sleep 0.2; exit 7; fi; sleep 30",
                         dir.path()}));
  EXPECT_EQ(f.code, 7) << f.err;
  EXPECT_LT(f.seconds, 5.0);
  EXPECT_EQ(line_count(f.err), 1) << f.err;
  // Both paths name the rank, its host and its status (mpirun's own exit code says none of it).
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  EXPECT_NE(
      f.err.find("tessera: error: launch: rank 1 (host " + std::string(host) + ") exited with code 7; " +
                 (GetParam() ? "stopping the other ranks" : "stopping the other 2 ranks")),
      std::string::npos)
      << f.err;
  for (int rank = 0; rank < 3; ++rank) {
    const pid_t pid = std::atoi(slurp(dir / ("pid." + std::to_string(rank))).c_str());
    EXPECT_FALSE(pid > 0 && alive(pid)) << "rank " << rank;
  }
}

TEST_P(LaunchCli, RankKilledMidRunLeavesNoProcessBehind) {
  // Each rank starts a child of its own (which outlives a killed rank unless the launcher cleans up).
  Running r = start_cli(
      dir, args({"--nproc-per-node", "3", "--", "sh", "-c",
                 "sleep 60 & echo \"$$ $!\" > \"$0/p.tmp.$RANK\"; mv \"$0/p.tmp.$RANK\" \"$0/p.$RANK\"; wait",
                 dir.path()}));
  ASSERT_TRUE(wait_for_files({dir / "p.0", dir / "p.1", dir / "p.2"})) << slurp(r.err_path);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 3; ++rank) {
    std::istringstream is(slurp(dir / ("p." + std::to_string(rank))));
    pid_t shell = 0, child = 0;
    is >> shell >> child;
    ASSERT_TRUE(shell > 0 && child > 0);
    pids.insert(pids.end(), {shell, child});
  }
  const pid_t group = pgid_of(pids[0]);  // the launch's process group (--no-mpi) or rank 0's (mpirun)
  ASSERT_GT(group, 0);
  const auto killed_at = Clock::now();
  ASSERT_EQ(::kill(pids[2], SIGKILL), 0);  // rank 1's shell
  Finished f = wait_cli(r, 15);
  const double after_kill = std::chrono::duration<double>(Clock::now() - killed_at).count();
  EXPECT_FALSE(f.timed_out);
  EXPECT_EQ(f.code, 128 + SIGKILL) << f.err;
  EXPECT_LT(after_kill, 10.0);
  EXPECT_NE(f.err.find("tessera: error: launch: rank 1 (host "), std::string::npos) << f.err;
  EXPECT_NE(f.err.find(") was killed by signal 9"), std::string::npos) << f.err;
  for (pid_t pid : pids) EXPECT_FALSE(alive(pid)) << "pid " << pid << " outlived the launcher";
  errno = 0;
  EXPECT_EQ(::killpg(group, 0), -1);
  EXPECT_EQ(errno, ESRCH) << "process group " << group << " still has members";
}

TEST_P(LaunchCli, ForwardsSigintToTheRanks) {
  Running r = start_cli(
      dir, args({"--nproc-per-node", "2", "--", "sh", "-c",
                 "trap 'echo $RANK > \"$0/int.$RANK\"; exit 0' INT; sleep 60 & touch \"$0/ready.$RANK\"; "
                 "wait",
                 dir.path()}));
  ASSERT_TRUE(wait_for_files({dir / "ready.0", dir / "ready.1"})) << slurp(r.err_path);
  ASSERT_EQ(::kill(r.pid, SIGINT), 0);
  Finished f = wait_cli(r, 15);
  // Every rank took the signal and exited 0 (as tessera serve does after draining): the job ended cleanly.
  EXPECT_EQ(f.code, 0) << f.err;
  EXPECT_LT(f.seconds, 10.0);
  EXPECT_TRUE(fs::exists(dir / "int.0")) << f.err;
  EXPECT_TRUE(fs::exists(dir / "int.1")) << f.err;
}

TEST_P(LaunchCli, RanksEndedByAForwardedSignalGiveItsCode) {
  Running r = start_cli(dir, args({"--nproc-per-node", "2", "--", "sh", "-c",
                                   "touch \"$0/ready.$RANK\"; exec sleep 60", dir.path()}));
  ASSERT_TRUE(wait_for_files({dir / "ready.0", dir / "ready.1"})) << slurp(r.err_path);
  ASSERT_EQ(::kill(r.pid, SIGINT), 0);
  Finished f = wait_cli(r, 15);
  EXPECT_EQ(f.code, 128 + SIGINT) << f.err;
  EXPECT_LT(f.seconds, 10.0);
}

TEST_P(LaunchCli, TooManyRanksForTheDevicesStartsNothing) {
  ScratchDir root;
  root.touch("dev/accel0");
  root.touch("proc/driver/nvidia/gpus/0000:01:00.0/information");
  const std::vector<std::string> env = {"TESSERA_LAUNCH_SYSROOT=" + root.path(), "CUDA_VISIBLE_DEVICES"};
  const std::string marker = dir / "started";
  Finished f = run_cli(
      dir, args({"--nproc-per-node", "4", "--", "sh", "-c", "touch \"$0\"", marker, "--device", "tpu"}), env);
  EXPECT_EQ(f.code, 1);
  EXPECT_EQ(f.err, "tessera: error: launch: --nproc-per-node 4 but only 1 TPU chip found (/dev/accel*)\n");
  EXPECT_EQ(f.out, "");
  f = run_cli(dir, args({"--nproc-per-node", "2", "--", "sh", "-c", "touch \"$0\"", marker, "--device=cuda"}),
              env);
  EXPECT_EQ(f.code, 1);
  EXPECT_EQ(f.err,
            "tessera: error: launch: --nproc-per-node 2 but only 1 GPU found (/proc/driver/nvidia/gpus/*)\n");
  EXPECT_FALSE(fs::exists(marker));
}

INSTANTIATE_TEST_SUITE_P(Paths, LaunchCli, ::testing::Bool(), [](const ::testing::TestParamInfo<bool>& p) {
  return p.param ? "mpirun" : "no_mpi";
});

TEST(LaunchCli, BadFlagsAreOneLineErrors) {
  ScratchDir dir;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nproc-per-node", "0", "--", "true"}, "launch: --nproc-per-node must be at least 1 (got 0)"},
      {{"--nproc-per-node", "two", "--", "true"}, "launch: --nproc-per-node 'two' is not an integer"},
      {{"--no-mpi", "--nnodes", "2", "--node-rank", "2", "--master-addr", "h", "--", "true"},
       "launch: --node-rank 2 is out of range for --nnodes 2 (0..1)"},
      {{"--master-port", "70000", "--", "true"}, "launch: --master-port 70000 is not a TCP port (1..65535)"},
      {{"--signal-grace", "-1", "--", "true"}, "launch: --signal-grace must be 0..86400 seconds (got -1)"},
      {{"--signal-grace", "soon", "--", "true"}, "launch: --signal-grace 'soon' is not an integer"},
      {{"--nproc-per-node", "2"},
       "launch: no command given (usage: tessera launch --nproc-per-node N -- COMMAND [ARGS...])"},
      {{"--", "/nonexistent/tool"}, "launch: cannot run '/nonexistent/tool': not an executable file"},
      {{"--no-mpi", "--", "no-such-command-xyz"},
       "launch: cannot run 'no-such-command-xyz': not found on PATH"},
      {{"echo", "--unknown"}, "launch: unexpected argument '--unknown' (put the command after --)"},
  };
  for (const auto& [args, message] : cases) {
    Finished f = run_cli(dir, args);
    EXPECT_EQ(f.code, 1) << message;
    EXPECT_EQ(f.err, "tessera: error: " + message + "\n");
    EXPECT_EQ(f.out, "");
  }
  // Without mpirun on PATH the mpirun path says so (and --no-mpi is the way out).
  Finished f = run_cli(dir, {"--", "/bin/true"}, {"PATH=" + dir.path()});
  EXPECT_EQ(f.code, 1);
  EXPECT_NE(f.err.find("tessera: error: launch: mpirun not found on PATH"), std::string::npos) << f.err;
  EXPECT_EQ(run_cli(dir, {"--no-mpi", "--", "/bin/true"}, {"PATH=" + dir.path()}).code, 0);
}

}  // namespace
