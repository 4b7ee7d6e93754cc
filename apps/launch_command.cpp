// `tessera launch --nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P] [--no-mpi]
// [--all-output] -- COMMAND [ARGS...]`: see src/runtime/launch.h.
#include "launch_command.h"

#include <cstdio>
#include <memory>
#include <new>

#include "cli_env.h"
#include "launch.h"
#include "tessera/error.h"

namespace {

struct LaunchFlags {
  std::string nproc = "1", nnodes = "1", node_rank = "0", master_port = "29500", signal_grace = "35",
              master_addr, hostfile, status_file;
  bool no_mpi = false, all_output = false, rank_shim = false;
  std::vector<std::string> command;
};

// Integer flags are parsed here, not by CLI11, so that a bad value is one line like every other launch error.
int parse_int(const std::string& flag, const std::string& text) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v < -(1LL << 31) || v > (1LL << 31) - 1)
    tessera::fail("launch: ", flag, " '", text, "' is not an integer");
  return static_cast<int>(v);
}

tessera::launch::Options to_options(const LaunchFlags& f, const CLI::App& cmd) {
  for (const std::string& extra : cmd.remaining())
    if (extra != "--") tessera::fail("launch: unexpected argument '", extra, "' (put the command after --)");
  tessera::launch::Options o;
  o.nproc_per_node = parse_int("--nproc-per-node", f.nproc);
  o.nnodes = parse_int("--nnodes", f.nnodes);
  o.node_rank = parse_int("--node-rank", f.node_rank);
  o.master_port = parse_int("--master-port", f.master_port);
  o.signal_grace_s = parse_int("--signal-grace", f.signal_grace);
  o.master_addr = f.master_addr;
  o.hostfile = f.hostfile;
  o.use_mpi = !f.no_mpi;
  o.all_output = f.all_output;
  o.status_file = f.status_file;
  o.command = f.command;
  tessera::cli::apply_launch_environment(o);  // $TESSERA_LAUNCH_SYSROOT, $CUDA_VISIBLE_DEVICES
  return o;
}

const char* kFooter =
    R"(Each rank starts with RANK, WORLD_SIZE (nproc-per-node x nnodes), LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT and TESSERA_LAUNCHED=1 set. When COMMAND has --device tpu, each rank also gets one TPU chip
(TPU_VISIBLE_CHIPS, TPU_CHIPS_PER_PROCESS_BOUNDS, TPU_PROCESS_BOUNDS, TPU_PROCESS_ADDRESSES, TPU_PROCESS_PORT,
CLOUD_TPU_TASK_ID); with --device cuda, CUDA_VISIBLE_DEVICES=<its GPU>. The rank count is checked against the
chips/GPUs present before anything starts. Ranks start through mpirun (the native backend's collectives are MPI)
unless --no-mpi. If a rank fails, launch names it (rank, host, exit code or signal), stops the others (SIGTERM and
SIGCONT, SIGKILL 2 s later) and exits with that rank's code (128+signal for a signal). Only rank 0's stdout is
shown unless --all-output; stderr is always shown. A rank that stops answering (stopped, hung, host gone) makes the
others' collectives fail after TESSERA_COLLECTIVE_TIMEOUT seconds (default 60; 0 = wait forever).

Example: tessera launch --nproc-per-node 2 -- tessera generate MODEL --tp-size 2 --prompt "Hello")";

}  // namespace

void add_launch_command(CLI::App& app) {
  auto f = std::make_shared<LaunchFlags>();  // owned by the callback, alive as long as the app
  CLI::App* cmd = app.add_subcommand(
      "launch", "Start one process per rank with RANK, WORLD_SIZE, ... set (like torchrun)");
  cmd->add_option("--nproc-per-node", f->nproc, "Ranks on this node (default 1)")->type_name("N");
  cmd->add_option("--nnodes", f->nnodes, "Nodes (default 1)")->type_name("M");
  cmd->add_option("--node-rank", f->node_rank, "This node's index, 0..M-1 (default 0; --no-mpi only)")
      ->type_name("R");
  cmd->add_option("--master-addr", f->master_addr,
                  "Address of node 0 (default 127.0.0.1; required with --nnodes > 1)")
      ->type_name("ADDR");
  cmd->add_option("--master-port", f->master_port, "Port on node 0 for the ranks' rendezvous (default 29500)")
      ->type_name("PORT");
  cmd->add_option("--hostfile", f->hostfile,
                  "mpirun hostfile for --nnodes > 1 (lines 'HOST slots=N'); run on node 0")
      ->type_name("FILE");
  cmd->add_option("--signal-grace", f->signal_grace,
                  "Seconds the ranks get to exit after a SIGINT/SIGTERM passed on to them, before SIGKILL "
                  "(default 35: tessera serve drains its requests first; a second signal kills at once)")
      ->type_name("S");
  cmd->add_flag("--no-mpi", f->no_mpi,
                "Fork/exec the ranks directly instead of through mpirun (non-MPI commands)");
  cmd->add_flag("--all-output", f->all_output,
                "Show every rank's stdout, each line prefixed '[rank N] ' (stderr lines too)");
  cmd->add_flag("--rank-shim", f->rank_shim, "")->group("");        // internal: what mpirun runs in each rank
  cmd->add_option("--status-file", f->status_file, "")->group("");  // internal: where a shim reports its rank
  cmd->add_option("command", f->command, "The command every rank runs, after --")
      ->type_name("COMMAND [ARGS...]");
  cmd->prefix_command();
  cmd->footer(kFooter);
  cmd->callback([f, cmd] {  // tessera::Error reaches main()'s one catch site
    const tessera::launch::Options o = to_options(*f, *cmd);
    const int code = f->rank_shim ? tessera::launch::exec_rank_shim(o) : tessera::launch::run(o);
    if (code != 0) throw CLI::RuntimeError(code);  // the failed rank's exit code
  });
}
