// Rows at different positions on the native cpu backend (graph.h: per-row slots, row-mapped steps over a
// multi-row cache, the sampler state per cache row): every row of a batched step gives what its sequence gives
// alone, when rows sit at different slots and positions, join a running batch at different steps, or replace a
// finished row; in-step sampling per row (greedy and sampled rows in one program); and step inputs that do
// not fit the step are refused with a message naming the field, before anything is read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <tuple>

#include "backends/backend.h"
#include "golden_util.h"
#include "io/weight_source.h"
#include "models/architecture.h"
#include "tessera/error.h"

using namespace tessera;
namespace golden = tessera::golden;
using backends::DeviceCache;
using backends::Executable;
using backends::StepInputs;
using graph::Phase;
using graph::Sampling;
using graph::ShapeKey;

namespace {

constexpr double kTol = 1e-5;

std::string fixture_dir(const std::string& name) {
  if (name.rfind("qwen3_sliding", 0) == 0) return std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/variants/" + name;
  return golden::model_path(name);
}

// A tiny checkpoint on the cpu backend (float32 weights), with its compiled steps.
struct Tiny {
  const models::Architecture* arch = nullptr;
  models::DecoderConfig config;
  std::unique_ptr<backends::Backend> be;
  std::map<std::string, std::unique_ptr<Executable>> exes;

  Tiny(const std::string& name, bool bf16_kv) {
    const std::string dir = fixture_dir(name);
    auto cj = golden::load_json(dir + "/config.json");
    arch = &models::find_architecture(cj["architectures"][0].get<std::string>(), name);
    config = arch->parse_config(cj, name);
    auto src = io::open_checkpoint(dir);
    backends::WeightMap weights;
    for (const auto& w : arch->weights(config)) weights.emplace(w.name, src->load(w.name, DType::F32));
    backends::CpuBackendOptions o;
    o.bf16_kv_cache = bf16_kv;
    be = backends::make_cpu_backend(nullptr, o);
    be->bind_weights(std::move(weights));
  }
  int64_t vocab() const { return config.vocab_size; }
  const Executable& exe(const ShapeKey& key) {
    auto& e = exes[key.str()];
    if (!e) {
      graph::Graph g = arch->build_graph(config, key);
      graph::append_sampling(g, config.vocab_size);
      e = be->compile(g);
    }
    return *e;
  }
  std::unique_ptr<DeviceCache> cache(int64_t rows, int64_t len) {
    return be->create_cache(config.num_layers, rows, config.local_kv_heads(), len, config.head_dim);
  }
  static ShapeKey key(Phase phase, int batch, int seq, int len, int cache_rows = 0, Sampling s = Sampling::Off) {
    return ShapeKey{.phase = phase, .batch = batch, .seq = seq, .cache_len = len, .dtype = DType::F32,
                    .sampling = s, .cache_rows = cache_rows};
  }
};

// A teacher-forced request: the prompt is tokens[0, prompt), then tokens[prompt + j] is fed at decode step j.
struct Request {
  std::vector<int32_t> tokens;
  int prompt = 0;
  int steps() const { return static_cast<int>(tokens.size()) - prompt; }  // decode steps after the prefill
};

Request make_request(std::mt19937& rng, int64_t vocab, int prompt, int steps) {
  std::uniform_int_distribution<int32_t> id(1, static_cast<int32_t>(vocab) - 1);
  Request r;
  r.prompt = prompt;
  for (int i = 0; i < prompt + steps; ++i) r.tokens.push_back(id(rng));
  return r;
}

// Logits of `r` alone (a 1-row cache from slot 0): [0] after the prefill, [j + 1] after decode step j.
std::vector<std::vector<float>> alone(Tiny& m, const Request& r, int len) {
  auto cache = m.cache(1, len);
  std::vector<std::vector<float>> out(1);
  StepInputs in;
  in.ids.assign(r.tokens.begin(), r.tokens.begin() + r.prompt);
  for (int s = 0; s < r.prompt; ++s) in.positions.push_back(s), in.slots.push_back(s);
  in.kv_begin = {0};
  m.exe(Tiny::key(Phase::Prefill, 1, r.prompt, len)).run(in, *cache, out[0]);
  for (int j = 0; j < r.steps(); ++j) {
    in.ids = {r.tokens[static_cast<size_t>(r.prompt + j)]};
    in.positions = {r.prompt + j};
    in.slots = {r.prompt + j};
    out.emplace_back();
    m.exe(Tiny::key(Phase::Decode, 1, 1, len)).run(in, *cache, out.back());
  }
  return out;
}

std::span<const float> row(const std::vector<float>& logits, int64_t b, int64_t vocab) {
  return {logits.data() + b * vocab, static_cast<size_t>(vocab)};
}

int64_t argmax(std::span<const float> x) { return std::max_element(x.begin(), x.end()) - x.begin(); }

void expect_close(std::span<const float> got, std::span<const float> want, const std::string& what) {
  const auto d = golden::max_abs_diff(got, want);
  EXPECT_LE(d.max_abs, kTol) << what << ": logit " << d.index;
  EXPECT_EQ(argmax(got), argmax(want)) << what;
}

using Param = std::tuple<const char*, bool>;  // (model, bf16 KV cache)

class CpuRows : public ::testing::TestWithParam<Param> {
 protected:
  Tiny& model() {
    static std::map<std::string, std::unique_ptr<Tiny>> loaded;
    auto& m = loaded[std::string(std::get<0>(GetParam())) + (std::get<1>(GetParam()) ? "/bf16kv" : "")];
    if (!m) m = std::make_unique<Tiny>(std::get<0>(GetParam()), std::get<1>(GetParam()));
    return *m;
  }
};

// (a) One prefill and decode steps over 3 rows whose sequences sit at different cache slots (per-row slots)
// and different positions (different prompt lengths, left-padded in the prefill).
TEST_P(CpuRows, BatchWithPerRowSlotsEqualsEachSequenceAlone) {
  Tiny& m = model();
  const int len = 40, seq = 9, steps = 6;
  std::mt19937 rng(11);
  const int prompts[3] = {5, 9, 3};
  const int offset[3] = {0, 4, 11};  // row b's sequence starts at this slot
  std::vector<Request> reqs;
  std::vector<std::vector<std::vector<float>>> want;
  for (int p : prompts) {
    reqs.push_back(make_request(rng, m.vocab(), p, steps));
    want.push_back(alone(m, reqs.back(), len));
  }
  auto cache = m.cache(3, len);
  StepInputs in;
  for (int b = 0; b < 3; ++b) {
    const int pad = seq - prompts[b];
    for (int s = 0; s < seq; ++s) {
      in.ids.push_back(s < pad ? 0 : reqs[static_cast<size_t>(b)].tokens[static_cast<size_t>(s - pad)]);
      in.positions.push_back(s < pad ? 1 : s - pad);
      in.slots.push_back(offset[b] + s);
    }
    in.kv_begin.push_back(offset[b] + pad);
  }
  std::vector<float> logits;
  m.exe(Tiny::key(Phase::Prefill, 3, seq, len)).run(in, *cache, logits);
  for (int b = 0; b < 3; ++b)
    expect_close(row(logits, b, m.vocab()), want[static_cast<size_t>(b)][0], "prefill row " + std::to_string(b));
  for (int j = 0; j < steps; ++j) {
    in.ids.clear(), in.positions.clear(), in.slots.clear();
    for (int b = 0; b < 3; ++b) {
      const Request& r = reqs[static_cast<size_t>(b)];
      in.ids.push_back(r.tokens[static_cast<size_t>(r.prompt + j)]);
      in.positions.push_back(r.prompt + j);
      in.slots.push_back(offset[b] + seq + j);
    }
    m.exe(Tiny::key(Phase::Decode, 3, 1, len)).run(in, *cache, logits);
    for (int b = 0; b < 3; ++b)
      expect_close(row(logits, b, m.vocab()), want[static_cast<size_t>(b)][static_cast<size_t>(j + 1)],
                   "decode step " + std::to_string(j) + " row " + std::to_string(b));
  }
}

// A 4-row cache that requests join at different steps: a row-mapped prefill (batch 1) into a free cache row,
// then decode steps over all 4 rows (inactive rows carry a dummy token into their own row), or over the
// active rows only (a row-mapped decode) while exactly two are active. A finished row is replaced.
struct Join {
  int request, row, at;  // request index, cache row, global step at which it is prefilled
};

TEST_P(CpuRows, RowsJoiningARunningBatchEqualEachSequenceAlone) {
  Tiny& m = model();
  const int len = 32, rows = 4;
  std::mt19937 rng(23);
  // request: (prompt, decode steps)
  const std::pair<int, int> shapes[] = {{4, 3}, {6, 5}, {3, 9}, {5, 6}, {7, 4}};
  std::vector<Request> reqs;
  std::vector<std::vector<std::vector<float>>> want;
  for (auto [p, n] : shapes) {
    reqs.push_back(make_request(rng, m.vocab(), p, n));
    want.push_back(alone(m, reqs.back(), len));
  }
  // Request 2 into row 2 first; request 0 into row 0 at step 1; request 3 at step 3 (into row 3); request 1
  // at step 4 (row 1); request 0 ends after its 3 steps (steps 1..3) and request 4 takes row 0 at step 5.
  const Join joins[] = {{2, 2, 0}, {0, 0, 1}, {3, 3, 3}, {1, 1, 4}, {4, 0, 5}};
  auto cache = m.cache(rows, len);
  struct Active {
    int request = -1, done = 0;  // decode steps run
  };
  Active active[rows];
  int checked = 0;
  std::vector<float> logits;
  for (int step = 0; step < 16; ++step) {
    for (const Join& jn : joins) {
      if (jn.at != step) continue;
      ASSERT_EQ(active[jn.row].request, -1) << "row " << jn.row << " busy";
      const Request& r = reqs[static_cast<size_t>(jn.request)];
      StepInputs in;
      in.ids.assign(r.tokens.begin(), r.tokens.begin() + r.prompt);
      for (int s = 0; s < r.prompt; ++s) in.positions.push_back(s), in.slots.push_back(s);
      in.kv_begin = {0};
      in.cache_rows = {jn.row};
      m.exe(Tiny::key(Phase::Prefill, 1, r.prompt, len, rows)).run(in, *cache, logits);
      expect_close(logits, want[static_cast<size_t>(jn.request)][0], "prefill of request " + std::to_string(jn.request));
      active[jn.row] = {jn.request, 0};
      ++checked;
    }
    std::vector<int> live;
    for (int b = 0; b < rows; ++b)
      if (active[b].request >= 0) live.push_back(b);
    if (live.empty()) continue;
    // Two active rows: a row-mapped decode over just those (in reverse cache order); else all four rows.
    const bool mapped = live.size() == 2;
    std::vector<int> step_rows = mapped ? std::vector<int>{live[1], live[0]} : std::vector<int>{0, 1, 2, 3};
    StepInputs in;
    for (int b : step_rows) {
      const Active& a = active[b];
      if (a.request < 0) {  // a free row: any token, written into its own row (slot 0), ignored
        in.ids.push_back(0), in.positions.push_back(0), in.slots.push_back(0), in.kv_begin.push_back(0);
        continue;
      }
      const Request& r = reqs[static_cast<size_t>(a.request)];
      in.ids.push_back(r.tokens[static_cast<size_t>(r.prompt + a.done)]);
      in.positions.push_back(r.prompt + a.done);
      in.slots.push_back(r.prompt + a.done);
      in.kv_begin.push_back(0);
    }
    const int batch = static_cast<int>(step_rows.size());
    if (mapped) in.cache_rows.assign(step_rows.begin(), step_rows.end());
    m.exe(Tiny::key(Phase::Decode, batch, 1, len, mapped ? rows : 0)).run(in, *cache, logits);
    for (int i = 0; i < batch; ++i) {
      Active& a = active[step_rows[static_cast<size_t>(i)]];
      if (a.request < 0) continue;
      ++a.done;
      expect_close(row(logits, i, m.vocab()),
                   want[static_cast<size_t>(a.request)][static_cast<size_t>(a.done)],
                   "request " + std::to_string(a.request) + " decode step " + std::to_string(a.done - 1) +
                       " at global step " + std::to_string(step) + (mapped ? " (row-mapped)" : ""));
      ++checked;
      if (a.done == reqs[static_cast<size_t>(a.request)].steps()) a = {};  // finished: the row is free
    }
  }
  int expected = 0;
  for (const Request& r : reqs) expected += 1 + r.steps();
  EXPECT_EQ(checked, expected) << "every prefill and decode step of every request was compared";
}

INSTANTIATE_TEST_SUITE_P(Models, CpuRows,
                         ::testing::Values(Param{"llama_gqa", false}, Param{"llama_gqa", true},
                                           Param{"qwen3_sliding", false}),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + (std::get<1>(info.param) ? "_bf16kv" : "");
                         });

// (c) In-step sampling over rows: a Greedy program and a Sample program whose rows mix sampling (kDoSample 1)
// and greedy (0), with a repetition penalty (the seen mask is per cache row, cleared by a prefill: a row that
// replaces a finished one must not inherit its ids). Each request's tokens equal what it gives alone: greedy
// rows alone in a 1-row cache; sampled rows alone in the same cache row of an otherwise idle cache (the draw
// counter is the cache row's).
struct SampledRequest {
  std::vector<int32_t> prompt;
  int new_tokens = 0;
  bool do_sample = false;
  uint64_t seed = 0;
};

std::vector<int32_t> params_for(const SampledRequest& r, int step) {
  std::vector<int32_t> p(graph::kSampleParams, 0);
  const float temperature = 0.9f, top_p = 0.95f, min_p = 0.0f, penalty = 1.3f;
  std::memcpy(&p[graph::kTemperature], &temperature, 4);
  std::memcpy(&p[graph::kTopP], &top_p, 4);
  std::memcpy(&p[graph::kMinP], &min_p, 4);
  std::memcpy(&p[graph::kRepetitionPenalty], &penalty, 4);
  p[graph::kTopK] = 50;
  p[graph::kSeedLo] = static_cast<int32_t>(r.seed & 0xffffffffu);
  p[graph::kSeedHi] = static_cast<int32_t>(r.seed >> 32);
  p[graph::kStep] = step;
  p[graph::kDoSample] = r.do_sample ? 1 : 0;
  return p;
}

// Tokens of `r` alone: in a `rows`-row cache at cache row `row` (row-mapped steps) or, rows == 1, plain.
std::vector<int32_t> sampled_alone(Tiny& m, Sampling mode, const SampledRequest& r, int len, int rows, int row) {
  auto cache = m.cache(rows, len);
  const int mapped = rows > 1 ? rows : 0;
  const int p = static_cast<int>(r.prompt.size());
  StepInputs in;
  in.ids = r.prompt;
  for (int s = 0; s < p; ++s) in.positions.push_back(s), in.slots.push_back(s);
  in.kv_begin = {0};
  in.seen_from = {0};
  in.sample_params = params_for(r, 0);
  if (mapped) in.cache_rows = {row};
  std::vector<int32_t> tok, out;
  m.exe(Tiny::key(Phase::Prefill, 1, p, len, mapped, mode)).run_tokens(in, *cache, tok);
  out.push_back(tok[0]);
  in.seen_from.clear();
  for (int j = 1; j < r.new_tokens; ++j) {
    in.ids = {tok[0]};
    in.positions = {p + j - 1};
    in.slots = {p + j - 1};
    in.sample_params = params_for(r, j);
    m.exe(Tiny::key(Phase::Decode, 1, 1, len, mapped, mode)).run_tokens(in, *cache, tok);
    out.push_back(tok[0]);
  }
  return out;
}

TEST(CpuRowsSampling, InStepSamplingPerRowEqualsEachSequenceAlone) {
  Tiny m("llama_gqa", false);
  const int len = 40, rows = 3;
  for (Sampling mode : {Sampling::Greedy, Sampling::Sample}) {
    // (request, cache row, step it joins); request 0 finishes and request 3 takes its row.
    const std::vector<SampledRequest> reqs = {{{5, 9, 5, 9, 12}, 4, true, 7},
                                              {{3, 4, 5}, 8, false, 0},
                                              {{20, 21, 22, 23, 24, 25}, 7, true, 0x1234567890ull},
                                              {{9, 5, 9, 5}, 6, true, 8}};
    const Join joins[] = {{1, 1, 0}, {0, 0, 0}, {2, 2, 2}, {3, 0, 4}};
    std::vector<std::vector<int32_t>> want;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const bool sampled = mode == Sampling::Sample && reqs[i].do_sample;
      int row = 0;
      for (const Join& jn : joins)
        if (jn.request == static_cast<int>(i)) row = jn.row;
      want.push_back(sampled ? sampled_alone(m, mode, reqs[i], len, rows, row)
                             : sampled_alone(m, mode, reqs[i], len, 1, 0));
    }
    auto cache = m.cache(rows, len);
    struct Active {
      int request = -1, made = 0;
      int32_t last = 0;
    };
    Active active[rows];
    std::vector<std::vector<int32_t>> got(reqs.size());
    std::vector<int32_t> tok;
    for (int step = 0; step < 20; ++step) {
      for (const Join& jn : joins) {
        if (jn.at != step) continue;
        ASSERT_EQ(active[jn.row].request, -1);
        const SampledRequest& r = reqs[static_cast<size_t>(jn.request)];
        const int p = static_cast<int>(r.prompt.size());
        StepInputs in;
        in.ids = r.prompt;
        for (int s = 0; s < p; ++s) in.positions.push_back(s), in.slots.push_back(s);
        in.kv_begin = {0};
        in.seen_from = {0};
        in.sample_params = params_for(r, 0);
        in.cache_rows = {jn.row};
        m.exe(Tiny::key(Phase::Prefill, 1, p, len, rows, mode)).run_tokens(in, *cache, tok);
        got[static_cast<size_t>(jn.request)].push_back(tok[0]);
        active[jn.row] = {jn.request, 1, tok[0]};
      }
      bool any = false;
      StepInputs in;
      for (int b = 0; b < rows; ++b) {
        Active& a = active[b];
        if (a.request >= 0 && a.made == reqs[static_cast<size_t>(a.request)].new_tokens) a = {};  // finished
        any = any || a.request >= 0;
        const SampledRequest idle{};
        const SampledRequest& r = a.request >= 0 ? reqs[static_cast<size_t>(a.request)] : idle;
        const int pos = a.request >= 0 ? static_cast<int>(r.prompt.size()) + a.made - 1 : 0;
        in.ids.push_back(a.request >= 0 ? a.last : 0);
        in.positions.push_back(pos);
        in.slots.push_back(pos);
        in.kv_begin.push_back(0);
        const auto p = params_for(r, a.made);
        in.sample_params.insert(in.sample_params.end(), p.begin(), p.end());
      }
      if (!any) continue;
      m.exe(Tiny::key(Phase::Decode, rows, 1, len, 0, mode)).run_tokens(in, *cache, tok);
      for (int b = 0; b < rows; ++b) {
        Active& a = active[b];
        if (a.request < 0) continue;
        got[static_cast<size_t>(a.request)].push_back(tok[static_cast<size_t>(b)]);
        a.last = tok[static_cast<size_t>(b)];
        ++a.made;
      }
    }
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << graph::sampling_name(mode) << " request " << i;
  }
}

// (d) Inputs that do not fit the step are refused with the field named, before any kernel runs.
template <typename F>
void expect_refused(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "not refused; expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(CpuRowsInputs, BadStepInputsAreRefusedWithAMessage) {
  Tiny m("llama_gqa", false);
  const int len = 16, rows = 4;
  auto cache = m.cache(rows, len);
  // A row-mapped prefill of 3 tokens into cache row 2.
  StepInputs good;
  good.ids = {5, 6, 7};
  good.positions = {0, 1, 2};
  good.slots = {0, 1, 2};
  good.kv_begin = {0};
  good.cache_rows = {2};
  const Executable& prefill = m.exe(Tiny::key(Phase::Prefill, 1, 3, len, rows));
  std::vector<float> logits;
  prefill.run(good, *cache, logits);  // fits
  auto with = [&](auto change) {
    StepInputs in = good;
    change(in);
    return in;
  };
  auto refused = [&](const Executable& exe, const StepInputs& in, const std::string& needle, DeviceCache* c = nullptr) {
    expect_refused([&] { exe.run(in, c ? *c : *cache, logits); }, needle);
  };
  refused(prefill, with([](StepInputs& in) { in.ids.pop_back(); }), "StepInputs::ids has 2 values, expected 3");
  refused(prefill, with([](StepInputs& in) { in.ids[1] = 1024; }), "ids[1] = 1024 is not a token id");
  refused(prefill, with([](StepInputs& in) { in.ids[0] = -1; }), "ids[0] = -1");
  refused(prefill, with([](StepInputs& in) { in.positions = {0}; }), "StepInputs::positions has 1 values");
  refused(prefill, with([](StepInputs& in) { in.slots = {0, 1}; }), "StepInputs::slots has 2 values");
  refused(prefill, with([](StepInputs& in) { in.slots = {14, 15, 16}; }), "slots[2] = 16 is outside the cache's 16 slots");
  refused(prefill, with([](StepInputs& in) { in.slots = {-1, 0, 1}; }), "slots[0] = -1");
  refused(prefill, with([](StepInputs& in) { in.slots = {0, 2, 3}; }), "slots[1] = 2 does not follow");
  refused(prefill, with([](StepInputs& in) { in.kv_begin = {0, 0}; }), "StepInputs::kv_begin has 2 values");
  refused(prefill, with([](StepInputs& in) { in.kv_begin = {17}; }), "kv_begin[0] = 17");
  refused(prefill, with([](StepInputs& in) { in.cache_rows = {}; }), "StepInputs::cache_rows has 0 values, expected 1");
  refused(prefill, with([](StepInputs& in) { in.cache_rows = {4}; }), "cache_rows[0] = 4 is outside the cache's 4 rows");
  refused(prefill, with([](StepInputs& in) { in.cache_rows = {-1}; }), "cache_rows[0] = -1");
  // The cache must be the step's: rows, slots.
  auto small = m.cache(2, len);
  refused(prefill, good, "the cache has 2 rows of 16 slots", small.get());
  auto short_cache = m.cache(rows, 8);
  refused(prefill, good, "the cache has 4 rows of 8 slots", short_cache.get());

  // Decode over all 4 rows: per-row slots, or one [seq] list for every row.
  const Executable& decode = m.exe(Tiny::key(Phase::Decode, rows, 1, len));
  StepInputs d;
  d.ids = {1, 2, 3, 4};
  d.positions = {3, 3, 3, 3};
  d.slots = {3, 4, 5, 6};
  d.kv_begin = {0, 0, 0, 0};
  decode.run(d, *cache, logits);
  d.slots = {3};
  decode.run(d, *cache, logits);
  d.slots = {3, 4};
  refused(decode, d, "StepInputs::slots has 2 values, expected 4 (batch * seq) or 1");
  d.slots = {3, 4, 5, 16};
  refused(decode, d, "slots[3] = 16");
  d.slots = {3, 4, 5, 6};
  d.cache_rows = {3, 2, 1, 0};
  refused(decode, d, "StepInputs::cache_rows is set but the step is not row-mapped");
  d.cache_rows = {0, 1, 2, 3};  // the identity is what an unmapped step does anyway
  decode.run(d, *cache, logits);

  // A row-mapped decode over 2 of the 4 rows: distinct rows.
  const Executable& mapped = m.exe(Tiny::key(Phase::Decode, 2, 1, len, rows));
  StepInputs r2;
  r2.ids = {1, 2};
  r2.positions = {3, 3};
  r2.slots = {3, 3};
  r2.kv_begin = {0, 0};
  r2.cache_rows = {1, 1};
  refused(mapped, r2, "cache_rows[1] = 1 repeats cache_rows[0]");
  r2.cache_rows = {3, 1};
  mapped.run(r2, *cache, logits);

  // In-step sampling inputs.
  const Executable& sampled = m.exe(Tiny::key(Phase::Prefill, 1, 3, len, rows, Sampling::Sample));
  StepInputs s = good;
  s.seen_from = {0};
  s.sample_params.assign(graph::kSampleParams, 0);
  std::vector<int32_t> tokens;
  sampled.run_tokens(s, *cache, tokens);
  ASSERT_EQ(tokens.size(), 1u);
  auto refused_tokens = [&](const StepInputs& in, const std::string& needle) {
    expect_refused([&] { sampled.run_tokens(in, *cache, tokens); }, needle);
  };
  StepInputs bad = s;
  bad.seen_from = {};
  refused_tokens(bad, "StepInputs::seen_from has 0 values, expected 1");
  bad = s;
  bad.seen_from = {4};
  refused_tokens(bad, "seen_from[0] = 4 is outside [0, 3]");
  bad = s;
  bad.sample_params.pop_back();
  refused_tokens(bad, "StepInputs::sample_params has " + std::to_string(graph::kSampleParams - 1) + " values");
  expect_refused([&] { sampled.run(s, *cache, logits); }, "use run_tokens()");
  // Caches: sizes, and copies between caches that do not match.
  expect_refused([&] { m.cache(0, len); }, "rows 0");
  expect_refused([&] { m.be->copy_cache(*cache, *small); }, "cpu copy_cache: from 2 layers x 4 rows x 16 slots into 2 layers x 2 rows");
  expect_refused([&] { m.be->copy_cache(*cache, *short_cache); }, "at least as many slots");
  expect_refused([&] { prefill.run_tokens(good, *cache, tokens); }, "run_tokens() needs a graph with in-step sampling");
}

}  // namespace
