// Loads the Transformers goldens made by tools/make_model_goldens.py (schema in
// tests/fixtures/models/README.md). Header-only; tests only.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/error.h"
#include "tessera/model.h"

namespace tessera::golden {

// <source>/tests/fixtures/models/<rel>, e.g. model_path("qwen3_tied") or model_path("smollm2_golden.json").
inline std::string model_path(std::string_view rel) {
  return std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/models/" + std::string(rel);
}

// <source>/tests/fixtures/variants/<name> (tools/make_variant_goldens.py), e.g.
// variant_path("qwen3_sliding").
inline std::string variant_path(std::string_view name) {
  return std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/variants/" + std::string(name);
}

// A tiny checkpoint loaded with float32 weights (the goldens' dtype).
inline CausalLM load_f32(std::string_view name) {
  LoadOptions opt;
  opt.dtype = DType::F32;
  return AutoModelForCausalLM::from_pretrained(model_path(name), opt);
}

// A made-up prompt of `len` ids in [3, vocab), different for each `salt` (tests that need prompts, not
// goldens).
inline std::vector<int32_t> made_up_ids(int len, int salt, int64_t vocab) {
  std::vector<int32_t> v(static_cast<size_t>(len));
  for (int i = 0; i < len; ++i)
    v[static_cast<size_t>(i)] = static_cast<int32_t>(3 + (i * 37 + salt * 101 + i * i * salt) % (vocab - 3));
  return v;
}

// The tiny checkpoints with Transformers goldens: the folders of tests/fixtures/models holding a golden.json,
// sorted.
inline std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(model_path("")))
    if (e.is_directory() && std::filesystem::exists(e.path() / "golden.json"))
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Parses a JSON file; a missing or malformed file throws tessera::Error naming it.
inline nlohmann::json load_json(const std::string& path);

// Whether fixture `name` has linear-attention layers (Qwen3.5): a recurrent state per sequence besides keys
// and values, which a cached prefix or a rejected draft cannot rewind.
inline bool has_recurrent_state(const std::string& name) {
  const nlohmann::json cfg = load_json(model_path(name + "/config.json"));
  const auto it = cfg.find("layer_types");
  if (it == cfg.end() || !it->is_array()) return false;
  for (const auto& t : *it)
    if (t == "linear_attention") return true;
  return false;
}
// Every golden model whose sequences are keys and values by position only (prefix caching and speculative
// decoding apply to these).
inline std::vector<std::string> positional_model_names() {
  std::vector<std::string> out;
  for (const std::string& n : model_names())
    if (!has_recurrent_state(n)) out.push_back(n);
  return out;
}

// Parses a JSON file; a missing or malformed file throws tessera::Error naming it.
inline nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(path, ": cannot open golden file (run tools/make_model_goldens.py)");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(path, ": golden file is not valid JSON");
  return j;
}

// <model>/golden.json of a tiny checkpoint.
inline nlohmann::json load_model_golden(std::string_view model) {
  return load_json(model_path(std::string(model) + "/golden.json"));
}

// A JSON array of token ids -> int64 vector.
inline std::vector<int64_t> ids(const nlohmann::json& a) { return a.get<std::vector<int64_t>>(); }

// Row-major floats of a JSON matrix.
struct Matrix {
  size_t rows = 0;
  size_t cols = 0;
  std::vector<float> data;  // [rows, cols]
  std::span<const float> row(size_t r) const { return {data.data() + r * cols, cols}; }
};

// A JSON [[...], ...] matrix (e.g. "logits") -> Matrix; ragged rows throw tessera::Error.
inline Matrix matrix(const nlohmann::json& m) {
  Matrix out;
  out.rows = m.size();
  out.cols = out.rows ? m[0].size() : 0;
  out.data.reserve(out.rows * out.cols);
  for (size_t r = 0; r < out.rows; ++r) {
    if (m[r].size() != out.cols)
      fail("golden matrix row ", r, " has ", m[r].size(), " values, expected ", out.cols);
    for (const auto& v : m[r]) out.data.push_back(v.get<float>());
  }
  return out;
}

// Largest |a[i] - b[i]| and where it is; a size mismatch gives +inf at index 0, a NaN gives NaN at its index.
struct Diff {
  double max_abs = 0.0;
  size_t index = 0;
};
inline Diff max_abs_diff(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return {INFINITY, 0};
  Diff d;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (std::isnan(e)) return {e, i};  // a NaN anywhere fails any tolerance
    if (e > d.max_abs) d = {e, i};
  }
  return d;
}

}  // namespace tessera::golden
