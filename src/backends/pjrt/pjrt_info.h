// Plain descriptions of PJRT plugins and devices, and where plugins are looked for. No dependency on
// pjrt_c_api.h, so the CLI and tests can include it in every build.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::pjrt {

struct DeviceInfo {
  int id = 0;
  std::string kind;         // e.g. "cpu", "TPU v5 lite", "NVIDIA H100 80GB HBM3"
  std::string description;  // the plugin's short string, e.g. "CpuDevice(id=0)"
};

struct PlatformInfo {
  std::string device;              // what was asked for: "xla-cpu", "tpu", "cuda", "pjrt:/path.so"
  std::string plugin_path;         // the library that was loaded
  std::string api_version;         // the plugin's PJRT C API version, e.g. "0.81"
  std::string header_api_version;  // the version of pjrt_c_api.h this build was compiled against
  std::string platform_name;       // "cpu", "cuda", "tpu"
  std::string platform_version;
  std::vector<std::pair<std::string, std::string>> attributes;  // PJRT_Plugin_Attributes, as text
  std::vector<DeviceInfo> devices;                              // addressable devices
};

// A plugin library named by the caller for one device, tried before the search.
struct PluginPath {
  std::string path;    // "" = none
  std::string origin;  // where it came from, for messages (e.g. "$TPU_LIBRARY_PATH"); "" = "<device>_plugin"
};

// Everything the PJRT code would otherwise take from the environment: the program fills it (the tessera
// command from its environment, apps/cli_env.h cli::pjrt_settings_from_env()); the library reads no
// environment variable and bakes no path.
struct PjrtSettings {
  PluginPath xla_cpu_plugin, tpu_plugin, cuda_plugin;
  // Python site-packages directories (glob patterns allowed, e.g. "/venv/lib/python3*/site-packages")
  // searched in order for pip-installed plugins, before the system's /usr/local/lib/python3*/dist-packages
  // and /usr/lib/python3/dist-packages.
  std::vector<std::string> site_packages;
  std::string dump_dir;          // each compiled StableHLO module is written to <dir>/<key>.mlir; "" = off
  double start_timeout_s = 120;  // a plugin's initialisation and client creation (see Plugin::bounded)
  bool plugin_log = false;       // the plugins' own INFO logs on stderr, and a note per plugin loaded
  std::string sysroot;           // test-only: a directory standing in for / when TPU chips are counted
};

// "<dir>/.venv/lib/python3*/site-packages" for `program`'s directory and up to two directories above it,
// where such a .venv exists.
std::vector<std::string> venv_site_packages_near(const std::string& program);

// What a program that sets nothing gets: PjrtSettings{} plus the site-packages of a .venv beside the running
// program (venv_site_packages_near of /proc/self/exe), so that a program built in the source tree
// (build/tessera_tests, build/bench_*) finds the plugins scripts/setup.sh installs there. Reads no
// environment variable; no path is compiled in.
PjrtSettings program_pjrt_settings();

// The settings used where a caller passes none (PjrtOptions::settings, BackendRequest::pjrt and the
// functions below). Process-wide; thread-safe. Until a program sets them (or after it sets nullopt) they
// are program_pjrt_settings(). The tessera command sets them from its environment
// (cli::use_environment_plugin_settings).
void set_default_pjrt_settings(std::optional<PjrtSettings> settings);
PjrtSettings default_pjrt_settings();

// The first file matching one of `rel_patterns` (globs relative to a site-packages root) under the roots of
// default_pjrt_settings() (its site_packages, then the system's), or nullopt with every pattern tried
// appended to `looked`. Other run-time libraries pip installs (llguidance) are found the way the plugins are.
std::optional<std::string> find_in_site_packages(const std::vector<std::string>& rel_patterns,
                                                 std::vector<std::string>& looked);

// The plugin library for a device name: "xla-cpu", "tpu", "cuda" or "pjrt:/path/to/plugin.so".
// Throws Error listing every place it looked when none is found, or naming the unknown device. "tpu" on a
// machine with no TPU chip (find_tpu_chips) is an Error too, so libtpu is never started there; naming the
// library as pjrt:/path/libtpu.so is the way to try it anyway.
std::string find_plugin(const std::string& device, const PjrtSettings& settings);
std::string find_plugin(const std::string& device);  // with default_pjrt_settings()
// Same lookup without throwing: the path, or nullopt with `looked` filled with the places tried.
std::optional<std::string> locate_plugin(const std::string& device, std::vector<std::string>& looked,
                                         const PjrtSettings& settings);
std::optional<std::string> locate_plugin(const std::string& device, std::vector<std::string>& looked);

// TPU chips on this machine, counted without starting libtpu (which, with no chip, spends minutes retrying a
// cloud metadata server): /dev/accel<N> (v2-v4), else /dev/vfio/<N> when some PCI device has Google's vendor
// id 0x1ae0 (v5e, v5p, v6e; /dev/vfio alone also serves other passed-through hardware). Looked up under
// `sysroot` when it is not empty (test-only: a directory standing in for /). `tessera launch` uses the same.
struct TpuChips {
  int count = 0;
  std::string where;  // where they were found ("/dev/accel*"), or everything looked at when none
};
TpuChips find_tpu_chips(const std::string& sysroot);
TpuChips find_tpu_chips();  // under default_pjrt_settings().sysroot

// True when this build was compiled with pjrt_c_api.h (TESSERA_HAVE_PJRT=1).
bool built_with_pjrt();

// Loads the plugin for `device`, creates a client (with `device_count` devices where the plugin takes
// that option; 0 = the plugin's default) and describes it. Throws Error on any failure.
PlatformInfo describe_platform(const std::string& device, int device_count, const PjrtSettings& settings);
PlatformInfo describe_platform(const std::string& device, int device_count = 0);

// For `tessera devices`: each of "xla-cpu", "cuda", "tpu" whose plugin is installed, described, or the
// error that describing it gave. Devices whose plugin is absent are listed with `info` empty and
// `error` = "plugin not installed"; tpu with no chip is "plugin found (PATH), no TPU chip (...); not
// started".
struct Probe {
  std::string device;
  std::optional<PlatformInfo> info;
  std::string error;
};
std::vector<Probe> probe_platforms(const PjrtSettings& settings);
std::vector<Probe> probe_platforms();

}  // namespace tessera::pjrt
