// Tensor-parallel runs of the `tessera` binary from tests: ranks started by `tessera launch` (mpirun),
// compared with one process (tests/test_tp.cpp, tests/test_model_families.cpp). Header-only; tests only.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_util.h"

namespace tessera::testing {

// The arguments of `tessera` that start `n` ranks on this host, each running `tessera <what follows>`.
inline std::string launch(int n) {
  return "launch --nproc-per-node " + std::to_string(n) + " -- " + TESSERA_CLI_PATH + " ";
}

struct TpCase {
  std::string model;                              // a checkpoint directory
  int tp;                                         // ranks
  std::string flags;                              // plan flags (e.g. --tp-plan auto)
  std::string prompt = "1,17,33,250,7,99,512,3";  // --input-ids (the vocab 1024 fixtures)
  std::string device = "cpu";
  std::string run_flags = "";  // flags of both runs (e.g. --exact-bf16-matmul)
};

// One prompt from one process and from `tp` ranks: every position's logits within 1e-4 (on the native cpu
// backend; rank 0's stdout only: one JSON document) and 16 greedy tokens identical; rank 0 of `tp` says so
// and holds a share of the weights, not the whole model.
inline void expect_tp_same_as_one_process(const TpCase& c) {
  SCOPED_TRACE(c.model + " tp=" + std::to_string(c.tp) + " " + c.flags + " on " + c.device);
  const std::string common = c.model + " --dtype float32 --json --device " + c.device + " --input-ids " +
                             c.prompt + " " + c.run_flags;
  const std::string tp = " --tp-size " + std::to_string(c.tp) + " " + c.flags;
  if (c.device == "cpu") {
    const std::string fwd = "forward " + common;
    auto one = run_cli(fwd), many = run_cli(launch(c.tp) + fwd + tp);
    ASSERT_EQ(one.code, 0) << one.err;
    ASSERT_EQ(many.code, 0) << many.err;
    auto a = nlohmann::json::parse(one.out)["logits"].get<std::vector<std::vector<double>>>();
    auto b = nlohmann::json::parse(many.out)["logits"].get<std::vector<std::vector<double>>>();
    ASSERT_EQ(a.size(), b.size());
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].size(), b[i].size());
      for (size_t k = 0; k < a[i].size(); ++k) worst = std::max(worst, std::abs(a[i][k] - b[i][k]));
    }
    EXPECT_LE(worst, 1e-4);
  }
  const std::string gen = "generate " + common + " --max-new-tokens 16";
  auto one = run_cli(gen), many = run_cli(launch(c.tp) + gen + tp);
  ASSERT_EQ(one.code, 0) << one.err;
  ASSERT_EQ(many.code, 0) << many.err;
  auto ja = nlohmann::json::parse(one.out), jb = nlohmann::json::parse(many.out);
  EXPECT_EQ(ja["ids"], jb["ids"]);
  EXPECT_EQ(jb["tp_size"], c.tp);
  EXPECT_EQ(jb["tp_rank"], 0);
  EXPECT_LT(jb["weight_bytes"].get<double>(), ja["weight_bytes"].get<double>());
}

}  // namespace tessera::testing
