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

// Every target above x every integer dot product (Int8Dot) this CPU has at that level (the quantised
// kernels' parameter); the scalar level has none (its parameter's dot is unused).
struct Int8Target {
  Target t;
  Int8Dot dot;
};
inline void PrintTo(const Int8Target& q, std::ostream* os) {
  PrintTo(q.t, os);
  if (q.t.isa != Isa::Scalar) *os << " " << int8_dot_name(q.dot);
}

inline std::vector<Int8Target> int8_targets() {
  std::vector<Int8Target> out;
  for (const Target& t : all_targets()) {
    if (t.isa == Isa::Scalar) {
      out.push_back({t, Int8Dot::Avx2});
      continue;
    }
    const bool avx512 = t.isa == Isa::Avx512 || t.isa == Isa::Avx512Bf16;
    for (Int8Dot d : {Int8Dot::Avx2, Int8Dot::AvxVnni, Int8Dot::Avx512Vnni, Int8Dot::EmulatedVnni})
      if (int8_dot_supported(d) && (d != Int8Dot::Avx512Vnni || avx512)) out.push_back({t, d});
  }
  return out;
}

inline std::string int8_target_name(const ::testing::TestParamInfo<Int8Target>& info) {
  std::string name = target_name(::testing::TestParamInfo<Target>(info.param.t, info.index));
  if (info.param.t.isa == Isa::Scalar) return name;
  name += std::string("_") + int8_dot_name(info.param.dot);
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

// Selects the target's instruction set, thread count and integer dot for the test; restores the defaults.
class OnEachInt8Target : public ::testing::TestWithParam<Int8Target> {
 protected:
  void SetUp() override {
    set_isa(GetParam().t.isa);
    ThreadPool::instance().set_num_threads(GetParam().t.threads);
    if (GetParam().t.isa != Isa::Scalar) set_int8_dot(GetParam().dot);
  }
  void TearDown() override {
    reset_int8_dot();
    set_isa(best_isa());
    ThreadPool::instance().set_num_threads(0);
  }
};

}  // namespace tessera::cpu::kernel_targets
