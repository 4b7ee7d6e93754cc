// Checkpoints whose config changes the math (tools/make_variant_goldens.py, tests/fixtures/variants): the MLP
// activations (gelu, gelu_pytorch_tanh, gelu_new, relu) and the sliding-window attention of Qwen3, Qwen2,
// Mistral and Phi-3, on the native cpu backend and on xla-cpu (skipped when the plugin is absent), against
// Transformers. Tolerance: float32 logits within 1e-4 absolute of Transformers' float32 at every position
// (same math, different summation order); greedy tokens identical. Each golden also records how far the same
// weights' logits move under the nearest wrong reading of the config (silu for a gelu model, full attention
// for a sliding one, ...): at least 1e-2 (1e-3 between the erf and tanh GELUs), so a backend that ignored the
// field could not pass.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "backends/backend.h"
#include "backends/pjrt/pjrt_backend.h"
#include "golden_util.h"
#include "model_test_util.h"
#include "models/architecture.h"
#include "pjrt_test_util.h"
#include "step_test_util.h"
#include "tessera/batch.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
namespace golden = tessera::golden;
using namespace tessera::model_test;

namespace {

constexpr double kTol = 1e-4;

nlohmann::json variant_golden(const std::string& name) {
  return golden::load_json(golden::variant_path(name) + "/golden.json");
}

class Variants : public ModelOnDevice {
 protected:
  // One CausalLM per (model, device) for the whole binary: its compiled steps are reused across tests
  // (xla-cpu compiles dominate the run time). Float32: the bf16 checkpoints upcast, as the goldens ran them.
  CausalLM& load() const { return load_once(golden::variant_path(model()), DType::F32); }
};

TEST_P(Variants, GoldenTellsTheConfigFieldApart) {
  auto j = variant_golden(model());
  ASSERT_FALSE(j["distinct_from"].empty());
  // The erf and tanh forms of GELU differ by at most ~5e-4 per activation: 10x the tolerance apart there.
  const std::string act = j["config"]["hidden_act"].get<std::string>();
  for (const auto& [alt, v] : j["distinct_from"].items()) {
    const bool gelu_pair = act.rfind("gelu", 0) == 0 && alt.rfind("gelu", 0) == 0;
    EXPECT_GE(v["max_abs_logit_diff"].get<double>(), (gelu_pair ? 10 : 100) * kTol)
        << model() << " as " << alt;
  }
}

TEST_P(Variants, Float32LogitsMatchTransformersAtEveryPosition) {
  auto j = variant_golden(model());
  CausalLM& m = load();
  if (j.contains("forward")) {
    // xla-cpu: the longest case only (one compile; the shorter cases are its prefixes, and causal).
    const size_t first = xla() ? j["forward"].size() - 1 : 0;
    for (size_t i = first; i < j["forward"].size(); ++i) {
      const auto& c = j["forward"][i];
      auto expect = golden::matrix(c["logits"]);
      auto d = golden::max_abs_diff(m.forward(to32(c["input_ids"])), expect.data);
      EXPECT_LE(d.max_abs, kTol) << model() << " on " << device() << " len " << expect.rows << " worst index "
                                 << d.index << " (position " << d.index / expect.cols << ")";
    }
  }
  if (j.contains("forward_last")) {
    for (const auto& c : j["forward_last"]) {
      const std::vector<float> expect = c["last_logits"].get<std::vector<float>>();
      std::vector<float> all = m.forward(to32(c["input_ids"]));
      ASSERT_GE(all.size(), expect.size());
      std::vector<float> last(all.end() - static_cast<long>(expect.size()), all.end());
      auto d = golden::max_abs_diff(last, expect);
      EXPECT_LE(d.max_abs, kTol) << model() << " on " << device() << " worst index " << d.index;
    }
  }
}

TEST_P(Variants, GreedyTokensIdenticalFor32Steps) {
  auto j = variant_golden(model());
  CausalLM& m = load();
  // xla-cpu: the last prompt only (the longest; for qwen3_sliding the one past the window), two compiles.
  const size_t first = xla() ? j["greedy"].size() - 1 : 0;
  for (size_t i = first; i < j["greedy"].size(); ++i) {
    const auto& c = j["greedy"][i];
    auto out = m.generate({to32(c["input_ids"])}, {}, greedy(c["max_new_tokens"].get<int>()));
    EXPECT_EQ(out.sequences[0], to32(c["output_ids"])) << model() << " on " << device();
  }
}

using SlidingVariants = Variants;

TEST_P(SlidingVariants, LeftPaddedBatchEqualsTransformers) {
  auto j = variant_golden(model());
  ASSERT_TRUE(j.contains("batched")) << model();
  const auto& b = j["batched"];
  CausalLM& m = load();
  auto out =
      m.generate(rows32(b["input_ids"]), rows32(b["attention_mask"]), greedy(b["max_new_tokens"].get<int>()));
  EXPECT_EQ(out.sequences, rows32(b["output_ids"])) << model() << " on " << device();
}

const char* kModels[] = {"llama_gelu",    "llama_gelu_tanh",    "qwen3_gelu_new", "llama_relu",
                         "qwen3_sliding", "qwen3_sliding_long", "qwen2_sliding",  "mistral_sliding",
                         "phi3_sliding",  "gemma2_sliding",     "gemma2_softcap", "gemma3_sliding",
                         "qwen3_yarn",    "llama_dynamic",      "phi3_longrope",  "qwen3_yarn_long"};
// The sliding-window checkpoints with a left-padded batch golden.
const char* kSliding[] = {"qwen3_sliding", "qwen2_sliding",  "mistral_sliding",
                          "phi3_sliding",  "gemma2_sliding", "gemma3_sliding"};

INSTANTIATE_TEST_SUITE_P(Tiny, Variants,
                         ::testing::Combine(::testing::ValuesIn(kModels),
                                            ::testing::Values("cpu", "xla-cpu")),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Tiny, SlidingVariants,
                         ::testing::Combine(::testing::ValuesIn(kSliding),
                                            ::testing::Values("cpu", "xla-cpu")),
                         param_name);

// The sliding window with a cache that grows in chunks and with ops run one by one (cpu).
TEST(VariantsCpu, SlidingWindowWithDynamicCacheAndDisableCompile) {
  auto j = variant_golden("qwen3_sliding");
  LoadOptions opt;
  opt.dtype = DType::F32;
  CausalLM m = AutoModelForCausalLM::from_pretrained(golden::variant_path("qwen3_sliding"), opt);
  const auto& c = j["greedy"][1];  // the 24-token prompt
  GenerationConfig g = greedy(c["max_new_tokens"].get<int>());
  g.cache_implementation = "dynamic";
  EXPECT_EQ(m.generate({to32(c["input_ids"])}, {}, g).sequences[0], to32(c["output_ids"]));
  g.cache_implementation = "static";
  g.disable_compile = true;
  EXPECT_EQ(m.generate({to32(c["input_ids"])}, {}, g).sequences[0], to32(c["output_ids"]));
}

// Ropes whose frequencies follow the sequence's length (dynamic, longrope): a prompt past the switch is
// computed whole even where the engine would split it (prefill_chunked's chunks, the prefix cache's canonical
// chunks, a cached prefix computed with the short frequencies), so each gives Transformers' tokens.
TEST(RopeScalingCpu, LongPromptsRunWholeThroughChunksAndPrefixCache) {
  for (const char* name : {"llama_dynamic", "phi3_longrope"}) {
    auto j = variant_golden(name);
    LoadOptions opt;
    opt.dtype = DType::F32;
    CausalLM m = AutoModelForCausalLM::from_pretrained(golden::variant_path(name), opt);
    const auto& c = j["greedy"][1];  // the 300-token prompt
    const std::vector<int32_t> prompt = to32(c["input_ids"]), want = to32(c["output_ids"]);
    const GenerationConfig g = greedy(c["max_new_tokens"].get<int>());
    const std::vector<int32_t> new_tokens(want.begin() + static_cast<long>(prompt.size()), want.end());
    SlotBatch b(m, 2, 512, {.host_sampling = true, .prefix_cache = true, .prefix_block = 16});
    auto run = [&](int slot) {
      while (b.running_count() > 0) b.step();
      std::vector<int32_t> got = b.tokens(slot);
      b.release(slot);
      return got;
    };
    // Its first 48 tokens first (below the switch: cached in canonical chunks), then the whole prompt.
    b.prefill(0, std::vector<int32_t>(prompt.begin(), prompt.begin() + 48), greedy(4));
    run(0);
    EXPECT_EQ(b.cached_prefix(prompt), 0) << name << ": a prefix cached below the switch was offered";
    b.prefill(0, prompt, g);
    EXPECT_EQ(run(0), new_tokens) << name << " after a cached prefix";
    b.prefill_chunked(1, prompt, g, 32);
    EXPECT_EQ(run(1), new_tokens) << name << " in chunks of 32";
  }
}

// longrope: decoding across the switch from a shorter prompt. generate() recomputes the whole sequence at
// that step, as Transformers' Phi3ForCausalLM does (the golden's 40-token case crosses at its 25th token,
// checked by GreedyTokensIdenticalFor32Steps); where that is not done (a batch, SlotBatch: the server and
// speculative generate) the request is refused up front, naming the switch.
TEST(RopeScalingCpu, LongropeDecodingAcrossTheSwitch) {
  auto j = variant_golden("phi3_longrope");
  LoadOptions opt;
  opt.dtype = DType::F32;
  CausalLM m = AutoModelForCausalLM::from_pretrained(golden::variant_path("phi3_longrope"), opt);
  const auto& c = j["greedy"][0];
  const std::vector<int32_t> prompt = to32(c["input_ids"]);
  ASSERT_EQ(prompt.size(), 40u);
  // With the recompute every token matches; the step where it happens is the 25th.
  EXPECT_EQ(m.generate({prompt}, {}, greedy(32)).sequences[0], to32(c["output_ids"]));
  auto expect_refused = [](const std::function<void()>& f, const char* what) {
    try {
      f();
      ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("original_max_position_embeddings (64)"), std::string::npos) << what << ": " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  };
  expect_refused([&] { m.generate({prompt, prompt}, {}, greedy(26)); }, "a batch");
  SlotBatch b(m, 1, 128, {.host_sampling = true});
  expect_refused([&] { b.prefill(0, prompt, greedy(26)); }, "SlotBatch");
  EXPECT_NO_THROW(b.prefill(0, prompt, greedy(25)));  // up to the switch
  b.release(0);
  EXPECT_NO_THROW(b.prefill(0, std::vector<int32_t>(70, 7), greedy(26)));  // a prompt past it
  // A left-padded single row: Transformers decides on the padded length there, so it is refused too.
  std::vector<int32_t> padded(prompt);
  padded.insert(padded.begin(), 3, 0);
  std::vector<int32_t> mask(padded.size(), 1);
  std::fill(mask.begin(), mask.begin() + 3, 0);
  expect_refused([&] { m.generate({padded}, {mask}, greedy(26)); }, "a padded row");
  // What the server checks at submit (a 400): the same rule from ModelInfo.
  EXPECT_EQ(m.info().longrope_switch, 64);
  EXPECT_FALSE(models::longrope_crossing_error(64, 40, 26).empty());
  EXPECT_TRUE(models::longrope_crossing_error(64, 40, 25).empty());
  EXPECT_TRUE(models::longrope_crossing_error(64, 65, 100).empty());
  // Only Phi3ForCausalLM recomputes in Transformers: a Llama-family longrope switches per forward instead.
  auto config = golden::load_json(golden::variant_path("phi3_longrope") + "/config.json");
  config["architectures"] = {"LlamaForCausalLM"};
  config["model_type"] = "llama";
  config["rope_parameters"]["factor"] = 8.0;
  const models::DecoderConfig llama =
      models::find_architecture("LlamaForCausalLM", "config.json").parse_config(config, "config.json");
  EXPECT_EQ(llama.rope.type, "longrope");
  EXPECT_EQ(llama.longrope_switch(), 0);
  EXPECT_TRUE(llama.rope_crossing_error(40, 100).empty());
  EXPECT_EQ(llama.rope_split_limit(), 64);
}

// The positions a sequence may reach follow the rope scaling: yarn serves original x factor (Qwen3's card:
// 32768 x 4 = 131072 where max_position_embeddings says 40960), dynamic any length; beyond it, a refusal
// naming both numbers.
TEST(RopeScalingCpu, ContextLimitFollowsTheScaling) {
  auto config = golden::load_json(golden::variant_path("qwen3_yarn_long") + "/config.json");
  config["max_position_embeddings"] = 40960;
  config["rope_parameters"]["original_max_position_embeddings"] = 32768;
  const models::DecoderConfig c =
      models::find_architecture("Qwen3ForCausalLM", "config.json").parse_config(config, "config.json");
  EXPECT_EQ(c.context_limit(), 131072);
  const std::string why = c.context_limit_str();
  EXPECT_NE(why.find("131072"), std::string::npos) << why;
  EXPECT_NE(why.find("40960"), std::string::npos) << why;

  LoadOptions opt;
  opt.dtype = DType::F32;
  CausalLM dyn = AutoModelForCausalLM::from_pretrained(golden::variant_path("llama_dynamic"), opt);
  EXPECT_EQ(dyn.info().max_position_embeddings, 64);
  EXPECT_GT(dyn.info().context_limit, 1 << 20);  // dynamic: any length
  CausalLM yarn = AutoModelForCausalLM::from_pretrained(golden::variant_path("qwen3_yarn_long"), opt);
  EXPECT_EQ(yarn.info().context_limit, 512);  // 64 x 4 = 256 < max_position_embeddings 512
  try {
    yarn.generate({std::vector<int32_t>(500, 5)}, {}, greedy(20));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_position_embeddings (512)"), std::string::npos) << e.what();
  }
}

// In-step sampling (graph::Op::Sample) on a row whose logits are not finite returns token id -1, so the host
// can fail naming the step instead of emitting a token: row 0 reads an embedding row of NaN, row 1 does not.
void check_non_finite_row_gives_minus_one(backends::Backend& be) {
  // llama_gqa: untied, so the poisoned embedding row is not also a row of the LM head.
  step_test::Checkpoint ck = step_test::load_checkpoint(golden::model_path("llama_gqa"), "llama_gqa");
  const models::Architecture& arch = *ck.arch;
  const models::DecoderConfig& config = ck.config;
  backends::WeightMap& weights = ck.weights;
  const int32_t poisoned = 7;
  Tensor& table = weights.at("model.embed_tokens.weight");  // [vocab, hidden]
  Tensor copy = Tensor::empty(DType::F32, table.shape);
  std::memcpy(copy.data, table.data, table.nbytes());
  for (int64_t i = 0; i < config.hidden_size; ++i) copy.ptr<float>()[poisoned * config.hidden_size + i] = NAN;
  table = copy;
  be.bind_weights(weights);
  const int batch = 2, seq = 3, len = 4;
  backends::StepInputs in;
  in.ids = {5, poisoned, 6, 5, 8, 6};  // [2 * 3]
  in.positions = {0, 1, 2, 0, 1, 2};
  in.slots = {0, 1, 2};
  in.kv_begin = {0, 0};
  in.seen_from = {0, 0};
  for (auto mode : {graph::Sampling::Greedy, graph::Sampling::Sample}) {
    graph::Graph g =
        arch.build_graph(config, step_test::step_key(graph::Phase::Prefill, batch, seq, len, 0, mode));
    graph::append_sampling(g, config.vocab_size);
    in.sample_params.clear();
    // A Sample program samples the rows that ask for it (a Greedy one ignores it).
    const sampling::SamplingParams p{.seed = 3, .do_sample = true};
    for (int b = 0; b < batch; ++b) p.append_encoded(0, in.sample_params);
    std::vector<int32_t> tokens;
    be.compile(g)->run_tokens(
        in, *be.create_cache(config.num_layers, batch, config.num_kv_heads, len, config.head_dim), tokens);
    ASSERT_EQ(tokens.size(), 2u);
    EXPECT_EQ(tokens[0], -1) << be.name() << " " << graph::sampling_name(mode);
    EXPECT_GE(tokens[1], 0) << be.name() << " " << graph::sampling_name(mode);
    EXPECT_LT(tokens[1], config.vocab_size) << be.name() << " " << graph::sampling_name(mode);
  }
}

TEST(InStepSampleNonFinite, RowGetsMinusOneOnCpu) {
  auto be = backends::make_cpu_backend();
  check_non_finite_row_gives_minus_one(*be);
}

TEST(InStepSampleNonFinite, RowGetsMinusOneOnXlaCpu) {
  REQUIRE_XLA_CPU();
  auto be = backends::make_pjrt_backend("xla-cpu");
  check_non_finite_row_gives_minus_one(*be);
}

}  // namespace
