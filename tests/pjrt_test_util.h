// Shared by the PJRT tests: skip cleanly when the XLA CPU plugin is not installed. Header-only; tests only.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/pjrt/pjrt_info.h"

namespace tessera::testing {

inline bool xla_cpu_plugin_available() {
  if (!pjrt::built_with_pjrt()) return false;
  std::vector<std::string> looked;
  return pjrt::locate_plugin("xla-cpu", looked).has_value();
}

}  // namespace tessera::testing

#define REQUIRE_XLA_CPU()                                                                       \
  if (!tessera::testing::xla_cpu_plugin_available())                                            \
  GTEST_SKIP() << "XLA CPU PJRT plugin not available (pip install xla-cpu-pjrt into .venv via " \
                  "scripts/setup.sh, then rebuild)"
