// Generation defaults resolved as Transformers resolves them: goldens from tools/make_generation_goldens.py
// (transformers' own generate() on real generation_config.json files, with and without the caller's kwargs),
// the typed reader's refusals, and the loaded model using its file's defaults.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "golden_util.h"
#include "default_model.h"
#include "pjrt_test_util.h"
#include "tessera/error.h"
#include "tessera/generation.h"
#include "tessera/model.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(TESSERA_SOURCE_DIR) / "tests/fixtures/generation";

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<int32_t> as_list(const nlohmann::json& v) {  // Transformers keeps eos as given: int, list or null
  if (v.is_null()) return {};
  if (v.is_number()) return {v.get<int32_t>()};
  return v.get<std::vector<int32_t>>();
}

std::optional<int32_t> as_opt(const nlohmann::json& v) {
  return v.is_null() ? std::nullopt : std::optional<int32_t>(v.get<int32_t>());
}

std::vector<fs::path> fixture_dirs() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(kFixtures))
    if (e.is_directory()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// The processors Transformers builds for these settings, by Tessera's rule for each (sampler.cpp applies the
// warpers only when sampling, top_k 0 and min_p 0 being off).
std::set<std::string> active_processors(const GenerationConfig& g) {
  std::set<std::string> s;
  if (g.repetition_penalty != 1.0f) s.insert("RepetitionPenaltyLogitsProcessor");
  if (!g.do_sample) return s;
  if (g.temperature != 1.0f) s.insert("TemperatureLogitsWarper");
  if (g.top_k != 0) s.insert("TopKLogitsWarper");
  if (g.top_p < 1.0f) s.insert("TopPLogitsWarper");
  if (g.min_p > 0.0f) s.insert("MinPLogitsWarper");
  return s;
}

// Every case of one golden: the caller's kwargs over `defaults` must resolve as Transformers resolved them.
void expect_cases_resolve(const std::string& name, const GenerationConfig& defaults,
                          const nlohmann::json& golden) {
  const int64_t max_pos = golden["max_position_embeddings"].get<int64_t>();
  ASSERT_GE(golden["cases"].size(), 10u);
  for (const auto& c : golden["cases"]) {
    const std::string where = name + " / " + c["name"].get<std::string>();
    const GenerationConfig g =
        GenerationConfig::merged(defaults, GenerationOverrides::from_json(c["kwargs"].dump(), "kwargs"));
    const auto& r = c["resolved"];
    if (r["max_new_tokens"].is_null())
      EXPECT_FALSE(g.max_new_tokens) << where;
    else
      EXPECT_EQ(g.max_new_tokens, r["max_new_tokens"].get<int>()) << where;
    EXPECT_EQ(g.max_length, r["max_length"].get<int>()) << where;
    EXPECT_EQ(g.do_sample, r["do_sample"].get<bool>()) << where;
    EXPECT_EQ(g.temperature, r["temperature"].get<float>()) << where;
    EXPECT_EQ(g.top_k, r["top_k"].get<int>()) << where;
    EXPECT_EQ(g.top_p, r["top_p"].get<float>()) << where;
    EXPECT_EQ(g.min_p, r["min_p"].is_null() ? 0.0f : r["min_p"].get<float>()) << where;
    EXPECT_EQ(g.repetition_penalty, r["repetition_penalty"].get<float>()) << where;
    EXPECT_EQ(g.eos_token_id, as_list(r["eos_token_id"])) << where;
    EXPECT_EQ(g.pad_token_id, as_opt(r["pad_token_id"])) << where;
    EXPECT_EQ(g.bos_token_id, as_opt(r["bos_token_id"])) << where;
    EXPECT_EQ(g.cache_implementation,
              r["cache_implementation"].is_null() ? "static" : r["cache_implementation"].get<std::string>())
        << where;
    EXPECT_NO_THROW(g.validate()) << where;
    const int prompt = c["prompt_len"].get<int>();
    if (c.contains("error")) {
      EXPECT_THROW(g.new_token_budget(prompt, max_pos), Error) << where << ": " << c["error"];
      continue;
    }
    EXPECT_EQ(g.new_token_budget(prompt, max_pos), c["new_tokens"].get<int>()) << where;
    const auto& p = c["prepared"];
    EXPECT_EQ(g.effective_pad_token_id(), as_opt(p["pad_token_id"])) << where;
    EXPECT_EQ(g.eos_token_id, p["eos_token_ids"].get<std::vector<int32_t>>()) << where;
    const auto procs = p["logits_processors"].get<std::vector<std::string>>();
    EXPECT_EQ(active_processors(g), std::set<std::string>(procs.begin(), procs.end())) << where;
  }
}

TEST(GenerationConfigGolden, ResolvesRealFilesAsTransformers) {
  const auto dirs = fixture_dirs();
  ASSERT_GE(dirs.size(), 6u);
  for (const fs::path& dir : dirs) {
    const std::string name = dir.filename().string();
    const nlohmann::json golden = golden::load_json((dir / "golden.json").string());
    // What from_pretrained reads: generation_config.json, else config.json (Transformers' from_model_config).
    const bool has_file = golden["has_generation_config"].get<bool>();
    ASSERT_EQ(has_file, fs::exists(dir / "generation_config.json")) << name;
    const fs::path src = has_file ? dir / "generation_config.json" : dir / "config.json";
    expect_cases_resolve(name, GenerationConfig::from_json(slurp(src), src.string()), golden);
  }
}

TEST(GenerationConfigGolden, ShippedSmolLM2GgufResolvesAsTransformers) {
  std::string path;
  try {
    path = cli::find_default_model();
  } catch (const Error&) {
    GTEST_SKIP() << "SmolLM2 GGUF not installed";
  }
  LoadOptions opt;
  opt.dtype = DType::F32;
  CausalLM m = AutoModelForCausalLM::from_pretrained(path, opt);
  const auto golden = golden::load_json((kFixtures / "smollm2_135m_instruct_gguf.json").string());
  EXPECT_EQ(m.info().max_position_embeddings, golden["max_position_embeddings"].get<int64_t>());
  expect_cases_resolve("smollm2 gguf", m.generation_config(), golden);
}

TEST(GenerationConfigGolden, Qwen3SamplesByDefault) {  // the case the issue names, spelled out
  const GenerationConfig g =
      GenerationConfig::from_json(slurp(kFixtures / "qwen3_0.6b/generation_config.json"), "qwen3");
  EXPECT_TRUE(g.do_sample);
  EXPECT_FLOAT_EQ(g.temperature, 0.6f);
  EXPECT_FLOAT_EQ(g.top_p, 0.95f);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_EQ(g.new_token_budget(10, 40960), 20);
  GenerationOverrides greedy;
  greedy.do_sample = false;
  EXPECT_FALSE(GenerationConfig::merged(g, greedy).do_sample);
  EXPECT_EQ(GenerationConfig::merged(g, greedy).top_k, 20);  // only what the caller names changes
}

std::string reader_error(const std::string& text) {
  try {
    GenerationOverrides::from_json(text, "gen.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(GenerationConfigReader, TypeAndRangeCheckEveryField) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"pad_token_id": "0"})", "pad_token_id"},
      {R"({"pad_token_id": -1})", "pad_token_id"},
      {R"({"bos_token_id": 1.5})", "bos_token_id"},
      {R"({"do_sample": "true"})", "do_sample"},
      {R"({"do_sample": 1})", "do_sample"},
      {R"({"temperature": "0.6"})", "temperature"},
      {R"({"temperature": -1})", "temperature"},
      {R"({"temperature": 1e300})", "temperature"},
      {R"({"eos_token_id": 1099511627776})", "eos_token_id"},
      {R"({"eos_token_id": [2, 1099511627776]})", "eos_token_id"},
      {R"({"eos_token_id": -1})", "eos_token_id"},
      {R"({"eos_token_id": ["2"]})", "eos_token_id"},
      {R"({"eos_token_id": 18446744073709551615})", "eos_token_id"},
      {R"({"max_new_tokens": 1e300})", "max_new_tokens"},
      {R"({"max_new_tokens": 0})", "max_new_tokens"},
      {R"({"max_new_tokens": 4294967296})", "max_new_tokens"},
      {R"({"max_new_tokens": "20"})", "max_new_tokens"},
      {R"({"max_length": -5})", "max_length"},
      {R"({"top_k": 20.0})", "top_k"},
      {R"({"top_k": -1})", "top_k"},
      {R"({"top_p": 1.5})", "top_p"},
      {R"({"min_p": "x"})", "min_p"},
      {R"({"repetition_penalty": [1]})", "repetition_penalty"},
      {R"({"cache_implementation": "offloaded"})", "cache_implementation"},
      {R"({"cache_implementation": 3})", "cache_implementation"},
      {R"({"num_beams": 4})", "num_beams"},  // output-changing features Tessera lacks: refused, not ignored
      {R"({"num_beams": "1"})", "num_beams"},
      {R"({"no_repeat_ngram_size": 3})", "no_repeat_ngram_size"},
      {R"({"typical_p": 0.9})", "typical_p"},
      {R"({"suppress_tokens": [5]})", "suppress_tokens"},
      {R"({"forced_eos_token_id": 2})", "forced_eos_token_id"},
      {R"([1, 2])", "object"},
      {R"({oops)", "JSON"},
  };
  for (const auto& [text, field] : bad) {
    const std::string e = reader_error(text);
    EXPECT_NE(e.find("gen.json"), std::string::npos) << text << " -> " << e;
    EXPECT_NE(e.find(field), std::string::npos) << text << " -> " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // null is unset; "hybrid" is Transformers' old default, which it unsets too.
  const GenerationOverrides o = GenerationOverrides::from_json(
      R"({"temperature": null, "cache_implementation": "hybrid", "x": 1})", "g");
  EXPECT_FALSE(o.temperature);
  EXPECT_FALSE(o.cache_implementation);
  EXPECT_EQ(GenerationOverrides::from_json(R"({"eos_token_id": 2147483647})", "g").eos_token_id,
            std::vector<int32_t>{2147483647});
  // Their no-op values are fine (old config.json files spell every one out).
  EXPECT_NO_THROW(GenerationOverrides::from_json(
      R"({"num_beams": 1, "no_repeat_ngram_size": 0, "typical_p": 1.0, "bad_words_ids": null, "suppress_tokens": []})",
      "g"));
  // A value valid alone but not together is refused when the file is read, naming the file and field.
  try {
    GenerationConfig::from_json(R"({"do_sample": true, "temperature": 0})", "gen.json");
    ADD_FAILURE() << "accepted temperature 0 with do_sample";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gen.json: field 'temperature'"), std::string::npos) << e.what();
  }
}

TEST(GenerationConfig, BudgetFollowsTransformersLengthRules) {
  GenerationConfig g;  // the global defaults: 20 new tokens, within the model's positions
  EXPECT_EQ(g.new_token_budget(5, 256), 20);
  EXPECT_EQ(g.new_token_budget(250, 256), 6);
  EXPECT_THROW(g.new_token_budget(256, 256), Error);
  g.max_length = 12;  // a file's max_length counts the prompt
  g.max_length_is_default = false;
  EXPECT_EQ(g.new_token_budget(5, 256), 7);
  EXPECT_THROW(g.new_token_budget(12, 256), Error);
  g.max_new_tokens = 3;  // max_new_tokens wins
  EXPECT_EQ(g.new_token_budget(12, 256), 3);
  g.max_new_tokens = 0;
  EXPECT_THROW(g.validate(), Error);
}

// A scratch copy of a fixture model.
class Scratch {
 public:
  explicit Scratch(const std::string& fixture) {
    dir_ = fs::temp_directory_path() /
           ("tessera_gencfg_" + std::to_string(::getpid()) + "_" + std::to_string(n_++));
    fs::remove_all(dir_);
    fs::copy(golden::model_path(fixture), dir_, fs::copy_options::recursive);
  }
  ~Scratch() { fs::remove_all(dir_); }
  std::string path() const { return dir_.string(); }
  fs::path file(const std::string& name) const { return dir_ / name; }

 private:
  static inline int n_ = 0;
  fs::path dir_;
};

CausalLM load(const std::string& path) {
  LoadOptions opt;
  opt.dtype = DType::F32;
  return AutoModelForCausalLM::from_pretrained(path, opt);
}

TEST(GenerationConfigModel, FromPretrainedUsesTheFileAndItsLengthRules) {
  Scratch m("qwen3_tied");
  fs::copy_file(kFixtures / "qwen3_0.6b/generation_config.json", m.file("generation_config.json"),
                fs::copy_options::overwrite_existing);
  CausalLM model = load(m.path());
  const GenerationConfig& d = model.generation_config();
  EXPECT_TRUE(d.do_sample);
  EXPECT_FLOAT_EQ(d.temperature, 0.6f);
  EXPECT_EQ(d.top_k, 20);
  EXPECT_FLOAT_EQ(d.top_p, 0.95f);
  EXPECT_EQ(d.eos_token_id, (std::vector<int32_t>{151645, 151643}));
  EXPECT_FALSE(d.max_new_tokens);
  GenerationConfig g = d;
  g.seed = 7;
  auto out = model.generate({{5, 6, 7}}, {}, g);  // no eos in this vocabulary: the whole default budget
  EXPECT_EQ(out.new_tokens, 20);

  // max_length only: prompt + new tokens = max_length.
  std::ofstream(m.file("generation_config.json")) << R"({"max_length": 12, "eos_token_id": 2})";
  CausalLM capped = load(m.path());
  GenerationConfig c = capped.generation_config();
  c.eos_token_id.clear();
  EXPECT_EQ(capped.generate({{5, 6, 7, 8, 9}}, {}, c).new_tokens, 7);
  EXPECT_THROW(capped.generate({std::vector<int32_t>(12, 5)}, {}, c), Error);
}

TEST(GenerationConfigModel, WithoutTheFileConfigJsonSpecialTokensOnly) {
  Scratch m("qwen3_tied");
  fs::remove(m.file("generation_config.json"));
  CausalLM model = load(m.path());
  const GenerationConfig& d = model.generation_config();
  // config.json: bos 1, eos 2, pad 0; everything else Transformers' global defaults.
  EXPECT_EQ(d.eos_token_id, std::vector<int32_t>{2});
  EXPECT_EQ(d.pad_token_id, 0);
  EXPECT_EQ(d.bos_token_id, 1);
  EXPECT_FALSE(d.do_sample);
  EXPECT_EQ(d.top_k, 50);
  EXPECT_TRUE(d.max_length_is_default);
}

TEST(GenerationConfigModel, BadFileIsRefusedAtLoadNamingTheField) {
  Scratch m("qwen3_tied");
  std::ofstream(m.file("generation_config.json")) << R"({"pad_token_id": "0"})";
  try {
    load(m.path());
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pad_token_id"), std::string::npos) << e.what();
  }
}

// Overwrites every float of tensor `name` in an F32 model.safetensors with NaN.
void poison_tensor(const fs::path& file, const std::string& name) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  const auto h = nlohmann::json::parse(header);
  ASSERT_TRUE(h.contains(name)) << name;
  ASSERT_EQ(h[name]["dtype"], "F32");
  const uint64_t begin = h[name]["data_offsets"][0], end = h[name]["data_offsets"][1];
  const float nan = std::numeric_limits<float>::quiet_NaN();
  f.seekp(static_cast<std::streamoff>(8 + header_len + begin));
  for (uint64_t i = begin; i < end; i += 4) f.write(reinterpret_cast<const char*>(&nan), 4);
}

TEST(NonFiniteLogits, AreAnErrorNamingWhereNotOutput) {
  Scratch m("qwen3_tied");  // stored in float32
  poison_tensor(m.file("model.safetensors"), "model.norm.weight");
  CausalLM model = load(m.path());
  try {
    model.forward({1, 2, 3});
    ADD_FAILURE() << "forward returned NaN logits";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite logit"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("position 0"), std::string::npos) << e.what();
  }
  GenerationConfig g;
  g.max_new_tokens = 4;
  for (bool sample : {false, true}) {
    g.do_sample = sample;
    try {
      model.generate({{1, 2, 3}}, {}, g);
      ADD_FAILURE() << "generate returned tokens from NaN logits";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("step 0"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("non-finite logit"), std::string::npos) << e.what();
    }
  }
}

}  // namespace

namespace {

// Transformers 5 leaves each row's left padding out of the repetition penalty; the golden's pad id is one
// whose penalty would change the tokens (tools/make_generation_goldens.py checks that).
void expect_padded_repetition_golden(const std::string& device) {
  const auto j = golden::load_json((kFixtures / "padded_repetition_penalty.json").string());
  LoadOptions opt;
  opt.dtype = DType::F32;
  opt.device_map = device;
  CausalLM m = AutoModelForCausalLM::from_pretrained(golden::model_path(j["model"].get<std::string>()), opt);
  GenerationConfig g;
  g.max_new_tokens = j["max_new_tokens"].get<int>();
  g.repetition_penalty = j["repetition_penalty"].get<float>();
  g.pad_token_id = j["pad_token_id"].get<int32_t>();
  g.eos_token_id = {j["eos_token_id"].get<int32_t>()};
  const auto out = m.generate(j["input_ids"].get<std::vector<std::vector<int32_t>>>(),
                              j["attention_mask"].get<std::vector<std::vector<int32_t>>>(), g);
  EXPECT_EQ(nlohmann::json(out.sequences), j["output_ids"]) << device;
  EXPECT_NE(j["output_ids"], j["output_ids_if_padding_were_penalised"]);
}

TEST(RepetitionPenalty, LeftPaddingIsNotPenalisedAsInTransformers) { expect_padded_repetition_golden("cpu"); }

TEST(RepetitionPenalty, LeftPaddingIsNotPenalisedInTheCompiledStep) {  // PJRT: the penalty runs on the device
  REQUIRE_XLA_CPU();
  expect_padded_repetition_golden("xla-cpu");
}

}  // namespace
