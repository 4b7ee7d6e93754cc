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

// longrope: decoding across the switch from a shorter prompt. At that step the whole sequence is computed
// again with the long factors, as Transformers' Phi3ForCausalLM does (the golden's 40-token case crosses at
// its 25th token): by generate() alone, and per sequence wherever it keeps company — a batch of prompts, a
// left-padded row, speculative decoding, SlotBatch (the server) beside another sequence, a capped KV pool
// that preempts the sequence after its crossing and resumes it — each giving the golden's tokens
// (Transformers' for that prompt alone). Where slots cannot run it (disable_compile), a batch is refused,
// naming the switch.
TEST(RopeScalingCpu, LongropeDecodingAcrossTheSwitch) {
  auto j = variant_golden("phi3_longrope");
  LoadOptions opt;
  opt.dtype = DType::F32;
  CausalLM m = AutoModelForCausalLM::from_pretrained(golden::variant_path("phi3_longrope"), opt);
  const auto& c = j["greedy"][0];
  const std::vector<int32_t> prompt = to32(c["input_ids"]), want = to32(c["output_ids"]);
  ASSERT_EQ(prompt.size(), 40u);
  const std::vector<int32_t> want_new(want.begin() + 40, want.end());
  const auto& c2 = j["greedy"][1];  // 300 tokens: past the switch from the start
  const std::vector<int32_t> prompt2 = to32(c2["input_ids"]), want2 = to32(c2["output_ids"]);
  const std::vector<int32_t> want2_new(want2.begin() + static_cast<long>(prompt2.size()), want2.end());
  // Alone, and with prompt lookup (drafts stop short of the switch; the crossing step computes whole).
  EXPECT_EQ(m.generate({prompt}, {}, greedy(32)).sequences[0], want);
  GenerationConfig lookup = greedy(32);
  lookup.prompt_lookup_num_tokens = 3;
  EXPECT_EQ(m.generate({prompt}, {}, lookup).sequences[0], want) << "prompt lookup";
  // A batch: the 40-token prompt left-padded beside the 300-token one; and one padded row alone.
  std::vector<int32_t> padded(prompt2.size() - prompt.size(), 0), mask(prompt2.size(), 1);
  std::fill(mask.begin(), mask.begin() + static_cast<long>(padded.size()), 0);
  padded.insert(padded.end(), prompt.begin(), prompt.end());
  const GenerateOutput both =
      m.generate({padded, prompt2}, {mask, std::vector<int32_t>(prompt2.size(), 1)}, greedy(32));
  EXPECT_EQ(std::vector<int32_t>(both.sequences[0].begin() + static_cast<long>(padded.size()),
                                 both.sequences[0].end()),
            want_new)
      << "the crossing row of a batch";
  EXPECT_EQ(std::vector<int32_t>(both.sequences[1].begin() + static_cast<long>(prompt2.size()),
                                 both.sequences[1].end()),
            want2_new)
      << "its neighbour";
  const GenerateOutput alone_padded = m.generate({padded}, {mask}, greedy(32));
  EXPECT_EQ(std::vector<int32_t>(alone_padded.sequences[0].begin() + static_cast<long>(padded.size()),
                                 alone_padded.sequences[0].end()),
            want_new)
      << "a padded row";
  // SlotBatch (the server's): beside a sequence past the switch.
  {
    SlotBatch b(m, 2, 512, {.host_sampling = true});
    b.prefill(1, prompt2, greedy(32));
    b.prefill(0, prompt, greedy(32));
    while (b.running_count() > 0) b.step();
    EXPECT_EQ(b.tokens(0), want_new) << "SlotBatch";
    EXPECT_EQ(b.tokens(1), want2_new) << "SlotBatch, its neighbour";
  }
  // A capped pool of 3 blocks: a 230-token sequence (2 blocks) grows into a third block after the crossing
  // sequence (1 block, started later) has crossed, which is preempted then and resumed once the first ends.
  {
    SlotBatch probe(m, 1, 512, {.host_sampling = true, .decode_rows = SlotBatchOptions::DecodeRows::Running});
    const KvCacheStats kv = probe.kv_cache();
    ASSERT_TRUE(kv.paged);
    ASSERT_EQ(kv.block_tokens, 128) << "the pool's arithmetic below assumes 128-slot blocks";
    const std::vector<int32_t> long_prompt(prompt2.begin(), prompt2.begin() + 230);
    const std::vector<int32_t> long_alone = m.generate({long_prompt}, {}, greedy(32)).sequences[0];
    SlotBatch b(m, 2, 512,
                {.host_sampling = true,
                 .decode_rows = SlotBatchOptions::DecodeRows::Running,
                 .kv_cache_bytes = 3 * kv.block_bytes});
    b.prefill(0, long_prompt, greedy(32));
    b.prefill(1, prompt, greedy(32));
    std::vector<int32_t> long_got;
    while (b.running_count() > 0) {
      b.step();
      if (b.busy(0) && !b.running(0)) {
        long_got = b.tokens(0);
        b.release(0);
      }
    }
    EXPECT_EQ(b.kv_cache().preemptions, 1);
    EXPECT_EQ(b.tokens(1), want_new) << "preempted after its crossing, resumed";
    EXPECT_EQ(long_got, std::vector<int32_t>(long_alone.begin() + 230, long_alone.end()));
  }
  // No slots to run it on: generate()'s own loop refuses a batch that crosses, naming the switch.
  GenerationConfig eager = greedy(26);
  eager.disable_compile = true;
  try {
    m.generate({padded, prompt2}, {mask, std::vector<int32_t>(prompt2.size(), 1)}, eager);
    ADD_FAILURE() << "a crossing batch accepted without slots";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("original_max_position_embeddings (64)"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_EQ(m.info().longrope_switch, 64);
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
