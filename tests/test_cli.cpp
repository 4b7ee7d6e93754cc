// End-to-end: the `tessera` binary as a user runs it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "golden_util.h"
#include "pjrt_test_util.h"
#include "backends/pjrt/pjrt_info.h"
#include "io/model_files.h"
#include "tessera/error.h"

namespace golden = tessera::golden;

namespace {

using Result = tessera::testing::CliResult;

Result run(const std::string& args, const std::string& input = "") { return tessera::testing::run_cli(args, input); }

std::string ids_arg(const nlohmann::json& ids) {
  std::string s;
  for (const auto& v : ids) s += (s.empty() ? "" : ",") + std::to_string(v.get<int64_t>());
  return s;
}

std::string smollm2() {
  try {
    return tessera::io::find_default_model();
  } catch (const tessera::Error&) {
    return "";
  }
}

TEST(Cli, GenerateJsonMatchesGoldenAndCountsCompiles) {
  auto j = golden::load_model_golden("llama_gqa")["greedy"][0];
  Result r = run("generate " + golden::model_path("llama_gqa") + " --dtype float32 --json --max-new-tokens 32 --input-ids " +
                 ids_arg(j["input_ids"]));
  ASSERT_EQ(r.code, 0) << r.err;
  auto out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["ids"], j["output_ids"]);
  EXPECT_EQ(out["compiles"], 2);
  EXPECT_EQ(out["new_tokens"], 32);
  for (const char* k : {"text", "prompt_tokens", "prefill_tokens_per_s", "decode_tokens_per_s"})
    EXPECT_TRUE(out.contains(k)) << k;
}

TEST(Cli, ForwardJsonLogitsMatchTransformers) {
  auto c = golden::load_model_golden("qwen3_tied")["forward"][1];
  Result r = run("forward " + golden::model_path("qwen3_tied") + " --dtype float32 --json --input-ids " + ids_arg(c["input_ids"]));
  ASSERT_EQ(r.code, 0) << r.err;
  auto got = golden::matrix(nlohmann::json::parse(r.out)["logits"]);
  auto expect = golden::matrix(c["logits"]);
  EXPECT_EQ(got.rows, expect.rows);
  EXPECT_LE(golden::max_abs_diff(got.data, expect.data).max_abs, 1e-4);
}

TEST(Cli, BadInputsExitNonZeroWithOneLine) {
  const std::string m = golden::model_path("qwen3_tied");
  for (const std::string& args : std::vector<std::string>{"generate " + m + " --input-ids 1,2,99999", "generate " + m + " --input-ids 1 --max-new-tokens 999",
                                  "forward " + m + " --input-ids x", std::string("generate /nonexistent/model --input-ids 1"),
                                  "generate " + m + " --input-ids 1 --prompt hi"}) {
    Result r = run(args);
    EXPECT_EQ(r.code, 1) << args;
    EXPECT_EQ(r.err.rfind("tessera: error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

TEST(Cli, TokenizeAndDetokenizeRoundTrip) {
  const std::string path = smollm2();
  if (path.empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed";
  Result t = run("tokenize " + path, "Hello, world! Ünïcødé 你好");
  ASSERT_EQ(t.code, 0) << t.err;
  Result d = run("detokenize " + path, t.out);
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_EQ(d.out, "Hello, world! Ünïcødé 你好");
  Result jl = run("tokenize " + path + " --jsonl", "{\"text\": \"a b\"}\n{\"text\": \"Hello\"}\n");
  ASSERT_EQ(jl.code, 0) << jl.err;
  EXPECT_EQ(std::count(jl.out.begin(), jl.out.end(), '\n'), 2);
  EXPECT_EQ(nlohmann::json::parse(jl.out.substr(0, jl.out.find('\n')))["ids"].size(), 2u);
  Result bad = run("tokenize " + path + " --jsonl", "{\"txt\": 1}\n");
  EXPECT_EQ(bad.code, 1);
}

TEST(Cli, DefaultModelWritesTheGoldenContinuation) {
  if (smollm2().empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed";
  auto p = golden::load_json(golden::model_path("smollm2_golden.json"))["prompts"][0];
  Result r = run("generate --dtype float32 --max-new-tokens 8 --quiet --prompt '" + p["text"].get<std::string>() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  std::string expect = p["greedy_no_eos"]["text"].get<std::string>();
  // The first 8 tokens of Transformers' text (" Paris." ...).
  EXPECT_EQ(expect.rfind(r.out.substr(0, r.out.size() - 1), 0), 0u) << "got: " << r.out << "\nexpected prefix of: " << expect;
}

TEST(Cli, ChatAnswersOnStdin) {
  if (smollm2().empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed";
  Result r = run("chat --quiet --max-new-tokens 24 --dtype float32", "What is the capital of France?\n/exit\n");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
}

TEST(Cli, DevicesListsTheCpu) {
  Result r = run("devices --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["devices"][0]["kind"], "cpu");
}

TEST(Cli, XlaCpuGreedyTextEqualsNativeOnSmolLM2) {
  if (!tessera::testing::xla_cpu_plugin_available() || smollm2().empty())
    GTEST_SKIP() << "needs the xla-cpu plugin and SmolLM2 (scripts/setup.sh)";
  const std::string args = "generate --dtype float32 --max-new-tokens 32 --json --prompt 'The capital of France is'";
  Result native = run(args + " --device cpu");
  Result xla = run(args + " --device xla-cpu");
  ASSERT_EQ(native.code, 0) << native.err;
  ASSERT_EQ(xla.code, 0) << xla.err;
  auto a = nlohmann::json::parse(native.out), b = nlohmann::json::parse(xla.out);
  EXPECT_EQ(a["ids"], b["ids"]);
  EXPECT_EQ(a["text"], b["text"]);
  EXPECT_EQ(b["device"], "xla-cpu");
  EXPECT_EQ(b["compiles"], 2);
}

TEST(Cli, AbsentDeviceListsWhatWasFound) {
  Result r = run("generate " + golden::model_path("qwen3_tied") + " --device tpu --input-ids 1,2");
  if (r.code == 0) GTEST_SKIP() << "a TPU plugin is installed here";
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("looked in"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("devices with a backend here: cpu"), std::string::npos) << r.err;
  Result u = run("generate " + golden::model_path("qwen3_tied") + " --device gpu0 --input-ids 1,2");
  EXPECT_EQ(u.code, 1);
  EXPECT_NE(u.err.find("unknown device 'gpu0'"), std::string::npos) << u.err;
}

TEST(Cli, AutoDeviceSaysWhatItChose) {
  Result r = run("generate " + golden::model_path("qwen3_tied") + " --device auto --input-ids 1,2 --max-new-tokens 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("tessera: device auto:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("using"), std::string::npos) << r.err;
}

TEST(Cli, DevicesListsXlaCpu) {
  if (!tessera::testing::xla_cpu_plugin_available()) GTEST_SKIP() << "xla-cpu plugin not installed";
  Result r = run("devices --json");
  ASSERT_EQ(r.code, 0) << r.err;
  bool found = false;
  const auto listing = nlohmann::json::parse(r.out);
  for (const auto& d : listing["devices"])
    found = found || (d["device"] == "xla-cpu" && d["count"].get<int>() >= 1);
  EXPECT_TRUE(found) << r.out;
}

}  // namespace
