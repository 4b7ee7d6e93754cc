#include "cli_env.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "backends/cpu/kernels.h"
#include "backends/cpu/thread_pool.h"
#include "backends/pjrt/pjrt_info.h"
#include "distributed/mpi_communicator.h"
#include "io/hf_cache.h"
#include "io/io_util.h"
#include "tessera/constraint.h"
#include "tessera/error.h"

namespace tessera::cli {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// A non-negative decimal integer of at most `max`, or -1.
long long non_negative(const char* v, long long max) {
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || n < 0 || n > max) return -1;
  return n;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

}  // namespace

double collective_timeout_setting(double seconds) {
  if (seconds >= 0) return seconds;
  const char* v = std::getenv("TESSERA_COLLECTIVE_TIMEOUT");
  if (!v) return distributed::kDefaultCollectiveTimeoutS;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !std::isfinite(s) || s < 0 || s > 1e9)
    fail("TESSERA_COLLECTIVE_TIMEOUT='", v, "' is not a number of seconds >= 0 (0 = no deadline)");
  return s;
}

void apply_environment(LoadOptions& opt) {
  if (opt.compile_cache_dir.empty())
    if (const char* v = env("TESSERA_COMPILE_CACHE")) opt.compile_cache_dir = v;
  if (opt.max_recompiles < 0)
    if (const char* v = env("TESSERA_MAX_RECOMPILES")) {
      const long long n = non_negative(v, 1000000);
      if (n < 0) fail("TESSERA_MAX_RECOMPILES='", v, "' is not a non-negative integer");
      opt.max_recompiles = static_cast<int>(n);
    }
  if (const char* v = env("TESSERA_VERBOSE"); v && std::string_view(v) == "1") opt.verbose_compiles = true;
  opt.collective_timeout_s = collective_timeout_setting(opt.collective_timeout_s);
  // The launcher's description of the job (tessera launch sets WORLD_SIZE and RANK; mpirun
  // OMPI_COMM_WORLD_*).
  DistributedConfig& d = opt.distributed;
  if (const char* v = env("WORLD_SIZE")) d.world_size = std::max(1, std::atoi(v));
  if (const char* v = env("OMPI_COMM_WORLD_SIZE"); v && std::atoi(v) > 1) d.mpi = true;
  if (const char* v = env("OMPI_COMM_WORLD_RANK"))
    d.rank = std::atoi(v);
  else if (const char* r = env("RANK"))
    d.rank = std::atoi(r);
}

double plugin_start_timeout_s() {
  const char* v = env("TESSERA_PJRT_START_TIMEOUT");
  if (!v) return 120;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(s > 0) || s > 1e6)
    fail("TESSERA_PJRT_START_TIMEOUT='", v, "' is not a number of seconds > 0");
  return s;
}

pjrt::PjrtSettings pjrt_settings_from_env() {
  pjrt::PjrtSettings s;
  auto plugin = [](const char* var) {
    const char* v = std::getenv(var);
    return pjrt::PluginPath{v ? v : "", std::string("$") + var};
  };
  s.xla_cpu_plugin = plugin("TESSERA_XLA_CPU_PLUGIN");
  s.tpu_plugin = plugin("TPU_LIBRARY_PATH");
  s.cuda_plugin = plugin("TESSERA_XLA_CUDA_PLUGIN");
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) s.site_packages = pjrt::venv_site_packages_near(self.string());
  if (const char* v = env("VIRTUAL_ENV"))
    s.site_packages.push_back(std::string(v) + "/lib/python3*/site-packages");
  if (const char* v = env("HOME"))
    s.site_packages.push_back(std::string(v) + "/.local/lib/python3*/site-packages");
  if (const char* v = std::getenv("TESSERA_PJRT_DUMP")) s.dump_dir = v;
  s.start_timeout_s = plugin_start_timeout_s();
  s.plugin_log = std::getenv("TESSERA_PJRT_LOG") != nullptr;
  if (const char* v = std::getenv("TESSERA_LAUNCH_SYSROOT")) s.sysroot = v;
  return s;
}

void use_environment_plugin_settings() {
  static bool done = false;
  if (done) return;
  pjrt::set_default_pjrt_settings(pjrt_settings_from_env());
  done = true;
}

void use_environment_constraint_settings() {
  use_environment_plugin_settings();
  if (const char* v = env("TESSERA_LLGUIDANCE")) ConstraintLibrary::set_library(std::string(v));
}

bool apply_cpu_environment(int threads) {
  if (const char* v = env("TESSERA_ISA")) {
    const cpu::Isa best = cpu::best_isa();
    cpu::Isa want = cpu::Isa::Scalar;
    try {
      want = cpu::parse_isa(v);
    } catch (const Error& e) {
      fail("TESSERA_ISA: ", e.what());
    }
    if (!cpu::isa_supported(want))
      fail("TESSERA_ISA=", v, " is not supported by this CPU (best: ", cpu::isa_name(best), ")");
    cpu::set_isa(want);
  }
  if (threads <= 0) {
    const char* v = env("TESSERA_NUM_THREADS");
    if (!v) return false;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 1 || n > 1024)
      fail("TESSERA_NUM_THREADS='", v, "' is not a thread count in [1, 1024]");
    threads = static_cast<int>(n);
  }
  cpu::ThreadPool::instance().set_num_threads(threads);
  return true;
}

std::vector<std::string> hf_hub_dirs_from_env() {
  std::vector<std::string> dirs;
  if (const char* v = env("HF_HUB_CACHE")) dirs.push_back(v);
  if (const char* v = env("HF_HOME")) dirs.push_back(io::path_join(v, "hub"));
  if (const char* v = env("HOME")) dirs.push_back(io::path_join(v, ".cache/huggingface/hub"));
  return dirs;
}

void use_environment_hub_dirs() { io::set_hf_hub_dirs(hf_hub_dirs_from_env()); }

void apply_launch_environment(launch::Options& o) {
  if (const char* v = std::getenv("TESSERA_LAUNCH_SYSROOT")) o.sysroot = v;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) o.cuda_visible_devices = v;
}

std::string cli_words(const std::string& library_message) {
  std::string s = library_message;
  if (s.rfind("tp_size ", 0) == 0) s = "--tp-size " + s.substr(8);
  if (s.rfind("buckets: ", 0) == 0) s = "--buckets: " + s.substr(9);
  // "device_map 'xla-cpu'" -> "--device xla-cpu"
  for (size_t at = s.find("device_map '"); at != std::string::npos; at = s.find("device_map '", at)) {
    const size_t end = s.find('\'', at + 12);
    if (end == std::string::npos) break;
    s.replace(at, end + 1 - at, "--device " + s.substr(at + 12, end - at - 12));
  }
  replace_all(s, " (DistributedConfig::mpi)", "");
  replace_all(s, "; give token ids instead of text", "; pass token ids with --input-ids instead");
  replace_all(s, "configured to look for it in (set_hf_hub_dirs)",
              "configured to look for it in (HF_HUB_CACHE, HF_HOME and HOME are all unset)");
  replace_all(s, "(collective_timeout_s sets the deadline, 0 = none)",
              "(--collective-timeout SECONDS or TESSERA_COLLECTIVE_TIMEOUT sets the deadline, 0 = none)");
  return s;
}

}  // namespace tessera::cli
