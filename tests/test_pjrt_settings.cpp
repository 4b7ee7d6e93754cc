// PjrtSettings (backends/pjrt/pjrt_info.h): what the PJRT code takes from its caller instead of the
// environment. The tessera command's cli::pjrt_settings_from_env() (apps/cli_env.h) fills it from the
// variables the CLI documents; the plugin search, the TPU chip count, the start-up bound and the module dumps
// follow the settings they are given, whatever the environment says, and a program that sets none gets
// program_pjrt_settings(), which reads no variable. Tests that start a plugin are skipped without xla-cpu.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "backends/pjrt/pjrt_backend.h"
#include "backends/pjrt/pjrt_info.h"
#include "cli_env.h"
#include "golden_util.h"
#include "io/weight_source.h"
#include "models/architecture.h"
#include "pjrt_test_util.h"
#include "tessera/error.h"
#include "test_env_util.h"

using namespace tessera;
namespace fs = std::filesystem;
using pjrt::PjrtSettings;

namespace {

using tessera::testing::ScopedEnv;
using tessera::testing::TempDir;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(PjrtSettings, FromEnvReadsTheDocumentedVariables) {
  ScopedEnv a("TESSERA_XLA_CPU_PLUGIN", "/x/cpu.so"), b("TPU_LIBRARY_PATH", "/x/libtpu.so"),
      c("TESSERA_XLA_CUDA_PLUGIN", std::nullopt), d("TESSERA_PJRT_DUMP", "/tmp/dumps"),
      e("TESSERA_PJRT_START_TIMEOUT", "7.5"), f("TESSERA_PJRT_LOG", "1"), g("TESSERA_LAUNCH_SYSROOT", "/fake"),
      h("VIRTUAL_ENV", "/venvs/one");
  const PjrtSettings s = cli::pjrt_settings_from_env();
  EXPECT_EQ(s.xla_cpu_plugin.path, "/x/cpu.so");
  EXPECT_EQ(s.xla_cpu_plugin.origin, "$TESSERA_XLA_CPU_PLUGIN");
  EXPECT_EQ(s.tpu_plugin.path, "/x/libtpu.so");
  EXPECT_EQ(s.tpu_plugin.origin, "$TPU_LIBRARY_PATH");
  EXPECT_EQ(s.cuda_plugin.path, "");
  EXPECT_EQ(s.dump_dir, "/tmp/dumps");
  EXPECT_EQ(s.start_timeout_s, 7.5);
  EXPECT_TRUE(s.plugin_log);
  EXPECT_EQ(s.sysroot, "/fake");
  EXPECT_NE(std::find(s.site_packages.begin(), s.site_packages.end(), "/venvs/one/lib/python3*/site-packages"),
            s.site_packages.end());
  // This test program lives in the build directory of a tree whose .venv (scripts/setup.sh) it finds.
  if (fs::is_directory(std::string(TESSERA_SOURCE_DIR) + "/.venv/lib")) {
    EXPECT_EQ(s.site_packages.at(0), std::string(TESSERA_SOURCE_DIR) + "/.venv/lib/python3*/site-packages");
  }

  ScopedEnv bad("TESSERA_PJRT_START_TIMEOUT", "-1");
  try {
    cli::pjrt_settings_from_env();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& err) {
    EXPECT_EQ(std::string(err.what()), "TESSERA_PJRT_START_TIMEOUT='-1' is not a number of seconds > 0");
  }
}

TEST(PjrtSettings, DefaultsWithoutTheEnvironment) {
  ScopedEnv e("TESSERA_PJRT_START_TIMEOUT", std::nullopt), f("TESSERA_PJRT_LOG", std::nullopt),
      d("TESSERA_PJRT_DUMP", std::nullopt);
  const PjrtSettings s = cli::pjrt_settings_from_env();
  EXPECT_EQ(s.start_timeout_s, 120);
  EXPECT_FALSE(s.plugin_log);
  EXPECT_EQ(s.dump_dir, "");
  const PjrtSettings none;  // what a caller gets who fills nothing in: no search path but the system's
  EXPECT_TRUE(none.site_packages.empty());
  EXPECT_EQ(none.start_timeout_s, 120);
}

TEST(PjrtSettings, VenvBesideTheProgramOrUpToTwoAbove) {
  TempDir t;
  ASSERT_FALSE(t.path().empty());
  t.touch("a/.venv/lib/python3.12/site-packages/x");
  fs::create_directories(t.path() + "/a/b/c/d");
  EXPECT_EQ(pjrt::venv_site_packages_near(t.path() + "/a/prog"),
            std::vector<std::string>{t.path() + "/a/.venv/lib/python3*/site-packages"});
  EXPECT_EQ(pjrt::venv_site_packages_near(t.path() + "/a/b/c/prog").size(), 1u);  // two above
  EXPECT_TRUE(pjrt::venv_site_packages_near(t.path() + "/a/b/c/d/prog").empty());  // three above: not looked at
}

TEST(PjrtSettings, PluginSearchFollowsTheSettingsNotTheEnvironment) {
  TempDir t;
  ASSERT_FALSE(t.path().empty());
  const std::string so = t.touch("site/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so");
  ScopedEnv env("TESSERA_XLA_CPU_PLUGIN", "/nonexistent/from_env.so");
  PjrtSettings s;
  s.site_packages = {t.path() + "/si*"};
  std::vector<std::string> looked;
  EXPECT_EQ(pjrt::locate_plugin("xla-cpu", looked, s), so);
  // A path given for the device comes first; one that is no file is reported under its origin.
  s.xla_cpu_plugin = {t.touch("mine.so"), ""};
  EXPECT_EQ(pjrt::locate_plugin("xla-cpu", looked, s), t.path() + "/mine.so");
  s.xla_cpu_plugin = {"/nonexistent/given.so", ""};
  s.site_packages = {t.path() + "/nothing-here"};
  looked.clear();
  EXPECT_EQ(pjrt::locate_plugin("xla-cpu", looked, s), std::nullopt);
  ASSERT_FALSE(looked.empty());
  EXPECT_EQ(looked[0], "xla_cpu_plugin=/nonexistent/given.so (not a file)");
  EXPECT_EQ(looked[1], t.path() + "/nothing-here/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so");
  s.xla_cpu_plugin.origin = "--plugin";
  looked.clear();
  pjrt::locate_plugin("xla-cpu", looked, s);
  EXPECT_EQ(looked[0], "--plugin=/nonexistent/given.so (not a file)");
  for (const auto& l : looked) EXPECT_FALSE(contains(l, "from_env")) << l;
  try {
    pjrt::find_plugin("xla-cpu", s);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "no PJRT plugin for device 'xla-cpu'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "--plugin=/nonexistent/given.so (not a file)")) << e.what();
  }
}

TEST(PjrtSettings, TpuChipsAreCountedUnderTheGivenSysroot) {
  TempDir t;
  ASSERT_FALSE(t.path().empty());
  EXPECT_EQ(pjrt::find_tpu_chips(t.path()).count, 0);
  t.touch("dev/accel0");
  t.touch("dev/accel1");
  t.touch("dev/accelerator");  // not a chip node
  const pjrt::TpuChips chips = pjrt::find_tpu_chips(t.path());
  EXPECT_EQ(chips.count, 2);
  EXPECT_EQ(chips.where, "/dev/accel*");
  // A plugin for tpu without a chip is never started: find_plugin says so.
  PjrtSettings s;
  s.tpu_plugin = {t.touch("libtpu.so"), ""};
  s.sysroot = t.path() + "/nothing";
  try {
    pjrt::find_plugin("tpu", s);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "no TPU chip")) << e.what();
  }
  s.sysroot = t.path();
  EXPECT_EQ(pjrt::find_plugin("tpu", s), t.path() + "/libtpu.so");
}

TEST(PjrtSettings, ProcessDefaultsAreUsedWhereNoneArePassed) {
  TempDir t;
  ASSERT_FALSE(t.path().empty());
  PjrtSettings s;
  s.xla_cpu_plugin = {t.touch("default.so"), ""};
  pjrt::set_default_pjrt_settings(s);
  std::vector<std::string> looked;
  const auto found = pjrt::locate_plugin("xla-cpu", looked);
  const PjrtSettings now = pjrt::default_pjrt_settings();
  pjrt::set_default_pjrt_settings(std::nullopt);  // back to the library's own, for the other tests
  EXPECT_EQ(found, t.path() + "/default.so");
  EXPECT_EQ(now.xla_cpu_plugin.path, t.path() + "/default.so");
  // With none set, the library's defaults read no environment variable: only the .venv beside the program.
  ScopedEnv env("TESSERA_PJRT_DUMP", "/from/env");
  env.set("TESSERA_XLA_CPU_PLUGIN", "/from/env/cpu.so");
  env.set("TESSERA_PJRT_START_TIMEOUT", "3");
  env.set("VIRTUAL_ENV", "/from/env/venv");
  const PjrtSettings library = pjrt::default_pjrt_settings();
  EXPECT_EQ(library.dump_dir, "");
  EXPECT_EQ(library.xla_cpu_plugin.path, "");
  EXPECT_EQ(library.start_timeout_s, 120);
  for (const auto& p : library.site_packages) EXPECT_FALSE(contains(p, "/from/env")) << p;
  std::error_code ec;
  const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  EXPECT_EQ(library.site_packages, pjrt::venv_site_packages_near(self));
  EXPECT_EQ(cli::pjrt_settings_from_env().dump_dir, "/from/env");  // the command's reading of the same
}

// A compiled step's module lands in dump_dir; a bad start-up bound is refused naming the setting.
TEST(PjrtSettings, DumpDirAndStartTimeoutReachTheBackend) {
  REQUIRE_XLA_CPU();
  TempDir t;
  ASSERT_FALSE(t.path().empty());
  PjrtSettings s = cli::pjrt_settings_from_env();
  s.dump_dir = t.path();
  backends::PjrtOptions o;
  o.settings = s;
  auto be = backends::make_pjrt_backend("xla-cpu", o);
  const std::string dir = golden::model_path("qwen3_tied");
  auto cj = golden::load_json(dir + "/config.json");
  const auto& arch = models::find_architecture(cj["architectures"][0].get<std::string>(), "qwen3_tied");
  const auto config = arch.parse_config(cj, "qwen3_tied");
  auto src = io::open_checkpoint(dir);
  backends::WeightMap weights;
  for (const auto& w : arch.weights(config)) weights.emplace(w.name, src->load(w.name, DType::F32));
  be->bind_weights(std::move(weights));
  be->compile(arch.build_graph(config, {.phase = graph::Phase::Decode, .batch = 1, .seq = 1, .cache_len = 8}));
  int modules = 0;
  for (const auto& entry : fs::directory_iterator(t.path()))
    if (entry.path().extension() == ".mlir") {
      ++modules;
      std::ifstream f(entry.path());
      std::string first;
      std::getline(f, first);
      EXPECT_TRUE(contains(first, "StableHLO emitted by tessera")) << first;
    }
  EXPECT_EQ(modules, 1);

  s.dump_dir.clear();
  s.start_timeout_s = 0;
  o.settings = s;
  try {
    backends::make_pjrt_backend("xla-cpu", o);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "start_timeout_s = 0")) << e.what();
  }
}

}  // namespace
