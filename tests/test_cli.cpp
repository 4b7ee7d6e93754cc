// End-to-end: the `tessera` binary as a user runs it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "backends/cpu/kernels.h"
#include "backends/pjrt/pjrt_info.h"
#include "cli_util.h"
#include "default_model_util.h"
#include "golden_util.h"
#include "pjrt_test_util.h"
#include "tessera/error.h"
#include "test_env_util.h"

namespace golden = tessera::golden;

namespace {

using Result = tessera::testing::CliResult;

Result run(const std::string& args, const std::string& input = "") {
  return tessera::testing::run_cli(args, input);
}

std::string ids_arg(const nlohmann::json& ids) {
  std::string s;
  for (const auto& v : ids) s += (s.empty() ? "" : ",") + std::to_string(v.get<int64_t>());
  return s;
}

std::string smollm2() { return tessera::test_models::smollm2_path(); }

TEST(Cli, GenerateJsonMatchesGoldenAndCountsCompiles) {
  auto j = golden::load_model_golden("llama_gqa")["greedy"][0];
  Result r = run("generate " + golden::model_path("llama_gqa") +
                 " --dtype float32 --json --max-new-tokens 32 --input-ids " + ids_arg(j["input_ids"]));
  ASSERT_EQ(r.code, 0) << r.err;
  auto out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["ids"], j["output_ids"]);
  EXPECT_EQ(out["compiles"], 2);
  EXPECT_EQ(out["new_tokens"], 32);
  for (const char* k : {"text", "prompt_tokens", "prefill_tokens_per_s", "decode_tokens_per_s"})
    EXPECT_TRUE(out.contains(k)) << k;
  // Keys and values of every layer, float32: 2 x layers x kv heads x head_dim x 4 bytes.
  const nlohmann::json c = golden::load_json(golden::model_path("llama_gqa/config.json"));
  const int64_t head_dim = c["hidden_size"].get<int64_t>() / c["num_attention_heads"].get<int64_t>();
  EXPECT_EQ(
      out["kv_bytes_per_token"].get<int64_t>(),
      2 * c["num_hidden_layers"].get<int64_t>() * c["num_key_value_heads"].get<int64_t>() * head_dim * 4);
}

// --kv-cache-dtype: the dtype and its bytes per position in --json (fp8: one byte a value); a name it does
// not know is refused naming the flag.
TEST(Cli, GenerateKvCacheDtypeIsReportedAndCheckedByName) {
  auto j = golden::load_model_golden("llama_gqa")["greedy"][0];
  Result r = run("generate " + golden::model_path("llama_gqa") +
                 " --dtype float32 --json --max-new-tokens 8 --kv-cache-dtype fp8 --input-ids " +
                 ids_arg(j["input_ids"]));
  ASSERT_EQ(r.code, 0) << r.err;
  auto out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["kv_cache_dtype"], "float8_e4m3fn");
  const nlohmann::json c = golden::load_json(golden::model_path("llama_gqa/config.json"));
  const int64_t head_dim = c["hidden_size"].get<int64_t>() / c["num_attention_heads"].get<int64_t>();
  EXPECT_EQ(out["kv_bytes_per_token"].get<int64_t>(),
            2 * c["num_hidden_layers"].get<int64_t>() * c["num_key_value_heads"].get<int64_t>() * head_dim);
  Result bad = run("generate " + golden::model_path("llama_gqa") + " --kv-cache-dtype int4 --input-ids 1,2");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--kv-cache-dtype"), std::string::npos) << bad.err;
}

// --prompt-lookup-num-tokens: Transformers' greedy tokens with fewer decode steps, the counts in --json; a
// bad value names the flag.
TEST(Cli, GeneratePromptLookupGivesTheGoldenTokens) {
  auto j = golden::load_model_golden("llama_gqa")["greedy"][0];
  Result r = run("generate " + golden::model_path("llama_gqa") +
                 " --dtype float32 --json --max-new-tokens 32 --prompt-lookup-num-tokens 4 "
                 "--max-matching-ngram-size 3 --input-ids " +
                 ids_arg(j["input_ids"]));
  ASSERT_EQ(r.code, 0) << r.err;
  auto out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["ids"], j["output_ids"]);
  EXPECT_GT(out["draft_tokens"].get<int>(), 0);
  EXPECT_EQ(out["decode_steps"].get<int>() + out["accepted_tokens"].get<int>(), 31);
  EXPECT_EQ(out["generation_config"]["prompt_lookup_num_tokens"], 4);
  r = run("generate " + golden::model_path("llama_gqa") + " --input-ids 1,2 --prompt-lookup-num-tokens 40");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--prompt-lookup-num-tokens"), std::string::npos) << r.err;
}

// --draft-model: Transformers' greedy tokens, drafts counted in --json (the model drafting for itself: nearly
// all confirmed); bad values name the flag or the model.
TEST(Cli, GenerateWithADraftModelGivesTheGoldenTokens) {
  auto j = golden::load_model_golden("llama_gqa")["greedy"][0];
  const std::string model = golden::model_path("llama_gqa");
  Result r = run("generate " + model + " --dtype float32 --json --max-new-tokens 32 --draft-model " + model +
                 " --num-assistant-tokens 6 --input-ids " + ids_arg(j["input_ids"]));
  ASSERT_EQ(r.code, 0) << r.err;
  auto out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["ids"], j["output_ids"]);
  EXPECT_GT(out["draft_tokens"].get<int>(), 0);
  EXPECT_GT(out["accepted_tokens"].get<int>(), out["draft_tokens"].get<int>() / 2);
  EXPECT_EQ(out["generation_config"]["num_assistant_tokens"], 6);
  r = run("generate " + model + " --input-ids 1,2 --draft-model " + model + " --num-assistant-tokens 0");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--num-assistant-tokens"), std::string::npos) << r.err;
  r = run("generate " + model + " --input-ids 1,2 --draft-model " + golden::model_path("llama3_v4"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("vocabulary"), std::string::npos) << r.err;
}

TEST(Cli, ForwardJsonLogitsMatchTransformers) {
  auto c = golden::load_model_golden("qwen3_tied")["forward"][1];
  Result r = run("forward " + golden::model_path("qwen3_tied") + " --dtype float32 --json --input-ids " +
                 ids_arg(c["input_ids"]));
  ASSERT_EQ(r.code, 0) << r.err;
  auto got = golden::matrix(nlohmann::json::parse(r.out)["logits"]);
  auto expect = golden::matrix(c["logits"]);
  EXPECT_EQ(got.rows, expect.rows);
  EXPECT_LE(golden::max_abs_diff(got.data, expect.data).max_abs, 1e-4);
}

TEST(Cli, BadInputsExitNonZeroWithOneLine) {
  const std::string m = golden::model_path("qwen3_tied");
  for (const std::string& args : std::vector<std::string>{
           "generate " + m + " --input-ids 1,2,99999",
           "generate " + m + " --input-ids 1 --max-new-tokens 999", "forward " + m + " --input-ids x",
           std::string("generate /nonexistent/model --input-ids 1"),
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
  Result r = run("generate --dtype float32 --max-new-tokens 8 --quiet --prompt '" +
                 p["text"].get<std::string>() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  std::string expect = p["greedy_no_eos"]["text"].get<std::string>();
  // The first 8 tokens of Transformers' text (" Paris." ...).
  EXPECT_EQ(expect.rfind(r.out.substr(0, r.out.size() - 1), 0), 0u)
      << "got: " << r.out << "\nexpected prefix of: " << expect;
}

TEST(Cli, ChatAnswersOnStdin) {
  if (smollm2().empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed";
  Result r =
      run("chat --quiet --max-new-tokens 24 --dtype float32", "What is the capital of France?\n/exit\n");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
}

TEST(Cli, DevicesListsTheCpu) {
  Result r = run("devices --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto cpu = nlohmann::json::parse(r.out)["devices"][0];
  EXPECT_EQ(cpu["kind"], "cpu");
  // The quantised kernels' integer dot products, as the kernels pick them (TESSERA_ISA=scalar: none).
  EXPECT_EQ(cpu["int8_dot"], tessera::cpu::int8_dot_in_use());
  tessera::testing::ScopedEnv env("TESSERA_ISA", "scalar");
  Result scalar = run("devices --json");
  ASSERT_EQ(scalar.code, 0) << scalar.err;
  EXPECT_EQ(nlohmann::json::parse(scalar.out)["devices"][0]["int8_dot"], "scalar");
}

TEST(Cli, XlaCpuGreedyTextEqualsNativeOnSmolLM2) {
  if (!tessera::testing::xla_cpu_plugin_available() || smollm2().empty())
    GTEST_SKIP() << "needs the xla-cpu plugin and SmolLM2 (scripts/setup.sh)";
  const std::string args =
      "generate --dtype float32 --max-new-tokens 32 --json --prompt 'The capital of France is'";
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
  Result r = run("generate " + golden::model_path("qwen3_tied") +
                 " --device auto --input-ids 1,2 --max-new-tokens 2");
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

// ---- generation defaults, flag overrides, parse errors, input hygiene ----

namespace fs = std::filesystem;

// A scratch copy of a fixture model (removed at the end of the test).
struct Scratch {
  fs::path dir;
  explicit Scratch(const std::string& fixture) {
    static int n = 0;
    dir = fs::temp_directory_path() /
          ("tessera_cli_model_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(dir);
    fs::copy(golden::model_path(fixture), dir, fs::copy_options::recursive);
  }
  ~Scratch() { fs::remove_all(dir); }
  std::string path() const { return dir.string(); }
};

bool one_error_line(const Result& r) {
  return r.code == 1 && r.err.rfind("tessera: error: ", 0) == 0 &&
         std::count(r.err.begin(), r.err.end(), '\n') == 1;
}

TEST(Cli, InputIdsWithEmptyItemsAreErrors) {
  const std::string m = golden::model_path("qwen3_tied");
  for (const char* ids : {"1,,2", ",1", "1,", "1, ,2", "1,2,", ",", "1;2", "-1", "2147483648"}) {
    Result r = run("generate " + m + " --max-new-tokens 1 --input-ids '" + ids + "'");
    EXPECT_TRUE(one_error_line(r)) << ids << ": " << r.code << " " << r.err;
    EXPECT_NE(r.err.find("--input-ids"), std::string::npos) << ids << ": " << r.err;
  }
  Result f = run("forward " + m + " --input-ids 1,,2");
  EXPECT_TRUE(one_error_line(f)) << f.err;
  for (const char* ids : {"1,2", "1, 2", "1 2", " 1,2 "}) {  // separators that stay valid
    Result r = run("generate " + m + " --max-new-tokens 1 --json --input-ids '" + ids + "'");
    ASSERT_EQ(r.code, 0) << ids << ": " << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["prompt_tokens"], 2) << ids;
  }
}

TEST(Cli, ParseErrorsAreOneLineNamingTheFlag) {
  const std::string m = golden::model_path("qwen3_tied");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"generate " + m + " --input-ids 1 --max-new-tokens 0", "--max-new-tokens"},  // out of range
      {"generate " + m + " --input-ids 1 --top-k abc", "--top-k"},                  // wrong type
      {"generate " + m + " --input-ids 1 --nope", "--nope"},                        // unknown flag
      {"forward " + m, "--input-ids"},                                              // missing required option
      {"generate " + m + " --input-ids 1 --temperature", "--temperature"},          // missing value
      {"generate " + m + " --input-ids 1 --seed -1", "--seed"},
      {"generate " + m + " --input-ids 1 --tp-plan ''", "--tp-plan"},
      {"generate " + m + " --input-ids 1 --buckets 0", "--buckets"},
      {"generate " + m + " --input-ids 1 --do-sample --temperature 0", "--temperature"},
      {"generate " + m + " --input-ids 1 --top-p 0", "--top-p"},
      {"generate " + m + " --input-ids 1 --greedy --do-sample", "--greedy"},
      {"chat " + m + " --top-k -3", "--top-k"},
      {"bench --new-tokens 1", "--new-tokens"},
      {"frobnicate", "frobnicate"},
  };
  for (const auto& [args, flag] : cases) {
    Result r = run(args);
    EXPECT_TRUE(one_error_line(r)) << args << ": exit " << r.code << ", " << r.err;
    EXPECT_NE(r.err.find(flag), std::string::npos) << args << ": " << r.err;
  }
  for (const char* ok : {"--help", "--version", "generate --help", "chat --help", "launch --help"}) {
    Result r = run(ok);
    EXPECT_EQ(r.code, 0) << ok << ": " << r.err;
    EXPECT_FALSE(r.out.empty()) << ok;
  }
  Result help = run("generate --help");
  for (const char* flag : {"--greedy", "--do-sample", "--max-length", "--max-new-tokens"})
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
}

TEST(Cli, ModelGenerationDefaultsApplyAndFlagsOverrideOnlyWhatTheyName) {
  Scratch m("qwen3_tied");  // with Qwen3-0.6B's generation_config.json: samples by default
  fs::copy_file(fs::path(TESSERA_SOURCE_DIR) / "tests/fixtures/generation/qwen3_0.6b/generation_config.json",
                m.dir / "generation_config.json", fs::copy_options::overwrite_existing);
  auto gen = [&](const std::string& flags) {
    Result r = run("generate " + m.path() + " --input-ids 1,2,3 --json --seed 5 " + flags);
    EXPECT_EQ(r.code, 0) << flags << ": " << r.err;
    return r.code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  };
  auto d = gen("");
  const auto& g = d["generation_config"];
  EXPECT_EQ(g["do_sample"], true);
  EXPECT_EQ(g["temperature"], 0.6);
  EXPECT_EQ(g["top_k"], 20);
  EXPECT_EQ(g["top_p"], 0.95);
  EXPECT_EQ(g["eos_token_id"], nlohmann::json({151645, 151643}));
  EXPECT_EQ(g["pad_token_id"], 151643);
  EXPECT_TRUE(g["max_new_tokens"].is_null());
  EXPECT_EQ(g["max_length"], 23);  // Transformers' default: 20 new tokens after the 3-token prompt
  EXPECT_EQ(d["new_tokens"], 20);

  auto greedy = gen("--greedy");
  EXPECT_EQ(greedy["generation_config"]["do_sample"], false);
  EXPECT_EQ(greedy["generation_config"]["top_k"], 20);  // untouched
  EXPECT_NE(greedy["ids"], d["ids"]);
  EXPECT_EQ(gen("--do-sample false")["ids"], greedy["ids"]);
  EXPECT_EQ(gen("--do-sample=false")["ids"], greedy["ids"]);
  EXPECT_EQ(gen("--do-sample true")["ids"], d["ids"]);

  auto t = gen("--temperature 0.9");
  EXPECT_EQ(t["generation_config"]["temperature"], 0.9);
  EXPECT_EQ(t["generation_config"]["top_p"], 0.95);
  auto len = gen("--max-length 8");
  EXPECT_EQ(len["new_tokens"], 5);  // max_length counts the prompt
  EXPECT_EQ(len["generation_config"]["max_length"], 8);
  auto both = gen("--max-length 8 --max-new-tokens 2");
  EXPECT_EQ(both["new_tokens"], 2);
  EXPECT_TRUE(one_error_line(run("generate " + m.path() + " --input-ids 1,2,3 --max-length 3")));

  // A bad file is refused at load, naming it and the field.
  std::ofstream(m.dir / "generation_config.json") << R"({"do_sample": "yes"})";
  Result bad = run("generate " + m.path() + " --input-ids 1,2,3");
  EXPECT_TRUE(one_error_line(bad)) << bad.err;
  EXPECT_NE(bad.err.find("do_sample"), std::string::npos) << bad.err;
}

TEST(Cli, ChatKeepsTheGivenMaxNewTokens) {
  if (smollm2().empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed";
  Result r = run("chat --max-new-tokens 64 --dtype float32",
                 "Write a very long story about a dragon and a knight.\n");
  ASSERT_EQ(r.code, 0) << r.err;
  const size_t at = r.err.rfind("[");
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_LE(std::stoi(r.err.substr(at + 1)), 64) << r.err;  // was silently raised to 512
}

TEST(Cli, ChatInputWithInvalidUtf8IsRepairedAsPlainGenerateDoes) {
  if (smollm2().empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed";
  Result g =
      run("generate --chat --quiet --max-new-tokens 2 --prompt \"$(printf 'Hi \\377 there')\" --system "
          "\"$(printf '\\376')\"");
  EXPECT_EQ(g.code, 0) << g.err;
  Result c = run("chat --quiet --max-new-tokens 2 --system \"$(printf 'x\\303')\"", "Hello \xff\xfe\n");
  EXPECT_EQ(c.code, 0) << c.err;
}

TEST(Cli, NonFiniteLogitsAreAnErrorNotOutput) {
  Scratch m("qwen3_tied");  // float32: model.norm.weight set to NaN
  {
    std::fstream f(m.dir / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string header(n, '\0');
    f.read(header.data(), static_cast<std::streamsize>(n));
    const auto off = nlohmann::json::parse(header)["model.norm.weight"]["data_offsets"];
    const float nan = std::numeric_limits<float>::quiet_NaN();
    f.seekp(static_cast<std::streamoff>(8 + n + off[0].get<uint64_t>()));
    for (uint64_t i = off[0]; i < off[1].get<uint64_t>(); i += 4)
      f.write(reinterpret_cast<const char*>(&nan), 4);
  }
  Result fwd = run("forward " + m.path() + " --json --input-ids 1,2");
  EXPECT_TRUE(one_error_line(fwd)) << fwd.err;
  EXPECT_NE(fwd.err.find("non-finite logit"), std::string::npos) << fwd.err;
  EXPECT_EQ(fwd.out.find("nan"), std::string::npos) << "printed NaN as JSON";
  Result gen = run("generate " + m.path() + " --input-ids 1,2 --max-new-tokens 3 --json");
  EXPECT_TRUE(one_error_line(gen)) << gen.err;
  EXPECT_NE(gen.err.find("step 0"), std::string::npos) << gen.err;
}

}  // namespace

TEST(Cli, GenerateKeepsToAJsonSchemaARegexAndAGrammar) {
  if (smollm2().empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed";
  const std::string dir = ::testing::TempDir();
  const std::string schema = dir + "cli_schema.json", grammar = dir + "cli_grammar.lark";
  std::ofstream(schema) << R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                             "required": ["city"], "additionalProperties": false})";
  std::ofstream(grammar) << R"(start: ("yes" | "no") "!")";
  Result r =
      run("generate --chat --quiet --json --max-new-tokens 60 --prompt 'Where is the Eiffel tower?' "
          "--json-schema " +
          schema);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto answer = nlohmann::json::parse(j["text"].get<std::string>());
  EXPECT_TRUE(answer.is_object() && answer.size() == 1 && answer["city"].is_string()) << j["text"];
  EXPECT_EQ(j["finish_reason"], "eos");
  EXPECT_EQ(j["constraint"]["kind"], "json_schema");
  r = run("generate --chat --quiet --max-new-tokens 20 --prompt 'Your number?' --regex '[0-9]{3}-[0-9]{4}'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.size(), 9u) << r.out;  // ddd-dddd and a newline
  r = run("generate --chat --quiet --max-new-tokens 20 --prompt 'Is it blue?' --grammar " + grammar);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.out == "yes!\n" || r.out == "no!\n") << r.out;
  r = run("generate --chat --quiet --json --max-new-tokens 200 --prompt 'Describe a cat.' --json-object");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(nlohmann::json::parse(r.out)["text"].get<std::string>()).is_object());
}

TEST(Cli, ConstraintFlagErrorsAreOneLineNamingTheFlag) {
  if (smollm2().empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed";
  const std::string bad = ::testing::TempDir() + "cli_bad_schema.json";
  std::ofstream(bad) << R"({"type": "array", "uniqueItems": true})";
  struct Case {
    std::string args, words;
  };
  const std::vector<Case> cases = {
      {"--json-schema /nonexistent/schema.json", "/nonexistent/schema.json"},
      {"--json-schema " + bad, "uniqueItems"},
      {"--regex '(unclosed'", "--regex"},
      {"--json-object --regex a", "--regex"},
      {"/nonexistent/dir --input-ids 1,2,3 --json-object", "/nonexistent/dir"},
  };
  for (const auto& c : cases) {
    Result r =
        run("generate --quiet --max-new-tokens 4 " +
            (c.args.find("--input-ids") == std::string::npos ? std::string("--prompt hi ") : "") + c.args);
    EXPECT_EQ(r.code, 1) << c.args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.words), std::string::npos) << c.args << ": " << r.err;
  }
  // Without llguidance: one line saying how to install it.
  const std::string env = "TESSERA_LLGUIDANCE=/nonexistent/_lib.abi3.so ";
  const int status = std::system((env + TESSERA_CLI_PATH +
                                  " generate --quiet --max-new-tokens 4 --prompt hi "
                                  "--json-object >/dev/null 2>" +
                                  ::testing::TempDir() + "cli_nollg.err")
                                     .c_str());
  std::ifstream f(::testing::TempDir() + "cli_nollg.err");
  const std::string err((std::istreambuf_iterator<char>(f)), {});
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(err.find("pip install llguidance"), std::string::npos) << err;
}
