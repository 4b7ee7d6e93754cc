#include "cli_env.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "backends/pjrt/pjrt_info.h"
#include "distributed/mpi_communicator.h"
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
  // The launcher's description of the job (tessera launch sets WORLD_SIZE and RANK; mpirun OMPI_COMM_WORLD_*).
  DistributedConfig& d = opt.distributed;
  if (const char* v = env("WORLD_SIZE")) d.world_size = std::max(1, std::atoi(v));
  if (const char* v = env("OMPI_COMM_WORLD_SIZE"); v && std::atoi(v) > 1) d.mpi = true;
  if (const char* v = env("OMPI_COMM_WORLD_RANK"))
    d.rank = std::atoi(v);
  else if (const char* r = env("RANK"))
    d.rank = std::atoi(r);
}

void use_environment_plugin_settings() {
  static bool done = false;
  if (done) return;
  pjrt::set_default_pjrt_settings(pjrt::pjrt_settings_from_env());
  done = true;
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
  replace_all(s, "(collective_timeout_s sets the deadline, 0 = none)",
              "(--collective-timeout SECONDS or TESSERA_COLLECTIVE_TIMEOUT sets the deadline, 0 = none)");
  return s;
}

}  // namespace tessera::cli
