// Kernel packages with XLA FFI handlers (a pjrt implementation's "ffi_library" / "ffi_handlers"): the example
// package examples/kernels/rms_norm_ffi (its handler library built by CMake into <build>/kernels/rms_norm_ffi
// against jaxlib's XLA FFI headers) on xla-cpu against the built-in lowering, its place in the program text
// and the compile-cache key, and the one-line errors and notes of packages that do not fit. Without the
// headers (TESSERA_HAVE_FFI_EXAMPLE unset) the tests that need the built library skip, saying why.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "backends/pjrt/stablehlo_emitter.h"
#include "cli_util.h"
#include "golden_util.h"
#include "kernel_test_util.h"
#include "kernels/package.h"
#include "models/architecture.h"
#include "pjrt_test_util.h"
#include "tessera/model.h"

using namespace tessera;
namespace fs = std::filesystem;
using namespace tessera::kernel_test;
using tessera::testing::run_cli;

namespace {

#if TESSERA_HAVE_FFI_EXAMPLE
const bool kHaveFfi = true;
const std::string kFfiPackage = std::string(TESSERA_EXAMPLE_KERNELS_DIR) + "/rms_norm_ffi";
const std::string kNoSymLibrary = TESSERA_KERNEL_TEST_FFI_NOSYM;
const std::string kApi3Library = TESSERA_KERNEL_TEST_FFI_API3;
const std::string kWrongLibrary = TESSERA_KERNEL_TEST_FFI_WRONG;
#else
const bool kHaveFfi = false;
const std::string kFfiPackage, kNoSymLibrary, kApi3Library, kWrongLibrary;
#endif

#define REQUIRE_FFI_EXAMPLE()                                                                            \
  if (!kHaveFfi)                                                                                         \
  GTEST_SKIP() << "example FFI package not built: no XLA FFI headers (scripts/setup.sh installs jaxlib " \
                  "into .venv; or -DTESSERA_XLA_FFI_INCLUDE_DIR=...), then reconfigure"

const std::string kMlir =
    std::string(TESSERA_SOURCE_DIR) + "/examples/kernels/rms_norm_ffi/rms_norm_ffi.mlir";
const kernels::KernelTarget kXlaCpu{"pjrt", "cpu", 0, "Host"};

// A package folder `tag`: the example's StableHLO and `library` (copied, if it exists; else a file of that
// text) under the manifest's pjrt implementation for `platform` with `handlers` (JSON array text).
std::string make_ffi_package(const std::string& tag, const std::string& platform, const std::string& library,
                             const std::string& handlers, bool write_library = true,
                             const std::string& target = "") {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("tessera_ffi_" + std::to_string(::getpid()) + "_" + tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  // The example's StableHLO, its custom calls renamed to `target` if given.
  std::ifstream in(kMlir);
  std::string mlir((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t at = 0; !target.empty() && (at = mlir.find("@tessera_rms_norm_f32(", at)) != std::string::npos;)
    mlir.replace(at + 1, std::string("tessera_rms_norm_f32").size(), target);
  std::ofstream(dir / "rms_norm_ffi.mlir") << mlir;
  if (write_library) {
    if (!library.empty() && fs::exists(library))
      fs::copy_file(library, dir / "libkernel.so");
    else
      std::ofstream(dir / "libkernel.so") << "not a shared library\n";
  }
  std::ofstream(dir / "kernel.json")
      << R"({"name": "ffi_)" << tag << R"(", "abi_version": 1, "op": "rms_norm", "implementations": [)"
      << R"({"backend": "pjrt", "platform": ")" << platform
      << R"(", "stablehlo": "rms_norm_ffi.mlir", "ffi_library": "libkernel.so", )"
      << R"("ffi_handlers": )" << handlers << "}]}";
  return dir.string();
}

const std::string kHandlers = R"([{"target": "tessera_rms_norm_f32", "symbol": "tessera_rms_norm_f32_ffi"}])";

graph::Graph tiny_graph(const std::string& model) {
  return kernel_test::tiny_graph(
      model, graph::ShapeKey{.phase = graph::Phase::Prefill, .batch = 1, .seq = 16, .cache_len = 24});
}

// On xla-cpu: the handler registered through PJRT_FFI_Extension runs every rms_norm; greedy ids identical and
// logits within 1e-5 of the built-in lowering; ModelInfo::kernels names the handler library.
TEST(KernelFfi, XlaCpuSameIdsAndLogitsAsBuiltIn) {
  REQUIRE_XLA_CPU();
  REQUIRE_FFI_EXAMPLE();
  auto j = golden::load_model_golden("qwen3_tied");
  CausalLM builtin = load_xla({});
  std::unique_ptr<CausalLM> ffi;
  const auto notes = notes_of([&] {
    ffi = std::make_unique<CausalLM>(load_xla({kFfiPackage}));
    double worst = 0;
    for (const auto& c : j["forward"]) {
      const auto ids = to32(c["input_ids"]);
      const auto a = builtin.forward(ids), b = ffi->forward(ids);
      const double d = golden::max_abs_diff(b, a).max_abs;
      worst = std::max(worst, d);
      EXPECT_LE(d, 1e-5);
      EXPECT_LE(golden::max_abs_diff(b, golden::matrix(c["logits"]).data).max_abs, 1e-4);
    }
    std::printf(
        "xla-cpu, rms_norm_ffi: FFI handler rms_norm vs built-in lowering, max |logit diff| %.3g over %zu "
        "prompts\n",
        worst, j["forward"].size());
    const auto prompt = to32(j["forward"][0]["input_ids"]);
    EXPECT_EQ(builtin.generate({prompt}, {}, greedy(8)).sequences,
              ffi->generate({prompt}, {}, greedy(8)).sequences);
  });
  for (const auto& n : notes) EXPECT_EQ(n.find("no function of this signature"), std::string::npos) << n;
  ASSERT_EQ(ffi->info().kernels.size(), 1u);
  EXPECT_EQ(ffi->info().kernels[0].package, "rms_norm_ffi");
  EXPECT_EQ(ffi->info().kernels[0].backend, "pjrt");
  EXPECT_EQ(ffi->info().kernels[0].implementation, kFfiPackage + "/librms_norm_ffi.so");
  EXPECT_GT(ffi->info().kernels[0].nodes, 0);
  // Loading it again registers nothing new (the same handler for the same target is accepted).
  EXPECT_NO_THROW(load_xla({kFfiPackage}));
}

std::string handlers(const std::string& target) {
  return R"([{"target": ")" + target + R"(", "symbol": "tessera_rms_norm_f32_ffi"}])";
}

// The registered handler is what runs: a wrong build of it (output scaled by 1.5, under its own target name)
// changes the logits.
TEST(KernelFfi, XlaCpuWrongHandlerChangesTheLogits) {
  REQUIRE_XLA_CPU();
  REQUIRE_FFI_EXAMPLE();
  const std::string dir = make_ffi_package("wrong", "cpu", kWrongLibrary, handlers("test_rms_norm_wrong"),
                                           true, "test_rms_norm_wrong");
  auto j = golden::load_model_golden("qwen3_tied");
  const auto ids = to32(j["forward"][0]["input_ids"]);
  const auto good = load_xla({kFfiPackage}).forward(ids), bad = load_xla({dir}).forward(ids);
  EXPECT_GT(golden::max_abs_diff(bad, good).max_abs, 1e-2);
}

// On xla-cpu: a target registered twice with different handlers, and a handler the plugin drops (built with
// the headers' own FFI API version 0.3, newer than the plugin's runtime), are one-line errors naming the
// package, library and symbol.
TEST(KernelFfi, XlaCpuRefusedRegistrationsAreOneLineErrors) {
  REQUIRE_XLA_CPU();
  REQUIRE_FFI_EXAMPLE();
  const std::string twice =
      make_ffi_package("twice", "cpu", kWrongLibrary, handlers("tessera_rms_norm_f32"), true, "");
  load_xla({kFfiPackage});  // registers tessera_rms_norm_f32 with the example's handler
  std::string e = error_of([&] { load_xla({twice}); });
  EXPECT_TRUE(one_line(e)) << e;
  EXPECT_EQ(
      e,
      "kernel package ffi_twice (" + twice +
          "/libkernel.so, tessera_rms_norm_f32_ffi): FFI target tessera_rms_norm_f32 is already registered "
          "for Host with another handler (another package's library)");
  const std::string api3 = make_ffi_package("api3", "cpu", kApi3Library, handlers("test_rms_norm_api3"), true,
                                            "test_rms_norm_api3");
  e = error_of([&] { load_xla({api3}); });
  EXPECT_TRUE(one_line(e)) << e;
  EXPECT_NE(e.find("kernel package ffi_api3 (" + api3 +
                   "/libkernel.so, tessera_rms_norm_f32_ffi): the plugin has no handler for FFI target "
                   "test_rms_norm_api3 after registering it"),
            std::string::npos)
      << e;
  // The dropped registration is not remembered: the same target with a handler the plugin takes loads.
  const std::string retry = make_ffi_package("retry", "cpu", kFfiPackage + "/librms_norm_ffi.so",
                                             handlers("test_rms_norm_api3"), true, "test_rms_norm_api3");
  EXPECT_NO_THROW(load_xla({retry}));
}

// The command on xla-cpu: --json names the package and its handler library; the logits are the built-in
// command's within 1e-5; a broken package is one line on stderr.
TEST(KernelFfi, XlaCpuCliForwardJson) {
  REQUIRE_XLA_CPU();
  REQUIRE_FFI_EXAMPLE();
  const std::string cmd = "forward '" + golden::model_path("qwen3_tied") +
                          "' --input-ids 1,2,3,4,5,6,7 --json --device xla-cpu --dtype "
                          "float32";
  const auto plain = run_cli(cmd), with = run_cli(cmd + " --kernels '" + kFfiPackage + "'");
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(with.code, 0) << with.err;
  const auto jp = nlohmann::json::parse(plain.out), jw = nlohmann::json::parse(with.out);
  ASSERT_EQ(jw["kernels"].size(), 1u) << with.out.substr(0, 200);
  EXPECT_EQ(jw["kernels"][0]["package"], "rms_norm_ffi");
  EXPECT_EQ(jw["kernels"][0]["backend"], "pjrt");
  EXPECT_EQ(jw["kernels"][0]["implementation"], kFfiPackage + "/librms_norm_ffi.so");
  EXPECT_LE(
      golden::max_abs_diff(golden::matrix(jw["logits"]).data, golden::matrix(jp["logits"]).data).max_abs,
      1e-5);
  EXPECT_EQ(with.err.find("no function of this signature"), std::string::npos) << with.err;
  const std::string nosym = make_ffi_package("cli_nosym", "cpu", kNoSymLibrary, kHandlers);
  const auto bad = run_cli(cmd + " --kernels '" + nosym + "'");
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(bad.err, "tessera: error: kernel package ffi_cli_nosym: " + nosym +
                         "/libkernel.so: missing symbol tessera_rms_norm_f32_ffi (the XLA FFI handler "
                         "implementations[0].ffi_handlers names for target tessera_rms_norm_f32)\n");
}

// The program calls the handler through the package's functions, and its identity line (so the compile-cache
// key) changes with the library's bytes.
TEST(KernelFfi, ProgramCallsTheHandlerAndTheKeyHashesTheLibrary) {
  REQUIRE_FFI_EXAMPLE();
  const graph::Graph g = tiny_graph("qwen3_tied");
  std::vector<KernelInUse> uses;
  auto set = std::make_shared<kernels::KernelSet>(kernels::select_kernels({kFfiPackage}, kXlaCpu, g, uses));
  ASSERT_EQ(uses.size(), 1u);
  ASSERT_EQ(set->packages[0]->ffi_handlers.size(), 1u);
  EXPECT_EQ(set->packages[0]->ffi_handlers[0].target, "tessera_rms_norm_f32");
  EXPECT_NE(set->packages[0]->ffi_handlers[0].fn, nullptr);
  pjrt::KernelSplice splice = pjrt::make_kernel_splice(set, "cpu");
  const pjrt::StablehloProgram p = pjrt::lower_to_stablehlo(g, &splice);
  int norms = 0;
  for (const auto& n : g.nodes) norms += n.op == graph::Op::RmsNorm;
  EXPECT_EQ(p.spliced, norms);
  EXPECT_NE(p.text.find("stablehlo.custom_call @tessera_rms_norm_f32(%x, %w) {api_version = 4 : i32"),
            std::string::npos);
  EXPECT_NE(p.text.find("// kernel packages: rms_norm_ffi " + set->packages[0]->hash), std::string::npos);

  // The same package with one byte appended to its library: another hash.
  const std::string a = make_ffi_package("hash", "cpu", kFfiPackage + "/librms_norm_ffi.so", kHandlers);
  const std::string before = kernels::read_package(a).hash;
  EXPECT_EQ(kernels::read_package(a).hash, before);
  std::ofstream(a + "/libkernel.so", std::ios::app) << '\0';
  EXPECT_NE(kernels::read_package(a).hash, before);
}

// Broken FFI packages: one line naming the file and the field or symbol.
TEST(KernelFfi, BrokenPackagesAreOneLineErrors) {
  const graph::Graph g = tiny_graph("qwen3_tied");
  auto error = [&](const std::string& dir) {
    std::vector<KernelInUse> uses;
    const std::string e = error_of([&] { kernels::select_kernels({dir}, kXlaCpu, g, uses); });
    EXPECT_TRUE(one_line(e)) << e;
    return e;
  };
  // No library file.
  const std::string missing = make_ffi_package("missing", "cpu", "", kHandlers, /*write_library=*/false);
  EXPECT_EQ(error(missing), "kernel package " + missing +
                                "/kernel.json: field 'implementations[0].ffi_library' "
                                "'libkernel.so': no such file in " +
                                missing);
  // A file that is not a shared library.
  const std::string junk = make_ffi_package("junk", "cpu", "", kHandlers);
  std::string e = error(junk);
  EXPECT_NE(e.find("kernel package ffi_junk: " + junk + "/libkernel.so: dlopen failed: "), std::string::npos)
      << e;
  // Handlers without a library, and a library without handlers.
  const std::string no_lib = make_ffi_package("no_lib", "cpu", "", kHandlers);
  {
    std::ofstream(no_lib + "/kernel.json")
        << R"({"name": "ffi_no_lib", "abi_version": 1, "op": "rms_norm", "implementations": [{"backend": "pjrt", )"
        << R"("platform": "cpu", "stablehlo": "rms_norm_ffi.mlir", "ffi_handlers": )" << kHandlers << "}]}";
  }
  EXPECT_NE(error(no_lib).find("field 'implementations[0].ffi_library' is missing"), std::string::npos);
  const std::string empty = make_ffi_package("empty", "cpu", "", "[]");
  EXPECT_NE(error(empty).find("field 'implementations[0].ffi_handlers' must list at least one handler"),
            std::string::npos);
  const std::string extra =
      make_ffi_package("extra", "cpu", "", R"([{"target": "t", "symbol": "s", "x": 1}])");
  EXPECT_NE(error(extra).find("field 'implementations[0].ffi_handlers[0].x' is not a manifest field"),
            std::string::npos);
  // A handler the StableHLO never calls.
  const std::string uncalled = make_ffi_package(
      "uncalled", "cpu", "", R"([{"target": "other_target", "symbol": "tessera_rms_norm_f32_ffi"}])");
  EXPECT_EQ(error(uncalled), "kernel package ffi_uncalled: " + uncalled +
                                 "/rms_norm_ffi.mlir has no custom call to @other_target "
                                 "(implementations[0].ffi_handlers names it)");
  if (!kHaveFfi)
    GTEST_SKIP() << "missing-symbol case not run: no example FFI library built (no XLA FFI headers)";
  // A library that does not export the symbol the manifest names.
  const std::string nosym = make_ffi_package("nosym", "cpu", kNoSymLibrary, kHandlers);
  EXPECT_EQ(error(nosym), "kernel package ffi_nosym: " + nosym +
                              "/libkernel.so: missing symbol tessera_rms_norm_f32_ffi (the XLA FFI handler "
                              "implementations[0].ffi_handlers names for target tessera_rms_norm_f32)");
}

// Packages that do not apply here are skipped with one note: another platform, or a plugin without the FFI
// extension.
TEST(KernelFfi, WrongPlatformOrNoExtensionIsSkippedWithANote) {
  const graph::Graph g = tiny_graph("qwen3_tied");
  const std::string cuda = make_ffi_package("cuda", "cuda", "", kHandlers);
  std::vector<KernelInUse> uses;
  auto notes = notes_of([&] { kernels::select_kernels({cuda}, kXlaCpu, g, uses); });
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(one_line(notes[0])) << notes[0];
  EXPECT_NE(notes[0].find("ffi_cuda (" + cuda +
                          ") skipped: implementations[0].platform is cuda, this pjrt backend "
                          "is cpu"),
            std::string::npos)
      << notes[0];
  EXPECT_TRUE(uses.empty());
  // A cpu plugin without PJRT_FFI_Extension (ffi_platform ""): skipped before the library is opened (the
  // library here is not one).
  const std::string cpu = make_ffi_package("noext", "cpu", "", kHandlers);
  notes = notes_of([&] { kernels::select_kernels({cpu}, {"pjrt", "cpu", 0, ""}, g, uses); });
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("skipped: its XLA FFI handlers (implementations[0].ffi_library) need the plugin's "
                          "PJRT_FFI_Extension, which this plugin lacks"),
            std::string::npos)
      << notes[0];
  EXPECT_TRUE(uses.empty());
}

}  // namespace
