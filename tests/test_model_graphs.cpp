// A refactoring guard for src/models and src/distributed/tp_plan: the graphs, weight lists and
// tensor-parallel resolutions of every fixture architecture are exactly what the previous implementation
// made.
//
// How the reference dumps were made: tests/fixtures/graph_dumps/*.txt were written by a throwaway program
// that called graph_dump::dump_fixture (tests/model_graph_dump.h, this same code) for each fixture, compiled
// against the sources of commit d1eefc3 (the shared LayerStyle decoder layer and the name-matching TP plan,
// before the per-architecture layers and role-driven plans replaced them):
//   git archive d1eefc3 src include | tar -x -C REF; cp tests/model_graph_dump.h REF/
//   g++ -std=c++20 -IREF/include -IREF/src gen.cpp REF/src/{models/*,graph/graph,distributed/tp_plan,
//       io/json_util,io/io_util,common/*}.cpp   (gen.cpp: write dump_fixture(dir, f) to dump_file_name(f))
// A deliberate change to what a model builds means regenerating them (the same way from the new code) and
// saying why in the commit. Regenerated so: every in-step sampling graph gained its token_mask input
// (constrained decoding on PJRT devices); nothing else changed. Regenerated again when ShapeKey::row_mapped()
// became "cache_rows > 0" (speculative steps give one cache row several step rows, so a step may name as
// many step rows as the cache has rows and still be mapped): the key "decode, batch 4, cache_rows 4" gained
// its cache_rows input; nothing else changed.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "model_graph_dump.h"

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The first differing line with a few lines of context before it (the dumps are ~100 KB each).
std::string first_difference(const std::string& want, const std::string& got) {
  const auto w = lines_of(want), g = lines_of(got);
  size_t i = 0;
  while (i < w.size() && i < g.size() && w[i] == g[i]) ++i;
  std::ostringstream os;
  os << "first difference at line " << i + 1 << "\n";
  for (size_t k = i >= 4 ? i - 4 : 0; k < i; ++k) os << "   " << w[k] << "\n";
  os << " - " << (i < w.size() ? w[i] : "(end of the reference)") << "\n";
  os << " + " << (i < g.size() ? g[i] : "(end of this build's dump)") << "\n";
  return os.str();
}

TEST(ModelGraphs, EveryFixtureBuildsWhatThePreviousImplementationBuilt) {
  const std::string root = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/";
  int compared = 0;
  for (const std::string& f : tessera::graph_dump::fixtures()) {
    const std::string want = read_text(root + "graph_dumps/" + tessera::graph_dump::dump_file_name(f));
    ASSERT_FALSE(want.empty()) << "missing reference dump for " << f;
    const std::string got = tessera::graph_dump::dump_fixture(root + f, f);
    EXPECT_TRUE(got == want) << f << ": " << first_difference(want, got);
    ++compared;
  }
  EXPECT_EQ(compared, 15);
}

TEST(ModelGraphs, TheGuardSeesADifference) {
  // The comparison above would notice one changed attribute: a dump of a graph with one node's eps changed
  // differs from the original's.
  const std::string root = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/";
  const std::string text = read_text(root + "models/qwen3_tied/config.json");
  const auto j = tessera::models::parse_config_json(text, "qwen3_tied");
  const auto& arch =
      tessera::models::find_architecture(tessera::models::architecture_name(j, "qwen3_tied"), "qwen3_tied");
  const auto c = arch.parse_config(j, "qwen3_tied");
  tessera::graph::ShapeKey key;
  key.phase = tessera::graph::Phase::Decode;
  key.cache_len = 4;
  tessera::graph::Graph g = arch.build_graph(c, key);
  const std::string before = tessera::graph_dump::full_dump(g);
  for (auto& n : g.nodes)
    if (n.op == tessera::graph::Op::RmsNorm) {
      n.eps *= 2;
      break;
    }
  EXPECT_NE(tessera::graph_dump::full_dump(g), before);
}

}  // namespace
