// Shared by the kernel-package tests (test_kernel_packages.cpp, test_kernel_splice.cpp): the notes a call
// logs, one-line messages, and the helpers both use. Header-only; tests only.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "error_util.h"
#include "model_test_util.h"
#include "tessera/log.h"

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

// What both kernel-package test files use, in one place.
namespace tessera::kernel_test {
using model_test::greedy;
using model_test::to32;
using testing::error_of;
using testing::notes_of;
using testing::one_line;
}  // namespace tessera::kernel_test
