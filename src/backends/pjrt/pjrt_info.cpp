// Where PJRT plugins are looked for (no pjrt_c_api.h needed), and the device probe for `tessera devices`.
#include "backends/pjrt/pjrt_info.h"

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "tessera/error.h"

namespace tessera::pjrt {
namespace {

namespace fs = std::filesystem;

bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Python site-packages roots to search, most specific first: the caller's, then the system's.
std::vector<std::string> site_package_patterns(const PjrtSettings& s) {
  std::vector<std::string> roots = s.site_packages;
  roots.push_back("/usr/local/lib/python3*/dist-packages");
  roots.push_back("/usr/lib/python3/dist-packages");
  return roots;
}

// First existing file matching `pattern` (glob), or "".
std::string first_match(const std::string& pattern) {
  glob_t g{};
  std::string found;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc && found.empty(); ++i)
      if (is_file(g.gl_pathv[i])) found = g.gl_pathv[i];
  }
  ::globfree(&g);
  return found;
}

// Tries the caller's path for the device (`field` names it in messages when it has no origin), then each
// site-packages root joined with each relative pattern.
std::optional<std::string> search(const PluginPath& given, const char* field, const PjrtSettings& s,
                                  const std::vector<std::string>& rel_patterns,
                                  std::vector<std::string>& looked) {
  if (!given.path.empty()) {
    if (is_file(given.path)) return given.path;
    looked.push_back((given.origin.empty() ? std::string(field) : given.origin) + "=" + given.path +
                     " (not a file)");
  }
  for (const auto& root : site_package_patterns(s)) {
    for (const auto& rel : rel_patterns) {
      const std::string pattern = root + "/" + rel;
      std::string hit = first_match(pattern);
      if (!hit.empty()) return hit;
      looked.push_back(pattern);
    }
  }
  return std::nullopt;
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// Entries of `dir` (under `sysroot`) named `prefix` followed by digits.
int count_numbered(const std::string& sysroot, const std::string& dir, const std::string& prefix) {
  std::error_code ec;
  int n = 0;
  for (fs::directory_iterator it(sysroot + dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) == 0 && all_digits(name.substr(prefix.size()))) ++n;
  }
  return n;
}

// Some /sys/bus/pci/devices/*/vendor reads 0x1ae0 (Google).
bool google_pci_device(const std::string& sysroot) {
  std::error_code ec;
  for (fs::directory_iterator it(sysroot + "/sys/bus/pci/devices", ec), end; !ec && it != end;
       it.increment(ec)) {
    std::ifstream f(it->path() / "vendor");
    std::string vendor;
    if (f >> vendor && (vendor == "0x1ae0" || vendor == "0x1AE0")) return true;
  }
  return false;
}

constexpr const char* kTpuLooked = "/dev/accel*, /dev/vfio/[0-9]* with a PCI device of vendor 0x1ae0";

std::string tpu_absent(const std::string& plugin) {
  return "plugin found (" + plugin + "), no TPU chip (looked for " + kTpuLooked + "); not started";
}

}  // namespace

TpuChips find_tpu_chips(const std::string& sysroot) {
  if (int n = count_numbered(sysroot, "/dev", "accel")) return {n, "/dev/accel*"};
  if (int n = count_numbered(sysroot, "/dev/vfio", "")) {
    if (google_pci_device(sysroot)) return {n, "/dev/vfio/[0-9]*"};
  }
  return {0, kTpuLooked};
}
TpuChips find_tpu_chips() { return find_tpu_chips(default_pjrt_settings().sysroot); }

std::vector<std::string> venv_site_packages_near(const std::string& program) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::path dir = fs::path(program).parent_path();
  for (int up = 0; up <= 2 && !dir.empty(); ++up) {
    if (fs::is_directory(dir / ".venv" / "lib", ec))
      out.push_back((dir / ".venv/lib/python3*/site-packages").string());
    if (dir == dir.parent_path()) break;
    dir = dir.parent_path();
  }
  return out;
}

PjrtSettings program_pjrt_settings() {
  PjrtSettings s;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) s.site_packages = venv_site_packages_near(self.string());
  return s;
}

namespace {
std::mutex& defaults_mutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::optional<PjrtSettings>& defaults() {
  static auto* d = new std::optional<PjrtSettings>;
  return *d;
}
}  // namespace

void set_default_pjrt_settings(std::optional<PjrtSettings> settings) {
  std::lock_guard<std::mutex> lock(defaults_mutex());
  defaults() = std::move(settings);
}

PjrtSettings default_pjrt_settings() {
  {
    std::lock_guard<std::mutex> lock(defaults_mutex());
    if (defaults()) return *defaults();
  }
  return program_pjrt_settings();
}

std::optional<std::string> locate_plugin(const std::string& device, std::vector<std::string>& looked,
                                         const PjrtSettings& s) {
  if (device.rfind("pjrt:", 0) == 0) {
    const std::string path = device.substr(5);
    if (is_file(path)) return path;
    looked.push_back(path);
    return std::nullopt;
  }
  if (device == "xla-cpu")
    return search(s.xla_cpu_plugin, "xla_cpu_plugin", s, {"xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so"},
                  looked);
  if (device == "tpu") return search(s.tpu_plugin, "tpu_plugin", s, {"libtpu/libtpu.so"}, looked);
  if (device == "cuda")
    return search(s.cuda_plugin, "cuda_plugin", s,
                  {"jax_plugins/xla_cuda13/xla_cuda_plugin.so", "jax_plugins/xla_cuda12/xla_cuda_plugin.so",
                   "xla_plugins/*cuda*/*.so"},
                  looked);
  fail("unknown PJRT device '", device, "' (expected xla-cpu, tpu, cuda or pjrt:/path/to/plugin.so)");
}
std::optional<std::string> locate_plugin(const std::string& device, std::vector<std::string>& looked) {
  return locate_plugin(device, looked, default_pjrt_settings());
}

std::optional<std::string> find_in_site_packages(const std::vector<std::string>& rel_patterns,
                                                 std::vector<std::string>& looked) {
  return search(PluginPath{}, "", default_pjrt_settings(), rel_patterns, looked);
}

std::string find_plugin(const std::string& device, const PjrtSettings& settings) {
  std::vector<std::string> looked;
  if (auto p = locate_plugin(device, looked, settings)) {
    if (device == "tpu" && find_tpu_chips(settings.sysroot).count == 0)
      fail("--device tpu: libtpu ", tpu_absent(*p),
           " (libtpu without a chip waits minutes for a cloud metadata server); to try it anyway: --device "
           "pjrt:",
           *p);
    return *p;
  }
  std::ostringstream os;
  for (size_t i = 0; i < looked.size(); ++i) os << (i ? ", " : "") << looked[i];
  const char* hint = device == "xla-cpu" ? " (pip install xla-cpu-pjrt, or run scripts/setup.sh)"
                     : device == "tpu"   ? " (pip install libtpu, or set TPU_LIBRARY_PATH)"
                     : device == "cuda"  ? " (pip install jax-cuda13-pjrt or xla-cuda13-pjrt)"
                                         : "";
  fail("no PJRT plugin for device '", device, "'", hint, "; looked in: ", os.str());
}
std::string find_plugin(const std::string& device) { return find_plugin(device, default_pjrt_settings()); }

bool built_with_pjrt() { return TESSERA_HAVE_PJRT != 0; }

std::vector<Probe> probe_platforms(const PjrtSettings& settings) {
  std::vector<Probe> out;
  for (const char* dev : {"tpu", "cuda", "xla-cpu"}) {
    Probe p{dev, std::nullopt, ""};
    std::vector<std::string> looked;
    const std::optional<std::string> path = locate_plugin(dev, looked, settings);
    if (!path) {
      p.error = "plugin not installed";
    } else if (p.device == "tpu" && find_tpu_chips(settings.sysroot).count == 0) {
      p.error = tpu_absent(*path);
    } else {
      try {
        p.info = describe_platform(dev, 0, settings);
      } catch (const Error& e) {
        p.error = e.what();
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}
std::vector<Probe> probe_platforms() { return probe_platforms(default_pjrt_settings()); }

PlatformInfo describe_platform(const std::string& device, int device_count) {
  return describe_platform(device, device_count, default_pjrt_settings());
}

}  // namespace tessera::pjrt
