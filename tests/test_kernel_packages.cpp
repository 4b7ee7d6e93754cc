// Kernel packages loaded at run time (src/kernels/package.h, LoadOptions::kernels, --kernels): the example
// native cpu package (examples/kernels/rms_norm_cpu, built by cmake/parts/kernel_packages.cmake) against the
// built-in path on the tiny goldens, and every kind of package that does not apply (a note, skipped) or is
// broken (one-line Error naming the file and field).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <utility>

#include "cli_util.h"
#include "error_util.h"
#include "golden_util.h"
#include "kernel_test_util.h"
#include "model_test_util.h"
#include "tessera/log.h"
#include "tessera/model.h"

using namespace tessera;
namespace fs = std::filesystem;
using namespace tessera::kernel_test;
using tessera::testing::run_cli;

namespace {

const std::string kExample = std::string(TESSERA_EXAMPLE_KERNELS_DIR) + "/rms_norm_cpu";
const std::string kExampleLib = kExample + "/librms_norm_cpu.so";
const std::string kMatmul = std::string(TESSERA_EXAMPLE_KERNELS_DIR) + "/matmul_cpu";
const std::string kMatmulLib = kMatmul + "/libmatmul_cpu.so";

// The manifest of the example package, with `field` replaced (a JSON fragment per key).
std::string manifest(
    const std::string& op = "\"rms_norm\"", const std::string& abi = "1", const std::string& extra = "",
    const std::string& impl = R"({"backend": "cpu", "platform": "linux-x86_64", "library": "lib.so"})") {
  return "{\"name\": \"test_kernel\", \"abi_version\": " + abi + ", \"op\": " + op + ", " + extra +
         "\"implementations\": [" + impl + "]}";
}

// A package folder holding `manifest_text` as kernel.json and `library` copied to lib.so.
std::string make_package(const std::string& tag, const std::string& manifest_text,
                         const std::string& library = kExampleLib) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("tessera_kernel_" + std::to_string(::getpid()) + "_" + tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "kernel.json") << manifest_text;
  if (!library.empty()) fs::copy_file(library, dir / "lib.so");
  return dir.string();
}

CausalLM load(const std::string& model, std::vector<std::string> kernels) {
  LoadOptions opt;
  opt.dtype = DType::F32;
  opt.kernels = std::move(kernels);
  return AutoModelForCausalLM::from_pretrained(golden::model_path(model), opt);
}

class ExampleCpuKernel : public ::testing::TestWithParam<const char*> {};

// Greedy ids identical and logits within 1e-5 of the built-in path (and the golden's 1e-4 of Transformers).
// With package `dir` (package `name`, op `op`) against the built-in path on `model`'s golden prompts.
void expect_loaded_equals_builtin(const char* model, const std::string& dir, const char* name,
                                  const char* op) {
  auto j = golden::load_model_golden(model);
  CausalLM builtin = load(model, {});
  CausalLM loaded = load(model, {dir});
  ASSERT_EQ(loaded.info().kernels.size(), 1u);
  const KernelInUse& k = loaded.info().kernels[0];
  EXPECT_EQ(k.package, name);
  EXPECT_EQ(k.op, op);
  EXPECT_EQ(k.backend, "cpu");
  EXPECT_GT(k.nodes, 0);
  EXPECT_TRUE(builtin.info().kernels.empty());
  double worst = 0;
  for (const auto& c : j["forward"]) {
    const auto ids = to32(c["input_ids"]);
    const std::vector<float> a = builtin.forward(ids), b = loaded.forward(ids);
    const double d = golden::max_abs_diff(b, a).max_abs;
    worst = std::max(worst, d);
    EXPECT_LE(d, 1e-5) << model;
    EXPECT_LE(golden::max_abs_diff(b, golden::matrix(c["logits"]).data).max_abs, 1e-4) << model;
  }
  std::printf("%s: loaded %s vs built-in, max |logit diff| %.3g over %zu prompts\n", model, op, worst,
              j["forward"].size());
  const auto prompt = to32(j["forward"][0]["input_ids"]);
  const auto ga = builtin.generate({prompt}, {}, greedy(12)).sequences;
  const auto gb = loaded.generate({prompt}, {}, greedy(12)).sequences;
  EXPECT_EQ(ga, gb) << model;
}

TEST_P(ExampleCpuKernel, SameIdsAndLogitsAsBuiltIn) {
  expect_loaded_equals_builtin(GetParam(), kExample, "rms_norm_cpu", "rms_norm");
}

INSTANTIATE_TEST_SUITE_P(Tiny, ExampleCpuKernel, ::testing::Values("qwen3_tied", "llama_gqa", "gemma2"));

// The kernel of the package is the one that runs: a wrong one (output x 1.5) changes the logits.
TEST(KernelPackages, LoadedKernelIsTheOneThatRuns) {
  const std::string wrong = make_package("wrong", manifest(), TESSERA_KERNEL_TEST_WRONG);
  const std::vector<int32_t> ids = {1, 2, 3, 4};
  const auto a = load("qwen3_tied", {}).forward(ids);
  const auto b = load("qwen3_tied", {wrong}).forward(ids);
  EXPECT_GT(golden::max_abs_diff(b, a).max_abs, 1e-2);
}

// The first package given takes a node; a later one accepting the same nodes is left with none and skipped.
TEST(KernelPackages, FirstPackageWins) {
  const std::string second = make_package("second", manifest());
  std::unique_ptr<CausalLM> m;
  const auto notes = notes_of([&] {
    m = std::make_unique<CausalLM>(load("qwen3_tied", {kExample, second}));
  });
  ASSERT_EQ(m->info().kernels.size(), 1u);
  EXPECT_EQ(m->info().kernels[0].package, "rms_norm_cpu");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "kernel package test_kernel (" + second +
                          ") skipped: every rms_norm node it fits is taken by a package given before it");
}

struct Skipped {
  const char* tag;
  std::string manifest_text;
  const char* note;  // in the one note logged
};

// Package `c` (its library `library`) is skipped with one one-line note naming it and why, and qwen3_tied
// loads without it.
void expect_skipped(const Skipped& c, const std::string& library = kExampleLib) {
  const std::string dir = make_package(c.tag, c.manifest_text, library);
  std::unique_ptr<CausalLM> m;
  const auto notes = notes_of([&] { m = std::make_unique<CausalLM>(load("qwen3_tied", {dir})); });
  ASSERT_EQ(notes.size(), 1u) << c.tag;
  EXPECT_TRUE(one_line(notes[0])) << notes[0];
  EXPECT_NE(notes[0].find("kernel package test_kernel (" + dir + ") skipped: "), std::string::npos)
      << notes[0];
  EXPECT_NE(notes[0].find(c.note), std::string::npos) << c.tag << ": " << notes[0];
  EXPECT_TRUE(m->info().kernels.empty()) << c.tag;
}

// Packages that do not apply: skipped with one note naming the package and why; the model loads without them.
TEST(KernelPackages, NotApplyingIsSkippedWithANote) {
  const Skipped cases[] = {
      {"shape", manifest("\"rms_norm\"", "1", R"("shapes": {"dim": [12345]}, )"),
       "no rms_norm node of the model fits (dim 64 not in [12345])"},
      {"dtype", manifest("\"rms_norm\"", "1", R"("dtypes": ["bfloat16"], )"),
       "no rms_norm node of the model fits (dtype float32 not in [bfloat16])"},
      {"platform",
       manifest("\"rms_norm\"", "1", "",
                R"({"backend": "cpu", "platform": "linux-riscv128", "library": "lib.so"})"),
       "implementations[0].platform is linux-riscv128, this cpu backend is linux-"},
      {"backend",
       manifest("\"rms_norm\"", "1", "", R"({"backend": "pjrt", "platform": "tpu", "stablehlo": "lib.so"})"),
       "no cpu implementation (it has pjrt/tpu)"},
      {"op_absent", manifest("\"attention\"", "1", R"("shapes": {"head_dim": [7]}, )"),
       "no attention node of the model fits (head_dim 32 not in [7])"},
  };
  for (const Skipped& c : cases) expect_skipped(c);
}

struct Broken {
  const char* tag;
  std::string manifest_text;
  std::string library;
  std::string error;  // in the one-line Error
};

// Broken packages: an Error of one line naming the file and the field (or the library and what it lacks).
TEST(KernelPackages, BrokenIsAOneLineError) {
  const std::string json_of = "kernel.json: field ";
  const Broken cases[] = {
      {"op", manifest("\"layer_norm\""), kExampleLib,
       json_of + "'op' 'layer_norm' is not an op a kernel can replace (known: rms_norm, matmul, attention)"},
      {"abi_manifest", manifest("\"rms_norm\"", "3"), kExampleLib,
       json_of + "'abi_version' 3 is not a version this build reads (1 to 2)"},
      {"abi_library", manifest(), TESSERA_KERNEL_TEST_ABI99,
       "lib.so: tessera_kernel_abi_version() is 99, this build loads ABI versions 1 to 2"},
      {"symbol", manifest(), TESSERA_KERNEL_TEST_NOSYM, "lib.so: missing symbol tessera_register_kernels"},
      {"not_json", "{\"name\": ", kExampleLib, "kernel.json"},
      {"missing_field", R"({"name": "x", "abi_version": 1, "op": "rms_norm"})", kExampleLib,
       json_of + "'implementations' is missing"},
      {"unknown_field", manifest("\"rms_norm\"", "1", R"("speed": 11, )"), kExampleLib,
       json_of + "'speed' is not a manifest field"},
      {"shape_attr", manifest("\"rms_norm\"", "1", R"("shapes": {"rows": [1]}, )"), kExampleLib,
       json_of + "'shapes.rows' is not a manifest field (expected one of dim, eps)"},
      {"dtype_name", manifest("\"rms_norm\"", "1", R"("dtypes": ["float8"], )"), kExampleLib,
       json_of + "'dtypes[0]' 'float8' is not float32, bfloat16 or float16"},
      {"no_library", manifest(), "", json_of + "'implementations[0].library' 'lib.so': no such file in"},
      {"escape",
       manifest("\"rms_norm\"", "1", "",
                R"({"backend": "cpu", "platform": "linux-x86_64", "library": "../lib.so"})"),
       kExampleLib,
       json_of + "'implementations[0].library' '../lib.so' must be a path inside the package folder"},
  };
  for (const Broken& c : cases) {
    const std::string dir = make_package(c.tag, c.manifest_text, c.library);
    const std::string e = error_of([&] { load("qwen3_tied", {dir}); });
    EXPECT_TRUE(one_line(e)) << c.tag << ": " << e;
    EXPECT_NE(e.find(c.error), std::string::npos) << c.tag << ": " << e;
    EXPECT_NE(e.find(dir), std::string::npos) << c.tag << " names no file: " << e;
  }
  // dlopen failure: a library that is not a shared object.
  const std::string dir = make_package("dlopen", manifest(), "");
  std::ofstream(dir + "/lib.so") << "not an ELF file";
  const std::string e = error_of([&] { load("qwen3_tied", {dir}); });
  EXPECT_TRUE(one_line(e)) << e;
  EXPECT_NE(e.find(dir + "/lib.so: dlopen failed: "), std::string::npos) << e;
  // Not a folder.
  EXPECT_EQ(error_of([&] { load("qwen3_tied", {"/nonexistent/kernels"}); }),
            "--kernels /nonexistent/kernels: not a directory (expected a kernel package folder)");
}

// `tessera <command>` run without and with --kernels (the rms_norm example): both succeed, the first lists
// no kernel and the second the example's; their --json outputs, and the bad-folder error's check.
std::pair<nlohmann::json, nlohmann::json> cli_without_and_with_kernels(const std::string& command) {
  const auto plain = run_cli(command + " --json");
  const auto with = run_cli(command + " --json --kernels '" + kExample + "'");
  EXPECT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(with.code, 0) << with.err;
  if (plain.code != 0 || with.code != 0) return {};
  auto jp = nlohmann::json::parse(plain.out), jw = nlohmann::json::parse(with.out);
  EXPECT_TRUE(jp["kernels"].empty());
  EXPECT_EQ(jw["kernels"].size(), 1u) << with.out.substr(0, 200);
  if (jw["kernels"].size() == 1) {
    EXPECT_EQ(jw["kernels"][0]["package"], "rms_norm_cpu");
    EXPECT_EQ(jw["kernels"][0]["op"], "rms_norm");
  }
  return {jp, jw};
}

void expect_bad_kernels_folder(const std::string& command) {
  const auto bad = run_cli(command + " --kernels /nonexistent/k");
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(bad.err,
            "tessera: error: --kernels /nonexistent/k: not a directory (expected a kernel package folder)\n");
}

// The command: --kernels DIR, --json lists the package in use; the logits equal the built-in command's.
TEST(KernelPackages, CliForwardAndGenerate) {
  const std::string model = golden::model_path("qwen3_tied");
  const auto [jp, jw] = cli_without_and_with_kernels("forward '" + model + "' --input-ids 1,2,3");
  ASSERT_FALSE(jw.is_null());
  EXPECT_LE(
      golden::max_abs_diff(golden::matrix(jw["logits"]).data, golden::matrix(jp["logits"]).data).max_abs,
      1e-5);
  const auto gen = run_cli("generate '" + model +
                           "' --input-ids 1,2,3 --max-new-tokens 4 --greedy --json -q "
                           "--kernels '" +
                           kExample + "'");
  ASSERT_EQ(gen.code, 0) << gen.err;
  EXPECT_EQ(nlohmann::json::parse(gen.out)["kernels"][0]["op"], "rms_norm");
  expect_bad_kernels_folder("forward '" + model + "' --input-ids 1");
}

// --- matmul (ABI version 2): examples/kernels/matmul_cpu ---

// A matmul manifest with `extra` fields, its library lib.so.
std::string matmul_manifest(const std::string& extra = "", const std::string& abi = "2") {
  return manifest("\"matmul\"", abi, extra);
}

class ExampleMatmulKernel : public ::testing::TestWithParam<const char*> {};

// float32 weights: greedy ids identical and logits within 1e-5 of the built-in kernels (another summation
// order), and within the golden's 1e-4 of Transformers; every matmul node (prefill and decode) takes it.
TEST_P(ExampleMatmulKernel, SameIdsAndLogitsAsBuiltIn) {
  expect_loaded_equals_builtin(GetParam(), kMatmul, "matmul_cpu", "matmul");
  EXPECT_EQ(load(GetParam(), {kMatmul}).info().kernels.at(0).implementation, kMatmulLib);
}

INSTANTIATE_TEST_SUITE_P(Tiny, ExampleMatmulKernel, ::testing::Values("qwen3_tied", "llama_gqa", "gemma2"));

// The loaded matmul is the one that runs (a wrong one, output x 1.5, changes the logits), in prefill and in
// decode steps (where the built-in path fuses sibling matmuls: a loaded one runs alone).
TEST(KernelPackages, LoadedMatmulIsTheOneThatRuns) {
  const std::string wrong = make_package("matmul_wrong", matmul_manifest(), TESSERA_KERNEL_TEST_MATMUL_WRONG);
  const std::vector<int32_t> ids = {1, 2, 3, 4};
  CausalLM builtin = load("qwen3_tied", {});
  CausalLM bad = load("qwen3_tied", {wrong});
  EXPECT_GT(golden::max_abs_diff(bad.forward(ids), builtin.forward(ids)).max_abs, 1e-2);
  const auto ga = builtin.generate({ids}, {}, greedy(8)).sequences;
  const auto gb = bad.generate({ids}, {}, greedy(8)).sequences;
  EXPECT_NE(ga, gb);
}

// A decode step of 9 sequences with the loaded matmul: each sequence's greedy ids are those it gets alone
// (the kernel is called once per decode row, so its summation at 8+ rows never reaches a decode step).
TEST(KernelPackages, LoadedMatmulDecodeIsBatchInvariant) {
  CausalLM loaded = load("llama_gqa", {kMatmul});
  ASSERT_EQ(loaded.info().kernels.size(), 1u);
  std::vector<std::vector<int32_t>> rows, mask;
  const size_t len = 11;
  for (int b = 0; b < 9; ++b) {
    const size_t n = 3 + static_cast<size_t>(b);
    std::vector<int32_t> ids(len, 0), m(len, 0);
    for (size_t i = 0; i < n; ++i) {
      ids[len - n + i] = static_cast<int32_t>(1 + (7 * b + 3 * static_cast<int>(i)) % 50);
      m[len - n + i] = 1;
    }
    rows.push_back(ids);
    mask.push_back(m);
  }
  const auto batched = loaded.generate(rows, mask, greedy(10)).sequences;
  ASSERT_EQ(batched.size(), rows.size());
  for (size_t b = 0; b < rows.size(); ++b) {
    const std::vector<int32_t> alone_prompt(rows[b].end() - static_cast<std::ptrdiff_t>(3 + b),
                                            rows[b].end());
    const auto alone = loaded.generate({alone_prompt}, {}, greedy(10)).sequences[0];
    const std::vector<int32_t> batched_new(batched[b].begin() + static_cast<std::ptrdiff_t>(len),
                                           batched[b].end());
    const std::vector<int32_t> alone_new(alone.begin() + static_cast<std::ptrdiff_t>(alone_prompt.size()),
                                         alone.end());
    EXPECT_EQ(batched_new, alone_new) << "row " << b;
  }
}

// Both example packages at once: each takes its op.
TEST(KernelPackages, MatmulAndRmsNormTogether) {
  CausalLM builtin = load("llama_gqa", {});
  CausalLM both = load("llama_gqa", {kExample, kMatmul});
  ASSERT_EQ(both.info().kernels.size(), 2u);
  EXPECT_EQ(both.info().kernels[0].op, "rms_norm");
  EXPECT_EQ(both.info().kernels[1].op, "matmul");
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5};
  EXPECT_LE(golden::max_abs_diff(both.forward(ids), builtin.forward(ids)).max_abs, 1e-5);
}

// A matmul package that does not fit the model's matmul nodes: skipped with one note, the model loads.
TEST(KernelPackages, MatmulNotApplyingIsSkippedWithANote) {
  const Skipped cases[] = {
      {"matmul_shape", matmul_manifest(R"("shapes": {"in": [12345]}, )"),
       "no matmul node of the model fits (in "},
      {"matmul_out", matmul_manifest(R"("shapes": {"out": [7]}, )"),
       "no matmul node of the model fits (out "},
      {"matmul_dtype", matmul_manifest(R"("dtypes": ["bfloat16"], )"),
       "no matmul node of the model fits (dtype float32 not in [bfloat16])"},
  };
  for (const Skipped& c : cases) expect_skipped(c, kMatmulLib);
  // A shape filter that one node fits: that node alone takes it, the others keep the built-in kernel.
  CausalLM builtin = load("qwen3_tied", {});
  const std::string some =
      make_package("matmul_some", matmul_manifest(R"("shapes": {"out": [64]}, )"), kMatmulLib);
  CausalLM part = load("qwen3_tied", {some});
  ASSERT_EQ(part.info().kernels.size(), 1u);
  CausalLM all = load("qwen3_tied", {kMatmul});
  EXPECT_GT(part.info().kernels[0].nodes, 0);
  EXPECT_LT(part.info().kernels[0].nodes, all.info().kernels[0].nodes);
  const std::vector<int32_t> ids = {1, 2, 3};
  EXPECT_LE(golden::max_abs_diff(part.forward(ids), builtin.forward(ids)).max_abs, 1e-5);
  // Decode steps: the nodes it takes run alone, the others still in their sibling groups.
  EXPECT_EQ(part.generate({ids}, {}, greedy(8)).sequences, builtin.generate({ids}, {}, greedy(8)).sequences);
}

// bfloat16 weights: the example's bfloat16 kernel (plain C, its own summation order) against the built-in
// float32-accumulating kernel (exact_bf16_matmul: x kept float32 on every CPU); a float32-only package is
// skipped with a note on a bfloat16 model, so the kernel applies only where its dtype filter says.
TEST(KernelPackages, MatmulBf16Weights) {
  auto load_bf16 = [](std::vector<std::string> kernels) {
    LoadOptions opt;
    opt.dtype = DType::BF16;
    opt.exact_bf16_matmul = true;
    opt.kernels = std::move(kernels);
    return AutoModelForCausalLM::from_pretrained(golden::model_path("qwen3_tied"), opt);
  };
  CausalLM builtin = load_bf16({});
  CausalLM loaded = load_bf16({kMatmul});
  ASSERT_EQ(loaded.info().kernels.size(), 1u);
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const double d = golden::max_abs_diff(loaded.forward(ids), builtin.forward(ids)).max_abs;
  std::printf("qwen3_tied bfloat16: loaded matmul vs built-in, max |logit diff| %.3g\n", d);
  EXPECT_LE(d, 1e-4);
  EXPECT_EQ(builtin.generate({ids}, {}, greedy(8)).sequences,
            loaded.generate({ids}, {}, greedy(8)).sequences);
  const std::string f32_only =
      make_package("matmul_f32_only", matmul_manifest(R"("dtypes": ["float32"], )"), kMatmulLib);
  std::unique_ptr<CausalLM> m;
  const auto notes = notes_of([&] { m = std::make_unique<CausalLM>(load_bf16({f32_only})); });
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("no matmul node of the model fits (dtype bfloat16 not in [float32])"),
            std::string::npos)
      << notes[0];
  EXPECT_TRUE(m->info().kernels.empty());
}

// Quantised matrices (q8_0 at load) keep the built-in kernels: the example's dtypes filter skips it, and a
// package without a filter is skipped too (its library registers float32 and bfloat16 kernels only).
TEST(KernelPackages, MatmulSkipsQuantisedMatrices) {
  const std::string any = make_package("matmul_any_dtype", matmul_manifest(), kMatmulLib);
  const std::pair<std::string, const char*> cases[] = {
      {kMatmul, "no matmul node of the model fits (dtype q8_0 not in [float32, bfloat16])"},
      {any, "its library registers no kernel for the model's dtype on this CPU's instruction set"}};
  for (const auto& [dir, note] : cases) {
    LoadOptions opt;
    opt.dtype = DType::Q8_0;
    opt.kernels = {dir};
    std::unique_ptr<CausalLM> m;
    const auto notes = notes_of([&] {
      m = std::make_unique<CausalLM>(
          AutoModelForCausalLM::from_pretrained(golden::model_path("qwen3_tied"), opt));
    });
    ASSERT_EQ(notes.size(), 1u) << dir;
    EXPECT_NE(notes[0].find(note), std::string::npos) << notes[0];
    EXPECT_TRUE(m->info().kernels.empty()) << dir;
  }
}

// ABI versions: a version-1 library (rms_norm) still loads and runs; a version-1 library registering a
// matmul kernel, or a matmul library without tessera_register_kernels, is a one-line Error naming it.
TEST(KernelPackages, MatmulAbiVersionsAndBrokenLibraries) {
  const std::string old = make_package("abi1_rms_norm", manifest(), TESSERA_KERNEL_TEST_ABI1);
  CausalLM m = load("qwen3_tied", {old});
  ASSERT_EQ(m.info().kernels.size(), 1u);
  const std::vector<int32_t> ids = {1, 2, 3};
  EXPECT_LE(golden::max_abs_diff(m.forward(ids), load("qwen3_tied", {}).forward(ids)).max_abs, 1e-5);
  const Broken cases[] = {
      {"matmul_abi1", matmul_manifest(), TESSERA_KERNEL_TEST_MATMUL_ABI1,
       "lib.so: kernel 'matmul_f32_scalar': op 2 has no C signature in ABI 1 (TESSERA_KERNEL_OP_RMS_NORM "
       "only; "
       "matmul needs ABI 2)"},
      {"matmul_nosym", matmul_manifest(), TESSERA_KERNEL_TEST_MATMUL_NOSYM,
       "lib.so: missing symbol tessera_register_kernels"},
      {"matmul_op", manifest(), kMatmulLib,
       "lib.so: kernel 'matmul_f32_scalar' is for matmul, the manifest's op is rms_norm"},
  };
  for (const Broken& c : cases) {
    const std::string dir = make_package(c.tag, c.manifest_text, c.library);
    const std::string e = error_of([&] { load("qwen3_tied", {dir}); });
    EXPECT_TRUE(one_line(e)) << c.tag << ": " << e;
    EXPECT_NE(e.find(c.error), std::string::npos) << c.tag << ": " << e;
    EXPECT_NE(e.find(dir), std::string::npos) << c.tag << " names no file: " << e;
  }
}

// `tessera bench --quick --kernels DIR` runs with the package and its --json lists it, as forward's does.
TEST(KernelPackages, CliBench) {
  const std::string model = golden::model_path("qwen3_tied");
  const auto [jp, jw] = cli_without_and_with_kernels("bench '" + model + "' --quick --dtype float32");
  ASSERT_FALSE(jw.is_null());
  ASSERT_EQ(jw["kernels"].size(), 1u);
  EXPECT_EQ(jw["kernels"][0]["backend"], "cpu");
  EXPECT_GT(jw["kernels"][0]["nodes"].get<int>(), 0);
  EXPECT_GT(jw["decode_tokens_per_s"].get<double>(), 0);
  expect_bad_kernels_folder("bench '" + model + "' --quick");
}

}  // namespace
