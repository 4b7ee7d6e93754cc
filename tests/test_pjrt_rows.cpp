// Rows at different positions in the StableHLO lowering, on the XLA CPU plugin (graph.h: per-row slots,
// row-mapped steps over a multi-row cache, the sampler state per cache row): every row of a batched step gives
// what its sequence gives alone (f32 logits within 1e-5, the same greedy ids) when rows sit at different slots
// and positions, join a running batch at different steps, replace a finished row, or are prefilled (or
// decoded) into chosen rows of an N-row cache; in-step sampling per row (greedy and sampled rows in one
// Sample program). Step inputs that do not fit the step are refused with a message naming the field.
// Every test that runs a program is skipped without the plugin; the emitter tests run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/pjrt/pjrt_backend.h"
#include "backends/pjrt/stablehlo_emitter.h"
#include "error_util.h"
#include "golden_util.h"
#include "pjrt_test_util.h"
#include "rows_test_util.h"
#include "step_test_util.h"

using namespace tessera;
using namespace tessera::step_test;
using tessera::testing::expect_error;

namespace {

// A tiny fixture model with float32 weights on one xla-cpu backend per model for the whole process (each
// distinct shape compiles once).
using Tiny = StepModel<backends::PjrtBackend>;

Tiny& tiny(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tiny>> loaded;
  auto& m = loaded[name];
  if (!m) m = std::make_unique<Tiny>(golden::model_path(name), name, backends::make_pjrt_backend("xla-cpu"));
  return *m;
}

// One batched prefill (3 rows, left-padded to one bucket) and decode steps whose rows sit at different cache
// slots (each row's sequence starts at its own offset) and positions.
TEST(PjrtRows, BatchWithPerRowSlotsEqualsEachSequenceAlone) {
  REQUIRE_XLA_CPU();
  expect_per_row_slots_equal_alone(
      tiny("llama_gqa"),
      {.len = 40, .seq = 8, .steps = 5, .seed = 5, .prompts = {4, 8, 2}, .offsets = {0, 7, 13}});
}

// The cache rows of the decode step at global step `t`, given each cache row's request (-1: idle): none when
// every row is idle; on odd steps with exactly two rows busy, those two (a row-mapped decode; in descending
// cache order if `descending`); else every row (an idle one carries a dummy token in its own row).
std::vector<int> decode_rows(const std::vector<int>& active, int t, bool descending) {
  std::vector<int> busy, all;
  for (int b = 0; b < static_cast<int>(active.size()); ++b) {
    all.push_back(b);
    if (active[static_cast<size_t>(b)] >= 0) busy.push_back(b);
  }
  if (descending) std::reverse(busy.begin(), busy.end());
  if (busy.empty()) return {};
  return busy.size() == 2 && t % 2 == 1 ? busy : all;
}

// Requests joining a running batch of a 3-row cache at different steps: each is prefilled alone (batch 1,
// one bucket, left-padded) into a free row of the cache (a row-mapped prefill), then decoded with the others.
// Decode steps run over all rows (an idle row carries a dummy token in its own row), or, on odd steps with
// exactly two rows busy, over those two only (a row-mapped decode, rows in descending order). A finished row is
// reused by a later request.
TEST(PjrtRows, RowsJoiningARunningBatchEqualEachSequenceAlone) {
  REQUIRE_XLA_CPU();
  Tiny& m = tiny("qwen3_tied");
  const int len = 24, rows = 3, bucket = 8;
  std::mt19937 rng(17);
  struct Join {
    int prompt, steps, row, at;  // request shape, its cache row, the global step it is prefilled at
  };
  const Join joins[] = {{3, 4, 0, 0}, {6, 9, 2, 0}, {8, 5, 1, 2}, {5, 6, 0, 5}, {2, 3, 1, 8}};
  std::vector<Request> reqs;
  std::vector<std::vector<std::vector<float>>> want;
  for (const Join& j : joins) {
    reqs.push_back(random_request(rng, m.vocab(), j.prompt, j.steps));
    want.push_back(alone(m, reqs.back(), len));
  }
  auto cache = m.cache(rows, len);
  std::vector<int> active(rows, -1), done(rows, 0);  // per cache row: request, decode steps done
  int finished = 0, row_mapped_steps = 0;
  for (int t = 0; finished < static_cast<int>(reqs.size()); ++t) {
    ASSERT_LT(t, 64);
    for (size_t q = 0; q < reqs.size(); ++q) {
      if (joins[q].at != t) continue;
      const Request& r = reqs[q];
      const int cache_row = joins[q].row;
      ASSERT_EQ(active[static_cast<size_t>(cache_row)], -1) << "row " << cache_row << " busy at step " << t;
      StepInputs in = prefill_inputs(r.prompt_ids(), bucket);
      in.cache_rows = {cache_row};
      std::vector<float> logits;
      m.exe(step_key(Phase::Prefill, 1, bucket, len, rows)).run(in, *cache, logits);
      expect_close(row(logits, 0, m.vocab()), want[q][0], "request " + std::to_string(q) + " prefill");
      active[static_cast<size_t>(cache_row)] = static_cast<int>(q);
      done[static_cast<size_t>(cache_row)] = 0;
    }
    const std::vector<int> step_rows = decode_rows(active, t, /*descending=*/true);
    if (step_rows.empty()) continue;
    const bool mapped = step_rows.size() < active.size();
    StepInputs in;
    for (int b : step_rows) {
      const int q = active[static_cast<size_t>(b)], j = done[static_cast<size_t>(b)];
      if (q < 0) {  // idle row: a dummy token at slot 0 of its own row
        append_decode_row(in, 0, 0, 0);
        continue;
      }
      const Request& r = reqs[static_cast<size_t>(q)];
      append_decode_row(in, r.tokens[static_cast<size_t>(r.prompt + j)], r.prompt + j, bucket + j,
                        bucket - r.prompt);
    }
    if (mapped) in.cache_rows.assign(step_rows.begin(), step_rows.end());
    std::vector<float> logits;
    const int batch = static_cast<int>(step_rows.size());
    m.exe(step_key(Phase::Decode, batch, 1, len, mapped ? rows : 0)).run(in, *cache, logits);
    row_mapped_steps += mapped;
    for (size_t i = 0; i < step_rows.size(); ++i) {
      const size_t b = static_cast<size_t>(step_rows[i]);
      const int q = active[b];
      if (q < 0) continue;
      const int j = done[b]++;
      expect_close(row(logits, static_cast<int64_t>(i), m.vocab()),
                   want[static_cast<size_t>(q)][static_cast<size_t>(j + 1)],
                   "request " + std::to_string(q) + " decode step " + std::to_string(j) + " (global step " +
                       std::to_string(t) + ")");
      if (done[b] == reqs[static_cast<size_t>(q)].steps()) {
        active[b] = -1;
        ++finished;
      }
    }
  }
  EXPECT_GT(row_mapped_steps, 0) << "the schedule should contain row-mapped decode steps";
}

// In-step sampling over a 3-row cache that requests join and leave: greedy rows (kDoSample 0, with a strong
// repetition penalty) and sampled rows in one Sample program, each equal to its request alone. A later
// request with the same prompt reuses the row of an earlier one: its seen mask must start empty (a prefill
// clears the row's mask), or the penalty would bend its tokens. The Greedy program ignores kDoSample: fed
// the same parameters, every row decodes as penalty + argmax (compared with the Sample program's greedy
// rows alone). The draw is keyed by the sequence's seed and token index only (sampling::counter_uniform),
// so a sampled request's row in the step does not matter.
class PjrtRowsSampling : public ::testing::TestWithParam<Sampling> {};

TEST_P(PjrtRowsSampling, RowsJoiningARunningBatchSampleAsAlone) {
  REQUIRE_XLA_CPU();
  const Sampling kind = GetParam();
  Tiny& m = tiny("qwen3_tied");
  const int len = 24, rows = 3, bucket = 8;
  std::mt19937 rng(29);
  std::uniform_int_distribution<int32_t> id(1, static_cast<int32_t>(m.vocab()) - 1);
  auto prompt = [&](int n) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(id(rng));
    return p;
  };
  const SamplingParams sampled{.temperature = 0.9f,
                               .top_k = 40,
                               .top_p = 0.9f,
                               .min_p = 0.02f,
                               .repetition_penalty = 1.1f,
                               .seed = 1234,
                               .do_sample = true};
  const SamplingParams sampled2{.temperature = 1.3f, .seed = 0x123456789ull, .do_sample = true};
  const SamplingParams penalised{.repetition_penalty = 2.0f};
  const SamplingParams plain{};
  struct Join {
    std::vector<int32_t> prompt;
    int steps, row, at;
    SamplingParams s;
  };
  const std::vector<int32_t> shared = prompt(6);
  const std::vector<Join> joins = {{prompt(4), 8, 0, 0, sampled}, {shared, 5, 2, 0, penalised},
                                   {prompt(7), 7, 1, 1, plain},    {shared, 6, 2, 6, penalised},
                                   {prompt(3), 4, 0, 9, sampled2}};
  std::vector<std::vector<int32_t>> want;
  for (const Join& j : joins) {
    SamplingParams s = j.s;
    if (kind == Sampling::Greedy) s.do_sample = false;  // what the Greedy program must do whatever kDoSample says
    want.push_back(sampled_alone(m, j.prompt, j.steps + 1, s, Sampling::Sample, len));
  }
  auto cache = m.cache(rows, len);
  std::vector<int> active(rows, -1), done(rows, 0);
  std::vector<std::vector<int32_t>> got(joins.size());
  int finished = 0, row_mapped_steps = 0;
  for (int t = 0; finished < static_cast<int>(joins.size()); ++t) {
    ASSERT_LT(t, 64);
    for (size_t q = 0; q < joins.size(); ++q) {
      if (joins[q].at != t) continue;
      const Join& r = joins[q];
      ASSERT_EQ(active[static_cast<size_t>(r.row)], -1);
      StepInputs in = sampled_prefill_inputs(r.prompt, r.s, bucket);
      in.cache_rows = {r.row};
      std::vector<int32_t> tok;
      m.exe(step_key(Phase::Prefill, 1, bucket, len, rows, kind)).run_tokens(in, *cache, tok);
      got[q].push_back(tok.at(0));
      active[static_cast<size_t>(r.row)] = static_cast<int>(q);
      done[static_cast<size_t>(r.row)] = 0;
    }
    const std::vector<int> step_rows = decode_rows(active, t, /*descending=*/false);
    if (step_rows.empty()) continue;
    const bool mapped = step_rows.size() < active.size();
    StepInputs in;
    for (int b : step_rows) {
      const int q = active[static_cast<size_t>(b)], j = done[static_cast<size_t>(b)];
      if (q < 0) {
        append_decode_row(in, 0, 0, 0);
        plain.append_encoded(0, in.sample_params);
        continue;
      }
      const Join& r = joins[static_cast<size_t>(q)];
      const int n = static_cast<int>(r.prompt.size());
      append_decode_row(in, got[static_cast<size_t>(q)].back(), n + j, bucket + j, bucket - n);
      r.s.append_encoded(j + 1, in.sample_params);
    }
    if (mapped) in.cache_rows.assign(step_rows.begin(), step_rows.end());
    std::vector<int32_t> tok;
    m.exe(step_key(Phase::Decode, static_cast<int>(step_rows.size()), 1, len, mapped ? rows : 0, kind))
        .run_tokens(in, *cache, tok);
    row_mapped_steps += mapped;
    for (size_t i = 0; i < step_rows.size(); ++i) {
      const size_t b = static_cast<size_t>(step_rows[i]);
      const int q = active[b];
      if (q < 0) continue;
      got[static_cast<size_t>(q)].push_back(tok.at(i));
      if (++done[b] == joins[static_cast<size_t>(q)].steps) {
        active[b] = -1;
        ++finished;
      }
    }
  }
  EXPECT_GT(row_mapped_steps, 0);
  for (size_t q = 0; q < joins.size(); ++q) EXPECT_EQ(got[q], want[q]) << "request " << q;
  // The shared prompt's two requests: the second (in the first's row) repeats the first's tokens and goes on.
  EXPECT_TRUE(std::equal(want[1].begin(), want[1].end(), want[3].begin()));
  if (kind == Sampling::Sample) {
    // The sampled request differs from its greedy decoding (else the test would not show sampling happened).
    SamplingParams g = joins[0].s;
    g.do_sample = false;
    EXPECT_NE(want[0], sampled_alone(m, joins[0].prompt, joins[0].steps + 1, g, Sampling::Sample, len));
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, PjrtRowsSampling, ::testing::Values(Sampling::Sample, Sampling::Greedy),
                         [](const auto& info) { return std::string(graph::sampling_name(info.param)); });

// A row-mapped step checks its rows and slots before anything is sent; so does a step whose cache has other
// rows than the step needs.
TEST(PjrtRows, BadRowInputsAreRefused) {
  REQUIRE_XLA_CPU();
  Tiny& m = tiny("qwen3_tied");
  const int len = 24, rows = 3;
  auto cache = m.cache(rows, len);
  const Executable& prefill = m.exe(step_key(Phase::Prefill, 1, 8, len, rows));
  StepInputs in;
  for (int s = 0; s < 8; ++s) {
    in.ids.push_back(5 + s);
    in.positions.push_back(s);
    in.slots.push_back(s);
  }
  in.kv_begin = {0};
  std::vector<float> logits;
  auto refused = [&](const StepInputs& x, const Executable& e, DeviceCache& c, const std::string& needle) {
    expect_error([&] { e.run(x, c, logits); }, needle);
  };
  refused(in, prefill, *cache, "cache_rows");  // missing
  in.cache_rows = {3};
  refused(in, prefill, *cache, "cache_rows[0] = 3");
  in.cache_rows = {-1};
  refused(in, prefill, *cache, "cache_rows[0] = -1");
  in.cache_rows = {1};
  auto small = m.cache(1, len);
  refused(in, prefill, *small, "the cache has 1 rows");
  prefill.run(in, *cache, logits);  // fits now
  EXPECT_EQ(logits.size(), static_cast<size_t>(m.vocab()));

  // Decode over two of the three rows: the same row twice, slots past the end, slots of the wrong count.
  const Executable& decode = m.exe(step_key(Phase::Decode, 2, 1, len, rows));
  StepInputs d{{5, 6}, {8, 8}, {8, 8}, {0, 0}, {}, {}, {1, 1}};
  refused(d, decode, *cache, "cache row 1 is named by two step rows");
  d.cache_rows = {2, 1};
  d.slots = {8, 24};
  refused(d, decode, *cache, "row 1's slots 24..24 do not fit");
  d.slots = {8, 9, 10};
  refused(d, decode, *cache, "input 'slots' has 3 values");
  d.slots = {8};  // [seq]: the same slot for both rows
  decode.run(d, *cache, logits);
  EXPECT_EQ(logits.size(), static_cast<size_t>(2 * m.vocab()));

  // Per-row slots must be consecutive within a row, not across rows.
  const Executable& batched = m.exe(step_key(Phase::Prefill, 3, 2, len));
  StepInputs b{{1, 2, 3, 4, 5, 6}, {0, 1, 0, 1, 0, 1}, {0, 1, 5, 6, 9, 11}, {0, 5, 9}, {}, {}};
  refused(b, batched, *cache, "row 2: slots[5] = 11");
  b.slots = {0, 1, 5, 6, 9, 10};
  batched.run(b, *cache, logits);
}

// The lowering of per-row steps, without a plugin: one dynamic_update_slice per row and cache; a row-mapped
// step reads its rows with a gather and writes them at cache_rows[b]; the seen mask of a row-mapped prefill is
// rewritten row by row (cleared first), that of a full prefill replaced.
graph::Graph tiny_graph(const std::string& model, const ShapeKey& k) {
  auto cj = golden::load_json(golden::model_path(model + "/config.json"));
  const auto& arch = models::find_architecture(cj["architectures"][0].get<std::string>(), model);
  graph::Graph g = arch.build_graph(arch.parse_config(cj, model), k);
  graph::append_sampling(g, cj["vocab_size"].get<int64_t>());
  return g;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(PjrtRowsEmitter, PerRowWritesAndRowMappedReads) {
  // qwen3_tied: 2 layers, K and V caches each.
  const std::string decode3 =
      pjrt::emit_stablehlo(tiny_graph("qwen3_tied", step_key(Phase::Decode, 3, 1, 16)));
  EXPECT_EQ(count(decode3, "\"stablehlo.dynamic_update_slice\""), 3u * 4u);
  EXPECT_EQ(count(decode3, "\"stablehlo.gather\""), 1u);  // the embedding only
  EXPECT_NE(decode3.find("tensor<3x2x16x32xf32> {tf.aliasing_output = 1 : i32}"), std::string::npos);

  pjrt::StablehloProgram mapped = pjrt::lower_to_stablehlo(
      tiny_graph("qwen3_tied", step_key(Phase::Prefill, 1, 8, 16, 4, Sampling::Sample)));
  bool has_rows = false;
  for (const auto& a : mapped.args) has_rows |= a.kind == pjrt::StablehloArg::Input && a.input == graph::InputKind::CacheRows;
  EXPECT_TRUE(has_rows);
  // The caches and the seen mask keep all 4 rows; the step works on one.
  EXPECT_NE(mapped.text.find("tensor<4x2x16x32xf32> {tf.aliasing_output = 1 : i32}"), std::string::npos);
  EXPECT_NE(mapped.text.find("tensor<4x1024xf32> {tf.aliasing_output = 5 : i32}"), std::string::npos);
  // Per cache: one write; per attention: K and V rows gathered; the sampler reads its row's mask once.
  EXPECT_EQ(count(mapped.text, "\"stablehlo.dynamic_update_slice\""), 4u + 1u);
  EXPECT_EQ(count(mapped.text, "\"stablehlo.gather\""), 1u + 2u * 2u + 1u);
  EXPECT_NE(mapped.text.find("(masks cleared first)"), std::string::npos);
  EXPECT_EQ(count(mapped.text, "\"stablehlo.dynamic_slice\""), 0u) << "a prefill does not read the old mask";
  const std::string mapped_decode =
      pjrt::emit_stablehlo(tiny_graph("qwen3_tied", step_key(Phase::Decode, 2, 1, 16, 4, Sampling::Greedy)));
  EXPECT_EQ(count(mapped_decode, "\"stablehlo.dynamic_slice\""), 2u) << "a decode ORs into each row's mask";
}

}  // namespace
