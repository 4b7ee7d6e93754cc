// The backend registry (backends/registry.h): one table of backend kinds behind make_backend, "auto" and the
// device lists. Names are checked before anything is started; "auto" walks tpu, cuda, cpu and logs what it
// found (libtpu is never started without a chip; a plugin that fails to start is passed over); an explicit
// device that cannot start says which devices do have a backend here. Nothing here needs a plugin except the
// xla-cpu case, which is skipped without it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "backends/pjrt/pjrt_backend.h"
#include "backends/registry.h"
#include "pjrt_test_util.h"
#include "tessera/error.h"
#include "tessera/log.h"
#include "test_env_util.h"

using namespace tessera;
using backends::BackendRequest;
using pjrt::PjrtSettings;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string error_of(const BackendRequest& r) {
  try {
    backends::make_backend(r);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Captures what the library logs for one scope.
class LogCapture {
 public:
  LogCapture() {
    set_log_callback([this](LogLevel, const std::string& m) {
      std::lock_guard<std::mutex> lock(mu_);
      text_ += m + "\n";
    });
  }
  ~LogCapture() { set_log_callback(nullptr); }
  std::string text() {
    std::lock_guard<std::mutex> lock(mu_);
    return text_;
  }

 private:
  std::mutex mu_;
  std::string text_;
};

// Settings that find no plugin anywhere but where the test says (no site-packages but the system's, whose
// plugins, if any, the tests below check for first).
PjrtSettings isolated(const std::string& sysroot) {
  PjrtSettings s;
  s.site_packages = {"/nonexistent/site-packages"};
  s.sysroot = sysroot;
  return s;
}

using tessera::testing::TempDir;

TEST(BackendRegistry, KnownDeviceNames) {
  for (const char* d : {"cpu", "xla-cpu", "tpu", "cuda", "pjrt:/some/plugin.so", "auto"})
    EXPECT_TRUE(backends::is_known_device(d)) << d;
  for (const char* d : {"", "gpu0", "CPU", "pjrt:", "pjrt", "xla_cpu", "cuda:0"})
    EXPECT_FALSE(backends::is_known_device(d)) << d;
}

TEST(BackendRegistry, UnknownNamesAndTensorParallelMisuseAreErrors) {
  EXPECT_EQ(error_of({.device = "gpu0"}),
            "unknown device 'gpu0' (expected cpu, xla-cpu, tpu, cuda, pjrt:/path/to/plugin.so, auto)");
  EXPECT_TRUE(contains(error_of({.device = "auto", .replicas = 2}), "tp_size 2 with device_map 'auto'"));
  EXPECT_TRUE(contains(error_of({.device = "cpu", .replicas = 2}), "tensor parallelism runs on cpu, xla-cpu"));
  EXPECT_TRUE(contains(error_of({.device = "cpu", .replicas = 0}), "replicas = 0"));
}

TEST(BackendRegistry, CpuIsTheNativeBackend) {
  auto b = backends::make_backend({.device = "cpu"});
  EXPECT_EQ(b->name(), "cpu");
  EXPECT_FALSE(b->capabilities().prefers_buckets);
  EXPECT_FALSE(b->capabilities().counts_transfers);
}

TEST(BackendRegistry, ExplicitDeviceThatCannotStartListsWhatIsHere) {
  TempDir t;
  PjrtSettings s = isolated(t.path());
  std::vector<std::string> looked;
  if (pjrt::locate_plugin("xla-cpu", looked, s)) GTEST_SKIP() << "a system-wide xla-cpu plugin is installed";
  s.xla_cpu_plugin = {"/nonexistent/xla_cpu_pjrt.so", "$TESSERA_XLA_CPU_PLUGIN"};
  const std::string e = error_of({.device = "xla-cpu", .pjrt = s});
  EXPECT_TRUE(contains(e, "$TESSERA_XLA_CPU_PLUGIN=/nonexistent/xla_cpu_pjrt.so (not a file)")) << e;
  EXPECT_TRUE(contains(e, "(devices with a backend here: cpu)")) << e;
  // A pjrt:PATH that is not a plugin.
  const std::string fake = t.touch("fake.so", "not a shared library");
  const std::string p = error_of({.device = "pjrt:" + fake, .pjrt = s});
  EXPECT_TRUE(contains(p, "cannot load PJRT plugin")) << p;
}

TEST(BackendRegistry, AvailableDevicesFollowTheSettings) {
  TempDir t;
  PjrtSettings s = isolated(t.path());
  std::vector<std::string> looked;
  for (const char* d : {"xla-cpu", "tpu", "cuda"})
    if (pjrt::locate_plugin(d, looked, s)) GTEST_SKIP() << "a system-wide " << d << " plugin is installed";
  EXPECT_EQ(backends::available_devices(s), std::vector<std::string>{"cpu"});
  s.tpu_plugin = {t.touch("libtpu.so", "not a shared library"), ""};
  EXPECT_EQ(backends::available_devices(s), std::vector<std::string>{"cpu"}) << "a tpu plugin without a chip";
  if (!pjrt::built_with_pjrt()) return;
  t.touch("dev/accel0");
  EXPECT_EQ(backends::available_devices(s), (std::vector<std::string>{"cpu", "tpu"}));
}

TEST(BackendRegistry, AutoWalksTpuCudaCpuAndSaysWhatItFound) {
  TempDir t;
  PjrtSettings s = isolated(t.path());
  std::vector<std::string> looked;
  for (const char* d : {"tpu", "cuda"})
    if (pjrt::locate_plugin(d, looked, s)) GTEST_SKIP() << "a system-wide " << d << " plugin is installed";
  {
    LogCapture log;
    auto b = backends::make_backend({.device = "auto", .pjrt = s});
    EXPECT_EQ(b->name(), "cpu");
    if (pjrt::built_with_pjrt()) {
      EXPECT_EQ(log.text(), "device auto: tpu: no plugin; cuda: no plugin; using cpu (native backend)\n");
    }
  }
  if (!pjrt::built_with_pjrt()) return;
  // A tpu plugin without a chip is not started.
  s.tpu_plugin = {t.touch("libtpu.so", "not a shared library"), ""};
  {
    LogCapture log;
    EXPECT_EQ(backends::make_backend({.device = "auto", .pjrt = s})->name(), "cpu");
    EXPECT_TRUE(contains(log.text(), "tpu: plugin found, no TPU chip; cuda: no plugin; using cpu")) << log.text();
  }
  // With a chip it is tried; one that does not start is passed over, with its error.
  t.touch("dev/accel0");
  {
    LogCapture log;
    EXPECT_EQ(backends::make_backend({.device = "auto", .pjrt = s})->name(), "cpu");
    EXPECT_TRUE(contains(log.text(), "device auto: tpu: cannot load PJRT plugin " + t.path() + "/libtpu.so"))
        << log.text();
    EXPECT_TRUE(contains(log.text(), "using cpu (native backend)")) << log.text();
  }
}

TEST(BackendRegistry, XlaCpuReportsItsCapabilities) {
  REQUIRE_XLA_CPU();
  auto b = backends::make_backend({.device = "xla-cpu"});
  EXPECT_EQ(b->name(), "xla-cpu");
  const backends::Capabilities c = b->capabilities();
  EXPECT_TRUE(c.in_step_sampling);
  EXPECT_TRUE(c.prefers_buckets);
  EXPECT_TRUE(c.serializable);
  EXPECT_TRUE(c.op_by_op);
  EXPECT_TRUE(c.counts_transfers);
  EXPECT_EQ(c.replicas, 1);
  EXPECT_EQ(backends::make_backend({.device = "xla-cpu", .replicas = 2})->capabilities().replicas, 2);
  const auto here = backends::available_devices(pjrt::default_pjrt_settings());
  EXPECT_NE(std::find(here.begin(), here.end(), "xla-cpu"), here.end());
}

}  // namespace
