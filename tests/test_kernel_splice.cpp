// Kernel packages on PJRT devices: a package's StableHLO functions spliced into the emitted program
// (stablehlo_emitter.h KernelSplice). The example package (examples/kernels/rms_norm_stablehlo) on xla-cpu
// against the built-in lowering; a missing signature falls back with a note; a Pallas TPU kernel
// (stablehlo.custom_call @tpu_custom_call) is accepted for a tpu platform and refused on xla-cpu. libtpu is
// never started: the tpu cases run the package checks and the lowering only.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "backends/pjrt/stablehlo_emitter.h"
#include "error_util.h"
#include "golden_util.h"
#include "kernel_test_util.h"
#include "kernels/package.h"
#include "model_test_util.h"
#include "models/architecture.h"
#include "pjrt_test_util.h"
#include "tessera/log.h"
#include "tessera/model.h"

using namespace tessera;
namespace fs = std::filesystem;
using namespace tessera::kernel_test;

namespace {

const std::string kExample = std::string(TESSERA_SOURCE_DIR) + "/examples/kernels/rms_norm_stablehlo";

// A package folder: an rms_norm kernel.json with one pjrt implementation for `platform`, kernel.mlir `mlir`.
std::string make_package(const std::string& tag, const std::string& platform, const std::string& mlir) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("tessera_splice_" + std::to_string(::getpid()) + "_" + tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "kernel.json") << R"({"name": "splice_)" << tag
                                     << R"(", "abi_version": 1, "op": "rms_norm", "implementations": [)"
                                     << R"({"backend": "pjrt", "platform": ")" << platform
                                     << R"(", "stablehlo": "kernel.mlir"}]})";
  std::ofstream(dir / "kernel.mlir") << mlir;
  return dir.string();
}

// An rms_norm-shaped function whose body is a Pallas TPU kernel's custom call (what jax.export writes for a
// pallas_call lowered for tpu; the Mosaic payload is not real).
std::string tpu_mlir(const std::string& x, const std::string& w) {
  return "module @pallas {\n  func.func public @main(%arg0: " + x + ", %arg1: " + w + ") -> (" + x +
         " {jax.result_info = \"result\"}) {\n    %0 = stablehlo.custom_call @tpu_custom_call(%arg0, %arg1) "
         "{backend_config = \"{\\\"custom_call_config\\\": {\\\"body\\\": \\\"TUxJUgA=\\\"}}\", "
         "kernel_name = \"rms_norm\"} : (" +
         x + ", " + w + ") -> " + x + "\n    return %0 : " + x + "\n  }\n}\n";
}

const graph::ShapeKey kPrefill16{.phase = graph::Phase::Prefill, .batch = 1, .seq = 16, .cache_len = 24};

// The emitted program calls the package's functions for every rms_norm node and carries its identity (so
// the compile-cache key, which hashes the program text, changes with the package).
TEST(KernelSplice, ProgramCallsThePackageFunctions) {
  const graph::Graph g = tiny_graph("qwen3_tied", kPrefill16);
  std::vector<KernelInUse> uses;
  auto set =
      std::make_shared<kernels::KernelSet>(kernels::select_kernels({kExample}, {"pjrt", "cpu", 0}, g, uses));
  ASSERT_EQ(uses.size(), 1u);
  EXPECT_EQ(uses[0].backend, "pjrt");
  pjrt::KernelSplice splice = pjrt::make_kernel_splice(set, "cpu");
  const pjrt::StablehloProgram with = pjrt::lower_to_stablehlo(g, &splice);
  const pjrt::StablehloProgram without = pjrt::lower_to_stablehlo(g);
  int norms = 0;
  for (const auto& n : g.nodes) norms += n.op == graph::Op::RmsNorm;
  EXPECT_EQ(with.spliced, norms);
  EXPECT_TRUE(with.kernel_misses.empty());
  EXPECT_NE(with.text.find("\"func.call\"(%"), std::string::npos);
  EXPECT_NE(with.text.find("func.func private @k0_rms_norm_16x64_64("), std::string::npos);
  EXPECT_NE(with.text.find("// kernel packages: rms_norm_stablehlo " + set->packages[0]->hash),
            std::string::npos);
  EXPECT_EQ(without.text.find("func.call"), std::string::npos);
  EXPECT_EQ(without.spliced, 0);
}

// The committed example packages: hand-written StableHLO, and the Pallas kernel exported by
// tools/export_kernel.py (its cpu file: interpret mode; its tpu file is skipped on xla-cpu).
class SplicedPackage : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

// On xla-cpu: greedy ids identical and logits within 1e-5 of the built-in lowering.
TEST_P(SplicedPackage, XlaCpuSameIdsAndLogitsAsBuiltIn) {
  REQUIRE_XLA_CPU();
  const std::string dir = std::string(TESSERA_SOURCE_DIR) + "/examples/kernels/" + GetParam().first;
  auto j = golden::load_model_golden("qwen3_tied");
  static CausalLM builtin = load_xla({});  // one built-in model for every package: xla-cpu compiles dominate
  std::vector<std::string> notes;
  std::unique_ptr<CausalLM> spliced;
  notes = notes_of([&] {
    spliced = std::make_unique<CausalLM>(load_xla({dir}));
    double worst = 0;
    for (const auto& c : j["forward"]) {
      const auto ids = to32(c["input_ids"]);
      const auto a = builtin.forward(ids), b = spliced->forward(ids);
      const double d = golden::max_abs_diff(b, a).max_abs;
      worst = std::max(worst, d);
      EXPECT_LE(d, 1e-5);
      EXPECT_LE(golden::max_abs_diff(b, golden::matrix(c["logits"]).data).max_abs, 1e-4);
    }
    std::printf(
        "xla-cpu, %s: spliced rms_norm vs built-in lowering, max |logit diff| %.3g over %zu prompts\n",
        GetParam().second, worst, j["forward"].size());
    const auto prompt = to32(j["forward"][0]["input_ids"]);
    EXPECT_EQ(builtin.generate({prompt}, {}, greedy(8)).sequences,
              spliced->generate({prompt}, {}, greedy(8)).sequences);
  });
  ASSERT_EQ(spliced->info().kernels.size(), 1u);
  EXPECT_EQ(spliced->info().kernels[0].package, GetParam().second);
  EXPECT_EQ(spliced->info().kernels[0].backend, "pjrt");
  // Every shape the steps used had its function (a tpu file is skipped, not a miss).
  for (const auto& n : notes) EXPECT_EQ(n.find("no function of this signature"), std::string::npos) << n;
}

INSTANTIATE_TEST_SUITE_P(Examples, SplicedPackage,
                         ::testing::Values(std::make_pair("rms_norm_stablehlo", "rms_norm_stablehlo"),
                                           std::make_pair("pallas_rms_norm/package", "pallas_rms_norm")),
                         [](const auto& info) { return std::string(info.param.second); });

// The exported Pallas package's tpu file: a Mosaic kernel per shape, accepted and spliced for a tpu platform.
TEST(KernelSplice, ExportedPallasTpuFileSplicesForTpu) {
  const std::string dir = std::string(TESSERA_SOURCE_DIR) + "/examples/kernels/pallas_rms_norm/package";
  const graph::Graph g = tiny_graph("qwen3_tied", kPrefill16);
  std::vector<KernelInUse> uses;
  auto set =
      std::make_shared<kernels::KernelSet>(kernels::select_kernels({dir}, {"pjrt", "tpu", 0}, g, uses));
  ASSERT_EQ(uses.size(), 1u);
  EXPECT_NE(uses[0].implementation.find("pallas_rms_norm_tpu.mlir"), std::string::npos);
  pjrt::KernelSplice splice = pjrt::make_kernel_splice(set, "tpu");
  const pjrt::StablehloProgram p = pjrt::lower_to_stablehlo(g, &splice);
  int norms = 0;
  for (const auto& n : g.nodes) norms += n.op == graph::Op::RmsNorm;
  EXPECT_EQ(p.spliced, norms);
  EXPECT_NE(p.text.find("stablehlo.custom_call @tpu_custom_call("), std::string::npos);
}

// A package without a function of a node's signature: that node keeps the built-in lowering, noted once.
TEST(KernelSplice, MissingSignatureFallsBackWithANote) {
  const graph::Graph g = tiny_graph("qwen3_tied", kPrefill16);
  const std::string dir =
      make_package("decode_only", "cpu",
                   "func.func public @f(%x: tensor<1x64xf32>, %w: tensor<64xf32>) -> "
                   "tensor<1x64xf32> {\n  \"func.return\"(%x) : (tensor<1x64xf32>) -> ()\n}\n");
  std::vector<KernelInUse> uses;
  auto set =
      std::make_shared<kernels::KernelSet>(kernels::select_kernels({dir}, {"pjrt", "cpu", 0}, g, uses));
  ASSERT_EQ(uses.size(), 1u);
  pjrt::KernelSplice splice = pjrt::make_kernel_splice(set, "cpu");
  const pjrt::StablehloProgram p = pjrt::lower_to_stablehlo(g, &splice);
  EXPECT_EQ(p.spliced, 0);
  ASSERT_FALSE(p.kernel_misses.empty());
  EXPECT_EQ(p.kernel_misses[0],
            "splice_decode_only: rms_norm (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>");
  EXPECT_EQ(p.text.find("func.call"), std::string::npos);
}

// A Pallas TPU kernel: accepted for a tpu platform (checked and spliced; not run: no chip here), refused with
// one line on xla-cpu, and a package for tpu is skipped on xla-cpu with a note.
TEST(KernelSplice, TpuCustomCallOnlyOnTpu) {
  const graph::Graph g = tiny_graph("qwen3_tied", kPrefill16);
  const std::string tpu = make_package("tpu", "tpu", tpu_mlir("tensor<16x64xf32>", "tensor<64xf32>"));
  std::vector<KernelInUse> uses;
  auto set =
      std::make_shared<kernels::KernelSet>(kernels::select_kernels({tpu}, {"pjrt", "tpu", 0}, g, uses));
  ASSERT_EQ(uses.size(), 1u);
  pjrt::KernelSplice splice = pjrt::make_kernel_splice(set, "tpu");
  EXPECT_TRUE(splice.texts[0].tpu_custom_call);
  const pjrt::StablehloProgram p = pjrt::lower_to_stablehlo(g, &splice);
  EXPECT_GT(p.spliced, 0);
  EXPECT_NE(p.text.find("stablehlo.custom_call @tpu_custom_call(%arg0, %arg1)"), std::string::npos);
  EXPECT_NE(p.text.find("func.func private @k0_main("), std::string::npos);
  EXPECT_EQ(p.text.find("func.func public @main(%arg0: tensor<16x64xf32>"), std::string::npos);
  // The same module lowered for xla-cpu.
  splice.platform = "cpu";
  const std::string e = error_of([&] { pjrt::lower_to_stablehlo(g, &splice); });
  EXPECT_EQ(e,
            "kernel package splice_tpu: its StableHLO holds stablehlo.custom_call @tpu_custom_call (a Pallas "
            "TPU kernel), which runs only on a tpu platform, not cpu");
  // A package claiming platform cpu with a TPU kernel inside: refused at load.
  const std::string liar = make_package("liar", "cpu", tpu_mlir("tensor<16x64xf32>", "tensor<64xf32>"));
  std::vector<KernelInUse> u2;
  const std::string e2 = error_of([&] { kernels::select_kernels({liar}, {"pjrt", "cpu", 0}, g, u2); });
  EXPECT_TRUE(one_line(e2)) << e2;
  EXPECT_NE(
      e2.find(
          "kernel package splice_liar: " + liar +
          "/kernel.mlir holds stablehlo.custom_call @tpu_custom_call (a Pallas TPU kernel), which runs only "
          "on a tpu platform, not cpu (implementations[0].platform says cpu)"),
      std::string::npos)
      << e2;
  // A tpu package on xla-cpu: skipped with a note.
  std::vector<KernelInUse> u3;
  const auto notes = notes_of([&] { kernels::select_kernels({tpu}, {"pjrt", "cpu", 0}, g, u3); });
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("skipped: implementations[0].platform is tpu, this pjrt backend is cpu"),
            std::string::npos)
      << notes[0];
  EXPECT_TRUE(u3.empty());
}

// A StableHLO implementation that is not one: one-line errors naming the file.
TEST(KernelSplice, BadStablehloIsAOneLineError) {
  const graph::Graph g = tiny_graph("qwen3_tied", kPrefill16);
  const struct {
    const char* tag;
    std::string mlir, error;
  } cases[] = {
      {"empty", "module {}\n", "kernel.mlir: no func.func definition"},
      {"arity",
       "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  \"func.return\"(%x) : (tensor<4xf32>) -> "
       "()\n}\n",
       "kernel.mlir: no public function with the signature of rms_norm (2 tensor arguments, one result)"},
      {"unbalanced", "func.func @f(%x: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> {\n",
       "@f: unbalanced body"},
  };
  for (const auto& c : cases) {
    const std::string dir = make_package(c.tag, "cpu", c.mlir);
    std::vector<KernelInUse> uses;
    const std::string e = error_of([&] { kernels::select_kernels({dir}, {"pjrt", "cpu", 0}, g, uses); });
    EXPECT_TRUE(one_line(e)) << e;
    EXPECT_NE(e.find(dir + "/kernel.mlir"), std::string::npos) << c.tag << ": " << e;
    EXPECT_NE(e.find(c.error), std::string::npos) << c.tag << ": " << e;
  }
}

}  // namespace
