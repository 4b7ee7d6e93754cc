// Shared by the tests of whole models against the Transformers goldens, on the native cpu backend and on
// xla-cpu (tests/test_model_families.cpp, tests/test_model_variants.cpp): token ids from the goldens, greedy
// settings, and a test fixture per (checkpoint, device) case. Header-only; tests only.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "golden_util.h"
#include "pjrt_test_util.h"
#include "tessera/model.h"

namespace tessera::model_test {

// A JSON array of token ids as the int32 ids generate() takes; a JSON array of such arrays.
inline std::vector<int32_t> to32(const nlohmann::json& j) {
  auto v = golden::ids(j);
  return {v.begin(), v.end()};
}
inline std::vector<std::vector<int32_t>> rows32(const nlohmann::json& j) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& r : j) out.push_back(to32(r));
  return out;
}

// Greedy decoding of `n` new tokens, rows padded with id 0; stopping at the id `eos` where it is given.
inline GenerationConfig greedy(int n, const nlohmann::json& eos = nullptr) {
  GenerationConfig g;
  g.max_new_tokens = n;
  g.pad_token_id = 0;
  if (!eos.is_null()) g.eos_token_id = {eos.get<int32_t>()};
  return g;
}

using Param = std::tuple<const char*, const char*>;  // (checkpoint, device)

// The name of a case: "<checkpoint>_<device>", '-' as '_' (qwen2_xla_cpu).
inline std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string dev = std::get<1>(info.param);
  for (char& ch : dev)
    if (ch == '-') ch = '_';
  return std::string(std::get<0>(info.param)) + "_" + dev;
}

// One checkpoint on one device; skipped on xla-cpu without the plugin.
class ModelOnDevice : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (xla()) REQUIRE_XLA_CPU();
  }
  const char* model() const { return std::get<0>(GetParam()); }
  const char* device() const { return std::get<1>(GetParam()); }
  bool xla() const { return std::string(device()) == "xla-cpu"; }
  std::string where() const { return std::string(model()) + " on " + device(); }
  // The checkpoint in `dir` on this case's device, loaded once per (dir, device, dtype) for the whole binary:
  // its compiled steps are reused across tests (xla-cpu compiles dominate the run time).
  CausalLM& load_once(const std::string& dir, DType dt) const {
    static std::map<std::string, std::unique_ptr<CausalLM>> loaded;
    auto& m = loaded[dir + "@" + device() + "@" + dtype_name(dt)];
    if (!m) {
      LoadOptions opt;
      opt.dtype = dt;
      opt.device_map = device();
      m = std::make_unique<CausalLM>(AutoModelForCausalLM::from_pretrained(dir, opt));
    }
    return *m;
  }
};

}  // namespace tessera::model_test
