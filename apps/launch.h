// `tessera launch`: one process per rank with RANK / WORLD_SIZE / LOCAL_RANK / ... set before it starts (the
// analogue of torchrun and of the Hugging Face TPU guide's launch.py), the device checks made before anything
// starts, and the supervision contract: a failing rank stops the others and its exit code becomes the
// launcher's, within seconds, leaving no process behind. See ARCHITECTURE.md ("Launcher").
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::launch {

struct Options {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;  // empty: 127.0.0.1 (required when nnodes > 1)
  int master_port = 29500;
  bool use_mpi = true;      // false: --no-mpi, fork/exec the ranks directly
  bool all_output = false;  // every rank's stdout, lines prefixed "[rank N] " (stderr too)
  // After a SIGINT/SIGTERM/SIGHUP/SIGQUIT passed on to the ranks, how long they get to exit before SIGKILL (a
  // second signal kills at once). A server drains its requests first (tessera serve --shutdown-timeout, 30 s
  // by default). A failed rank's peers get 2 s.
  int signal_grace_s = 35;
  std::string hostfile;  // mpirun --hostfile, for --nnodes > 1 on the mpirun path
  // Internal (mpirun path): the file where each rank's shim appends one line when its rank fails, so that the
  // launcher can name the rank, host and status (mpirun's own exit code says none of it). Empty: not used.
  std::string status_file;
  std::vector<std::string> command;
  // Test-only: a directory standing in for / when TPU chips and GPUs are counted ("" = /). The tessera
  // command fills it from $TESSERA_LAUNCH_SYSROOT.
  std::string sysroot;
  // The GPUs the ranks may use, as CUDA_VISIBLE_DEVICES lists them (the tessera command passes its own
  // $CUDA_VISIBLE_DEVICES); unset: all that are found, 0..N-1.
  std::optional<std::string> cuda_visible_devices;
};

// Checks the flags (counts, node rank, port, a command, the multi-node requirements). Throws tessera::Error
// with a one-line message starting "launch: ".
void validate(const Options& o);

// The value of `--device X` / `--device=X` in the command (the last one), or "cpu" when there is none.
std::string command_device(const std::vector<std::string>& command);

enum class DeviceKind { kNone, kTpu, kCuda };

// What the ranks of one node get: which accelerator, and the per-rank values derived from it.
struct DevicePlan {
  DeviceKind kind = DeviceKind::kNone;
  std::string device;                 // the command's --device value
  int count = 0;                      // chips / GPUs found (0 for kNone)
  std::string found_in;               // where they were counted, e.g. "/dev/accel*"
  std::string tpu_process_bounds;     // TPU_PROCESS_BOUNDS for nproc_per_node one-chip processes
  std::vector<std::string> cuda_ids;  // CUDA_VISIBLE_DEVICES value per local rank
};

// Counts the devices the command's --device asks for on this machine and checks nproc_per_node against
// them; throws tessera::Error (one line, "launch: ...") when they do not fit. cpu, xla-cpu, pjrt:... accept
// any count; auto means tpu if TPU chips are present, else cuda if GPUs are, else cpu. Device files are
// looked up under Options::sysroot when it is set (test-only: fakes /dev and /proc).
DevicePlan plan_devices(const Options& o);

struct RankInfo {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
};

// The variables a rank gets: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// TESSERA_LAUNCHED=1, and the device's (libtpu's TPU_* / CLOUD_TPU_TASK_ID, or CUDA_VISIBLE_DEVICES).
std::vector<std::pair<std::string, std::string>> rank_environment(const Options& o, const DevicePlan& plan,
                                                                  const RankInfo& r);

// The mpirun command line that starts the ranks through `self launch --rank-shim ...`.
std::vector<std::string> mpirun_command(const Options& o, const std::string& mpirun, const std::string& self);

// Runs the whole launch: validate, device check, start, supervise. Returns the launcher's exit code (0; the
// first failing rank's code, 128+signal for a signal; 128+signal when the launcher itself was interrupted).
// Errors before anything starts throw tessera::Error; messages during the run go to stderr.
int run(const Options& o);

// Inside mpirun: reads OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}, sets the rank's environment and
// runs the command. With a status_file it stays the command's parent (forwarding signals; the command dies
// with it), and when the command fails appends "rank=R host=H status=S" to the file (or, where the file is
// not on this host, prints one line naming them), then exits as the command did. Without one it execs the
// command. Returns the exit code to use.
int exec_rank_shim(const Options& o);

// A line of the status file: the failed rank, its host and its wait(2) status.
struct RankFailure {
  int rank = -1;
  std::string host;
  int status = 0;
};
std::optional<RankFailure> parse_status_line(const std::string& line);
// "rank 1 (host h) exited with code 7" / "... was killed by signal 9 (Killed)".
std::string describe_failure(const RankFailure& f);

}  // namespace tessera::launch
