// Kernel packages loaded at run time (src/kernels/package.h, LoadOptions::kernels, --kernels): the example
// native cpu package (examples/kernels/rms_norm_cpu, built by cmake/parts/kernel_packages.cmake) against the
// built-in path on the tiny goldens, and every kind of package that does not apply (a note, skipped) or is
// broken (one-line Error naming the file and field).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

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
TEST_P(ExampleCpuKernel, SameIdsAndLogitsAsBuiltIn) {
  const char* model = GetParam();
  auto j = golden::load_model_golden(model);
  CausalLM builtin = load(model, {});
  CausalLM loaded = load(model, {kExample});
  ASSERT_EQ(loaded.info().kernels.size(), 1u);
  const KernelInUse& k = loaded.info().kernels[0];
  EXPECT_EQ(k.package, "rms_norm_cpu");
  EXPECT_EQ(k.op, "rms_norm");
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
  std::printf("%s: loaded rms_norm vs built-in, max |logit diff| %.3g over %zu prompts\n", model, worst,
              j["forward"].size());
  const auto prompt = to32(j["forward"][0]["input_ids"]);
  const auto ga = builtin.generate({prompt}, {}, greedy(12)).sequences;
  const auto gb = loaded.generate({prompt}, {}, greedy(12)).sequences;
  EXPECT_EQ(ga, gb) << model;
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
  for (const Skipped& c : cases) {
    const std::string dir = make_package(c.tag, c.manifest_text);
    std::vector<std::string> notes;
    std::unique_ptr<CausalLM> m;
    notes = notes_of([&] { m = std::make_unique<CausalLM>(load("qwen3_tied", {dir})); });
    ASSERT_EQ(notes.size(), 1u) << c.tag;
    EXPECT_TRUE(one_line(notes[0])) << notes[0];
    EXPECT_NE(notes[0].find("kernel package test_kernel (" + dir + ") skipped: "), std::string::npos)
        << notes[0];
    EXPECT_NE(notes[0].find(c.note), std::string::npos) << c.tag << ": " << notes[0];
    EXPECT_TRUE(m->info().kernels.empty()) << c.tag;
  }
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
      {"abi_manifest", manifest("\"rms_norm\"", "2"), kExampleLib,
       json_of + "'abi_version' 2 is not the version this build reads (1)"},
      {"abi_library", manifest(), TESSERA_KERNEL_TEST_ABI99,
       "lib.so: tessera_kernel_abi_version() is 99, this build loads ABI version 1"},
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

// The command: --kernels DIR, --json lists the package in use; the logits equal the built-in command's.
TEST(KernelPackages, CliForwardAndGenerate) {
  const std::string model = golden::model_path("qwen3_tied");
  const auto plain = run_cli("forward '" + model + "' --input-ids 1,2,3 --json");
  const auto with = run_cli("forward '" + model + "' --input-ids 1,2,3 --json --kernels '" + kExample + "'");
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(with.code, 0) << with.err;
  const auto jp = nlohmann::json::parse(plain.out), jw = nlohmann::json::parse(with.out);
  EXPECT_TRUE(jp["kernels"].empty());
  ASSERT_EQ(jw["kernels"].size(), 1u) << with.out.substr(0, 200);
  EXPECT_EQ(jw["kernels"][0]["package"], "rms_norm_cpu");
  EXPECT_EQ(jw["kernels"][0]["op"], "rms_norm");
  EXPECT_LE(
      golden::max_abs_diff(golden::matrix(jw["logits"]).data, golden::matrix(jp["logits"]).data).max_abs,
      1e-5);
  const auto gen = run_cli("generate '" + model +
                           "' --input-ids 1,2,3 --max-new-tokens 4 --greedy --json -q "
                           "--kernels '" +
                           kExample + "'");
  ASSERT_EQ(gen.code, 0) << gen.err;
  EXPECT_EQ(nlohmann::json::parse(gen.out)["kernels"][0]["op"], "rms_norm");
  const auto bad = run_cli("forward '" + model + "' --input-ids 1 --kernels /nonexistent/k");
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(bad.err,
            "tessera: error: --kernels /nonexistent/k: not a directory (expected a kernel package folder)\n");
}

// `tessera bench --quick --kernels DIR` runs with the package and its --json lists it, as forward's does.
TEST(KernelPackages, CliBench) {
  const std::string model = golden::model_path("qwen3_tied");
  const auto plain = run_cli("bench '" + model + "' --quick --json --dtype float32");
  const auto with =
      run_cli("bench '" + model + "' --quick --json --dtype float32 --kernels '" + kExample + "'");
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(with.code, 0) << with.err;
  const auto jp = nlohmann::json::parse(plain.out), jw = nlohmann::json::parse(with.out);
  EXPECT_TRUE(jp["kernels"].empty());
  ASSERT_EQ(jw["kernels"].size(), 1u) << with.out.substr(0, 200);
  EXPECT_EQ(jw["kernels"][0]["package"], "rms_norm_cpu");
  EXPECT_EQ(jw["kernels"][0]["op"], "rms_norm");
  EXPECT_EQ(jw["kernels"][0]["backend"], "cpu");
  EXPECT_GT(jw["kernels"][0]["nodes"].get<int>(), 0);
  EXPECT_GT(jw["decode_tokens_per_s"].get<double>(), 0);
  const auto bad = run_cli("bench '" + model + "' --quick --kernels /nonexistent/k");
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(bad.err,
            "tessera: error: --kernels /nonexistent/k: not a directory (expected a kernel package folder)\n");
}

}  // namespace
