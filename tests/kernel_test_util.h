// Shared by the kernel-package tests (test_kernel_packages.cpp, test_kernel_splice.cpp, test_kernel_ffi.cpp):
// the notes a call logs, one-line messages, and the helpers both use. Header-only; tests only.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "error_util.h"
#include "golden_util.h"
#include "graph/graph.h"
#include "model_test_util.h"
#include "models/architecture.h"
#include "tessera/log.h"
#include "tessera/model.h"

namespace tessera::testing {

// The notes (LogLevel::Note) logged while `f` runs; the default log callback is restored after.
inline std::vector<std::string> notes_of(const std::function<void()>& f) {
  std::vector<std::string> notes;
  set_log_callback([&](LogLevel level, const std::string& m) {
    if (level == LogLevel::Note) notes.push_back(m);
  });
  try {
    f();
  } catch (...) {
    set_log_callback(nullptr);
    throw;
  }
  set_log_callback(nullptr);
  return notes;
}

// A message of one line (no newline inside).
inline bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == std::string::npos; }

}  // namespace tessera::testing

// What the kernel-package test files use, in one place.
namespace tessera::kernel_test {
// The graph of a tiny fixture model for one shape key (what a package is checked against).
inline graph::Graph tiny_graph(const std::string& model, const graph::ShapeKey& key) {
  auto cj = golden::load_json(golden::model_path(model + "/config.json"));
  const auto& arch = models::find_architecture(cj["architectures"][0].get<std::string>(), model);
  return arch.build_graph(arch.parse_config(cj, model), key);
}

// qwen3_tied in float32 on xla-cpu with these kernel packages.
inline CausalLM load_xla(const std::vector<std::string>& kernels) {
  LoadOptions opt;
  opt.dtype = DType::F32;
  opt.device_map = "xla-cpu";
  opt.kernels = kernels;
  return AutoModelForCausalLM::from_pretrained(golden::model_path("qwen3_tied"), opt);
}

using model_test::greedy;
using model_test::to32;
using testing::error_of;
using testing::notes_of;
using testing::one_line;
}  // namespace tessera::kernel_test
