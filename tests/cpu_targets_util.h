// The cpu kernel tests' parameter: every instruction set this CPU supports x 1 and 2 pool threads, and a
// fixture that selects it for the test and restores the defaults after.
#pragma once
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/thread_pool.h"

namespace tessera::cpu::kernel_targets {

struct Target {
  Isa isa;
  int threads;
};
inline void PrintTo(const Target& t, std::ostream* os) {
  *os << isa_name(t.isa) << " x" << t.threads << " threads";
}

inline std::vector<Target> all_targets() {
  std::vector<Target> out;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16}) {
    if (!isa_supported(isa)) continue;
    for (int t : {1, 2}) out.push_back({isa, t});
  }
  return out;
}

inline std::string target_name(const ::testing::TestParamInfo<Target>& info) {
  return std::string(isa_name(info.param.isa)) + "_t" + std::to_string(info.param.threads);
}

class OnEachTarget : public ::testing::TestWithParam<Target> {
 protected:
  void SetUp() override {
    set_isa(GetParam().isa);
    ThreadPool::instance().set_num_threads(GetParam().threads);
  }
  void TearDown() override {
    set_isa(best_isa());
    ThreadPool::instance().set_num_threads(0);
  }
};

}  // namespace tessera::cpu::kernel_targets
