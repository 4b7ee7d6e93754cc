// Header/plugin version skew, tested with fake plugins. This one file is two things:
//  - built with TESSERA_FAKE_PJRT_VARIANT (cmake/parts/pjrt.cmake makes three tiny shared libraries from it):
//    a fake PJRT plugin whose API version and function-table size are chosen per variant;
//  - built into tessera_tests: the tests that load those fakes through the real loader.
// Variants: "old"   = API 0.40 with a table that ends before PJRT_Client_Create (an older plugin);
//           "newer" = API 0.(header + 5) with a table larger than ours, whose Client_Create fails
//                     (a newer plugin; checks that its error is converted and destroyed);
//           "major" = API 1.x (incompatible);
//           "blocking" = current API whose PJRT_Client_Create never returns (libtpu without a TPU chip,
//                        retrying a cloud metadata server). When $TESSERA_FAKE_PJRT_MARKER names a file,
//                        loading and client creation each append a line to it, so tests can tell it was never
//                        started.
#if defined(TESSERA_FAKE_PJRT_VARIANT)

#include <pjrt_c_api.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>

struct PJRT_Error {
  std::string message;
  PJRT_Error_Code code;
};

namespace {

int live_errors = 0;

void error_destroy(PJRT_Error_Destroy_Args* a) {
  if (!a->error) return;
  delete a->error;
  --live_errors;
}
void error_message(PJRT_Error_Message_Args* a) {
  a->message = a->error->message.data();
  a->message_size = a->error->message.size();
}
PJRT_Error* error_get_code(PJRT_Error_GetCode_Args* a) {
  a->code = a->error->code;
  return nullptr;
}
PJRT_Error* initialize(PJRT_Plugin_Initialize_Args*) { return nullptr; }
PJRT_Error* attributes(PJRT_Plugin_Attributes_Args* a) {
  a->attributes = nullptr;
  a->num_attributes = 0;
  return nullptr;
}
void mark(const char* what) {
  if (const char* path = std::getenv("TESSERA_FAKE_PJRT_MARKER")) {
    if (FILE* f = std::fopen(path, "a")) {
      std::fprintf(f, "%s\n", what);
      std::fclose(f);
    }
  }
}

PJRT_Error* client_create(PJRT_Client_Create_Args*) {
  mark("client_create");
#if TESSERA_FAKE_PJRT_VARIANT == 4
  for (;;) ::sleep(1000);  // never returns
#endif
  ++live_errors;
  return new PJRT_Error{"fake plugin has no devices", PJRT_Error_Code_UNAVAILABLE};
}

PJRT_Api make_api() {
  PJRT_Api api{};
  api.pjrt_api_version.struct_size = PJRT_Api_Version_STRUCT_SIZE;
  api.PJRT_Error_Destroy = error_destroy;
  api.PJRT_Error_Message = error_message;
  api.PJRT_Error_GetCode = error_get_code;
  api.PJRT_Plugin_Initialize = initialize;
  api.PJRT_Plugin_Attributes = attributes;
  api.PJRT_Client_Create = client_create;
#if TESSERA_FAKE_PJRT_VARIANT == 1  // old
  api.struct_size = offsetof(PJRT_Api, PJRT_Client_Create);
  api.pjrt_api_version.major_version = 0;
  api.pjrt_api_version.minor_version = 40;
#elif TESSERA_FAKE_PJRT_VARIANT == 2  // newer: claims a longer table than this header knows
  api.struct_size = sizeof(PJRT_Api) + 8 * sizeof(void*);
  api.pjrt_api_version.major_version = PJRT_API_MAJOR;
  api.pjrt_api_version.minor_version = PJRT_API_MINOR + 5;
#elif TESSERA_FAKE_PJRT_VARIANT == 4  // blocking
  api.struct_size = sizeof(PJRT_Api);
  api.pjrt_api_version.major_version = PJRT_API_MAJOR;
  api.pjrt_api_version.minor_version = PJRT_API_MINOR;
#else                                 // major
  api.struct_size = sizeof(PJRT_Api);
  api.pjrt_api_version.major_version = PJRT_API_MAJOR + 1;
  api.pjrt_api_version.minor_version = 0;
#endif
  return api;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int fake_pjrt_live_errors() { return live_errors; }

extern "C" __attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi() {
  mark("loaded");
  static const PJRT_Api api = make_api();
  return &api;
}

#else  // the tests

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "backends/pjrt/pjrt_backend.h"
#include "cli_env.h"
#include "golden_util.h"
#include "tessera/error.h"

namespace {

using namespace tessera;

#ifdef TESSERA_FAKE_PJRT_OLD
#define REQUIRE_FAKES() \
  if (!pjrt::built_with_pjrt()) GTEST_SKIP() << "built without PJRT (no pjrt_c_api.h)"

std::string error_of(const std::string& device) {
  try {
    backends::make_pjrt_backend(device);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(PjrtVersionSkew, OlderPluginLackingAFunctionIsAnError) {
  REQUIRE_FAKES();
  const std::string err = error_of(std::string("pjrt:") + TESSERA_FAKE_PJRT_OLD);
  EXPECT_TRUE(contains(err, "(PJRT API 0.40) lacks PJRT_Client_Create")) << err;
}

TEST(PjrtVersionSkew, NewerPluginIsAcceptedAndItsErrorsAreConvertedAndDestroyed) {
  REQUIRE_FAKES();
  const std::string err = error_of(std::string("pjrt:") + TESSERA_FAKE_PJRT_NEWER);
  EXPECT_TRUE(contains(err, "PJRT_Client_Create failed (UNAVAILABLE): fake plugin has no devices")) << err;
  // The loader keeps the library open; look up the fake's counter of live PJRT_Error objects.
  void* h = ::dlopen(TESSERA_FAKE_PJRT_NEWER, RTLD_LOCAL | RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr);
  auto live = reinterpret_cast<int (*)()>(::dlsym(h, "fake_pjrt_live_errors"));
  ASSERT_NE(live, nullptr);
  EXPECT_EQ(live(), 0) << "a PJRT_Error was not destroyed";
  ::dlclose(h);
}

TEST(PjrtVersionSkew, OtherMajorVersionIsRefused) {
  REQUIRE_FAKES();
  const std::string err = error_of(std::string("pjrt:") + TESSERA_FAKE_PJRT_MAJOR);
  EXPECT_TRUE(contains(err, "incompatible")) << err;
}
#endif

// ---- Plugin start-up: libtpu is never started without a TPU chip, and any start-up is bounded ----
// The CLI runs in a child (the blocking plugin leaves a thread stuck inside it), under coreutils `timeout` so
// that a regression fails the test instead of hanging it.
#ifdef TESSERA_FAKE_PJRT_BLOCKING
namespace fs = std::filesystem;

struct CliRun {
  int code = -1;
  std::string out, err;
  double seconds = 0;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class PluginStartup : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!pjrt::built_with_pjrt()) GTEST_SKIP() << "built without PJRT (no pjrt_c_api.h)";
    std::string templ = ::testing::TempDir() + "tessera_startup_XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    fs::create_directories(dir_ + "/root/dev");
    marker_ = dir_ + "/started";
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  void add_tpu_chip() const { std::ofstream(dir_ + "/root/dev/accel0") << ""; }

  // `tessera ARGS` with the blocking fake as the tpu plugin, the fake sysroot, and a 1 s start-up bound.
  CliRun run(const std::string& args) const {
    const std::string cmd = "env TPU_LIBRARY_PATH=" + std::string(TESSERA_FAKE_PJRT_BLOCKING) +
                            " TESSERA_FAKE_PJRT_MARKER=" + marker_ + " TESSERA_LAUNCH_SYSROOT=" + dir_ +
                            "/root TESSERA_PJRT_START_TIMEOUT=1 timeout -s KILL 60 " + TESSERA_CLI_PATH +
                            " " + args + " </dev/null >" + dir_ + "/out 2>" + dir_ + "/err";
    const auto t0 = std::chrono::steady_clock::now();
    const int status = std::system(cmd.c_str());
    CliRun r;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(dir_ + "/out");
    r.err = slurp(dir_ + "/err");
    return r;
  }
  bool started() const { return fs::exists(marker_); }
  std::string started_log() const { return slurp(marker_); }

  std::string dir_, marker_;
};

TEST_F(PluginStartup, DevicesWithoutATpuChipListsLibtpuWithoutStartingIt) {
  CliRun r = run("devices");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_LT(r.seconds, 20.0);
  EXPECT_FALSE(started()) << started_log();
  EXPECT_TRUE(contains(r.out, "plugin found (" + std::string(TESSERA_FAKE_PJRT_BLOCKING) + "), no TPU chip"))
      << r.out;
  r = run("devices --json");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "no TPU chip")) << r.out;
  EXPECT_FALSE(started()) << started_log();
}

TEST_F(PluginStartup, AutoWithoutATpuChipRunsOnCpuWithoutStartingLibtpu) {
  CliRun r = run("generate " + golden::model_path("qwen3_tied") +
              " --device auto --input-ids 1,2 --max-new-tokens 2");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_LT(r.seconds, 20.0);
  EXPECT_FALSE(started()) << started_log();
  EXPECT_TRUE(contains(r.err, "tpu: plugin found, no TPU chip")) << r.err;
  EXPECT_TRUE(contains(r.err, "using cpu")) << r.err;
}

TEST_F(PluginStartup, ExplicitTpuWithoutAChipIsAnErrorThatNamesTheWayToTryAnyway) {
  CliRun r = run("generate " + golden::model_path("qwen3_tied") + " --device tpu --input-ids 1,2");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_FALSE(started()) << started_log();
  EXPECT_TRUE(contains(r.err, "tessera: error: --device tpu: libtpu plugin found")) << r.err;
  EXPECT_TRUE(contains(r.err, "no TPU chip")) << r.err;
  EXPECT_TRUE(contains(r.err, "to try it anyway: --device pjrt:" + std::string(TESSERA_FAKE_PJRT_BLOCKING)))
      << r.err;
}

TEST_F(PluginStartup, BlockingClientCreationFailsWithinTheBound) {
  const std::string plugin = TESSERA_FAKE_PJRT_BLOCKING;
  CliRun r =
      run("generate " + golden::model_path("qwen3_tied") + " --device pjrt:" + plugin + " --input-ids 1,2");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_LT(r.seconds, 15.0);  // 1 s bound, plus start-up and loading
  EXPECT_TRUE(contains(started_log(), "client_create")) << started_log();
  EXPECT_TRUE(contains(r.err, "PJRT plugin " + plugin + ": PJRT_Client_Create did not return within 1 s"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "cannot be used in this process")) << r.err;
}

TEST_F(PluginStartup, WithATpuChipDevicesStartsLibtpuAndBoundsIt) {
  add_tpu_chip();
  CliRun r = run("devices");
  EXPECT_EQ(r.code, 0) << r.err;  // the other devices are still listed
  EXPECT_LT(r.seconds, 20.0);
  EXPECT_TRUE(contains(started_log(), "client_create")) << started_log();
  EXPECT_TRUE(contains(r.out, "PJRT_Client_Create did not return within 1 s")) << r.out;
  EXPECT_TRUE(contains(r.out, "cpu")) << r.out;
}

TEST_F(PluginStartup, WithATpuChipAutoGivesUpOnAStuckLibtpuAndRunsOnCpu) {
  add_tpu_chip();
  CliRun r = run("generate " + golden::model_path("qwen3_tied") +
              " --device auto --input-ids 1,2 --max-new-tokens 2");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_LT(r.seconds, 20.0);
  EXPECT_TRUE(contains(started_log(), "client_create")) << started_log();
  EXPECT_TRUE(contains(r.err, "did not return within 1 s")) << r.err;
  EXPECT_TRUE(contains(r.err, "using cpu")) << r.err;
}

TEST(PluginStartupSetting, BadTimeoutIsAnErrorNamingTheVariable) {
  ::setenv("TESSERA_PJRT_START_TIMEOUT", "soon", 1);
  const std::string e = [] {
    try {
      cli::plugin_start_timeout_s();
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string("(no error)");
  }();
  ::unsetenv("TESSERA_PJRT_START_TIMEOUT");
  EXPECT_EQ(e, "TESSERA_PJRT_START_TIMEOUT='soon' is not a number of seconds > 0");
  EXPECT_EQ(cli::plugin_start_timeout_s(), 120);
}
#endif

}  // namespace

#endif
