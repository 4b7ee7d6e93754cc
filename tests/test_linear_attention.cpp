// Qwen3.5's hybrid layers (Gated DeltaNet linear attention with a recurrent state per sequence, beside gated
// full attention): the recurrent state follows a sequence through batches, slot reuse, chunked prompts and
// preemption; what cannot rewind it (prefix caching and reuse, speculative drafts) is off or refused by name;
// the same on xla-cpu through the StableHLO lowering. Transformers' goldens for it are checked in
// tests/test_model_families.cpp (fixture qwen3_5).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "error_util.h"
#include "golden_util.h"
#include "pjrt_test_util.h"
#include "tessera/batch.h"
#include "tessera/model.h"
#include "test_env_util.h"

using namespace tessera;
namespace golden = tessera::golden;

namespace {

GenerationConfig greedy(int n, int lookup = 0) {
  GenerationConfig g;
  g.max_new_tokens = n;
  g.prompt_lookup_num_tokens = lookup;
  return g;
}

std::vector<int32_t> ids(int n, int seed, int64_t vocab = 1024) {
  std::vector<int32_t> out;
  uint32_t x = 2654435761u * static_cast<uint32_t>(seed + 1);
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    out.push_back(3 + static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab - 3)));
  }
  return out;
}

struct Trace {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;
};

SlotBatchOptions options() {
  return {.host_sampling = true, .keep_logits = true, .decode_rows = SlotBatchOptions::DecodeRows::Running};
}

// Keeps the logits of slot `slot`'s newest token when it got one.
void take(const SlotBatch& batch, int slot, Trace& out) {
  if (batch.tokens(slot).size() > out.logits.size()) out.logits.push_back(batch.last_logits(slot));
}

// Slot `slot` of `batch` from `prompt` to the end of n tokens: every token's logits.
Trace run(SlotBatch& batch, int slot, const std::vector<int32_t>& prompt, int n) {
  Trace out;
  batch.prefill(slot, prompt, greedy(n));
  take(batch, slot, out);
  while (batch.running(slot)) {
    batch.step();
    take(batch, slot, out);
  }
  out.tokens = batch.tokens(slot);
  return out;
}

void expect_error_naming(const std::function<void()>& f, std::initializer_list<const char*> needles) {
  for (const char* n : needles) tessera::testing::expect_error(f, n);
}

void expect_bit_equal(const Trace& a, const Trace& b, const char* what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.logits.size(), b.logits.size()) << what;
  for (size_t i = 0; i < a.logits.size(); ++i)
    EXPECT_TRUE(a.logits[i] == b.logits[i]) << what << ", token " << i;
}

}  // namespace

TEST(LinearAttention, TheFixtureHasRecurrentState) {
  CausalLM m = golden::load_f32("qwen3_5");
  EXPECT_TRUE(m.info().recurrent_state);
  EXPECT_FALSE(golden::load_f32("qwen3_tied").info().recurrent_state);
  // Keys and values only for the one full-attention layer of three: 2 kv heads x 16 x float32, K and V.
  EXPECT_EQ(m.info().kv_bytes_per_token, 2u * 1 * 2 * 16 * 4);
}

// Every hybrid fixture: Qwen3.5 dense, Qwen3.5-MoE, Qwen3-Next (fused projections).
constexpr const char* kHybrids[] = {"qwen3_5", "qwen3_5_moe", "qwen3_next"};

// A slot reused after a longer sequence, and two sequences side by side: each equals the sequence alone in a
// fresh batch, to the last bit (the state is reset at a sequence's first token, and rows never mix).
TEST(LinearAttention, SlotReuseAndCompanyChangeNoBit) {
  for (const char* name : kHybrids) {
    SCOPED_TRACE(name);
    CausalLM m = golden::load_f32(name);
    const std::vector<int32_t> long_prompt = ids(120, 1), a = ids(9, 2), b = ids(30, 3);
    SlotBatch alone_a(m, 1, 200, options()), alone_b(m, 1, 200, options());
    const Trace want_a = run(alone_a, 0, a, 12), want_b = run(alone_b, 0, b, 12);

    SlotBatch batch(m, 2, 200, options());
    run(batch, 0, long_prompt, 20);  // slot 0's state now holds a long sequence
    batch.release(0);
    expect_bit_equal(run(batch, 0, a, 12), want_a, "slot reused after a longer sequence");

    // Both slots running at once, prefilled at different steps.
    batch.release(0);
    Trace got_a, got_b;
    batch.prefill(0, a, greedy(12));
    take(batch, 0, got_a);
    batch.step();
    take(batch, 0, got_a);
    batch.prefill(1, b, greedy(12));
    take(batch, 1, got_b);
    while (batch.running(0) || batch.running(1)) {
      batch.step();
      take(batch, 0, got_a);
      take(batch, 1, got_b);
    }
    got_a.tokens = batch.tokens(0);
    got_b.tokens = batch.tokens(1);
    expect_bit_equal(got_a, want_a, "slot 0 beside slot 1");
    expect_bit_equal(got_b, want_b, "slot 1 beside slot 0");
  }
}

// A prompt run in chunks carries the state from chunk to chunk: the same greedy tokens as the whole prompt,
// and Transformers' logits for the fixture's 150-token prompt (past one chunk of its chunked delta rule).
TEST(LinearAttention, ChunkedPromptsCarryTheState) {
  for (const char* name : kHybrids) {
    SCOPED_TRACE(name);
    CausalLM m = golden::load_f32(name);
    const nlohmann::json j = golden::load_model_golden(name);
    const auto& c = j["forward"].back();
    const std::vector<int64_t> prompt64 = golden::ids(c["input_ids"]);
    const std::vector<int32_t> prompt(prompt64.begin(), prompt64.end());
    ASSERT_GT(prompt.size(), 64u);
    const auto expect = golden::matrix(c["logits"]);  // [150, vocab]
    SlotBatch chunked(m, 1, 200, options());
    chunked.prefill_chunked(0, prompt, greedy(8), 32);  // padded on the left to 5 chunks of 32
    while (chunked.tokens(0).empty()) chunked.step();
    const std::vector<float> last = chunked.last_logits(0);
    ASSERT_EQ(last.size(), expect.cols);
    const std::span<const float> want = expect.row(expect.rows - 1);
    double worst = 0;
    for (size_t i = 0; i < expect.cols; ++i) worst = std::max(worst, std::abs(double(last[i]) - want[i]));
    EXPECT_LE(worst, 1e-4);
    while (chunked.running(0)) chunked.step();
    SlotBatch whole(m, 1, 200, options());
    whole.prefill(0, prompt, greedy(8));
    while (whole.running(0)) whole.step();
    EXPECT_EQ(chunked.tokens(0), whole.tokens(0));
  }
}

// Prefix caching for a recurrent state: the state after a row's last whole chunk is kept (a snapshot), so a
// prompt sharing every cached chunk of a row (the next turn of a chat: the previous prompt, the answer, more)
// starts there, with the logits of a miss to the last bit; a prompt sharing only some of them computes all.
// What would need the state at an earlier position is refused (prefix reuse, a draft model) or stands aside
// (prompt lookup decodes without drafts, the same tokens).
TEST(LinearAttention, PrefixCachingHitsWholePromptsAndSpeculationStandsAside) {
  CausalLM m = golden::load_f32("qwen3_5");
  SlotBatchOptions cached = options();
  cached.prefix_block = 16;
  SlotBatch batch(m, 2, 240, cached);
  EXPECT_TRUE(batch.prefix_caching());
  EXPECT_FALSE(batch.speculates());
  const std::vector<int32_t> turn1 = ids(70, 4);  // 4 whole chunks (64 tokens) cached with their state
  const Trace first = run(batch, 0, turn1, 6);
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), first.tokens.begin(), first.tokens.end());
  const std::vector<int32_t> more = ids(30, 5);
  turn2.insert(turn2.end(), more.begin(), more.end());
  EXPECT_EQ(batch.cached_prefix(turn2), 64);
  const int64_t before = batch.reused_tokens();
  const Trace hit = run(batch, 1, turn2, 8);  // row 0's chunks and state copied into row 1
  EXPECT_EQ(batch.reused_tokens() - before, 64);
  SlotBatch fresh(m, 1, 240, cached);
  const Trace miss = run(fresh, 0, turn2, 8);
  EXPECT_EQ(fresh.reused_tokens(), 0);
  expect_bit_equal(hit, miss, "a hit from another row");
  // The same prompt again in its own row (released): its snapshot is restored in place.
  batch.release(1);
  EXPECT_EQ(batch.choose_slot(turn2), 1);
  expect_bit_equal(run(batch, 1, turn2, 8), miss, "a hit from the row's own snapshot");
  // Sharing 3 of row 0's 4 cached chunks is no hit: the state after 3 chunks was not kept.
  std::vector<int32_t> partial(turn1.begin(), turn1.begin() + 48);
  partial.insert(partial.end(), more.begin(), more.end());
  batch.release(0);
  batch.release(1);
  EXPECT_EQ(batch.cached_prefix(partial), 0);

  const nlohmann::json j = golden::load_model_golden("qwen3_5");
  const auto& g = j["greedy"][0];
  const std::vector<int64_t> in64 = golden::ids(g["input_ids"]);
  const std::vector<int32_t> in(in64.begin(), in64.end());
  const int n = g["max_new_tokens"].get<int>();
  const GenerateOutput spec = m.generate({in}, {}, greedy(n, 4));
  const std::vector<int64_t> want64 = golden::ids(g["output_ids"]);
  EXPECT_EQ(spec.sequences[0], std::vector<int32_t>(want64.begin(), want64.end()));
  EXPECT_EQ(spec.draft_tokens, 0);

  SlotBatchOptions reuse = options();
  reuse.prefix_reuse = true;
  expect_error_naming([&] { SlotBatch(m, 1, 64, reuse); },
                      {"prefix_reuse", "Qwen3_5ForCausalLM", "recurrent state"});
  SlotBatchOptions draft = options();
  draft.draft_model = &m;
  expect_error_naming([&] { SlotBatch(m, 1, 64, draft); },
                      {"draft model", "Qwen3_5ForCausalLM", "recurrent state"});
}

// Through the StableHLO lowering (xla-cpu): the state is a donated device buffer per layer, the prompt's
// delta rule a stablehlo.while over its tokens. A slot reused after a longer sequence gives the sequence
// alone to the last bit (the same programs, other rows' data), a slot beside another its tokens (a two-row
// program); the tokens and the logits follow the cpu device's; a prompt in chunks carries the state
// (Transformers' logits past one of its chunks).
TEST(LinearAttention, XlaCpuKeepsTheStatePerRowAndFollowsTheCpuDevice) {
  REQUIRE_XLA_CPU();
  LoadOptions o;
  o.device_map = "xla-cpu";
  o.dtype = DType::F32;
  CausalLM m = AutoModelForCausalLM::from_pretrained(golden::model_path("qwen3_next"), o);
  CausalLM cpu = golden::load_f32("qwen3_next");
  const std::vector<int32_t> long_prompt = ids(40, 1), a = ids(9, 2), b = ids(20, 3);
  SlotBatch alone(m, 2, 128, options()), on_cpu(cpu, 2, 128, options());
  const Trace want_a = run(alone, 0, a, 8), cpu_a = run(on_cpu, 0, a, 8);
  EXPECT_EQ(want_a.tokens, cpu_a.tokens);
  ASSERT_EQ(want_a.logits.size(), cpu_a.logits.size());
  for (size_t i = 0; i < want_a.logits.size(); ++i)
    EXPECT_LE(golden::max_abs_diff(want_a.logits[i], cpu_a.logits[i]).max_abs, 1e-4) << "token " << i;

  SlotBatch batch(m, 2, 128, options());
  run(batch, 0, long_prompt, 10);
  batch.release(0);
  expect_bit_equal(run(batch, 0, a, 8), want_a, "slot reused after a longer sequence");
  batch.release(0);
  Trace got_a;
  batch.prefill(1, b, greedy(30));
  batch.prefill(0, a, greedy(8));
  take(batch, 0, got_a);
  while (batch.running(0)) {
    batch.step();
    take(batch, 0, got_a);
  }
  got_a.tokens = batch.tokens(0);
  // Beside another running row the decode steps are another program (two rows), which XLA may compile to
  // other sums: the same tokens, the logits within the goldens' 1e-4.
  EXPECT_EQ(got_a.tokens, want_a.tokens);
  ASSERT_EQ(got_a.logits.size(), want_a.logits.size());
  for (size_t i = 0; i < got_a.logits.size(); ++i)
    EXPECT_LE(golden::max_abs_diff(got_a.logits[i], want_a.logits[i]).max_abs, 1e-4) << "token " << i;

  const nlohmann::json j = golden::load_model_golden("qwen3_next");
  const auto& c = j["forward"].back();
  const std::vector<int64_t> p64 = golden::ids(c["input_ids"]);
  const std::vector<int32_t> prompt(p64.begin(), p64.end());
  ASSERT_GT(prompt.size(), 64u);
  SlotBatch chunked(m, 1, 200, options());
  chunked.prefill_chunked(0, prompt, greedy(2), 64);
  while (chunked.tokens(0).empty()) chunked.step();
  const auto expect = golden::matrix(c["logits"]);
  EXPECT_LE(golden::max_abs_diff(chunked.last_logits(0), expect.row(expect.rows - 1)).max_abs, 1e-4);
}

// The hub's Qwen3.5 files are Qwen3_5ForConditionalGeneration: the language model is read from them (its
// text_config, model.language_model.*), the vision tower and the mtp.* layers left out; the text logits are
// Transformers' for that wrapper, and bit-equal to the same weights saved as Qwen3_5ForCausalLM.
TEST(LinearAttention, TheHubsMultimodalLayoutLoadsAsItsLanguageModel) {
  const nlohmann::json j = golden::load_json(golden::model_path("qwen3_5_hub/hub_golden.json"));
  const std::vector<int64_t> ids64 = golden::ids(j["input_ids"]);
  const std::vector<int32_t> ids(ids64.begin(), ids64.end());
  CausalLM hub = golden::load_f32("qwen3_5_hub");
  EXPECT_EQ(hub.info().architecture, "Qwen3_5ForCausalLM");
  const std::vector<float> got = hub.forward(ids);
  const auto want = golden::matrix(j["logits"]);
  EXPECT_LE(golden::max_abs_diff(got, want.data).max_abs, 1e-4);
  EXPECT_TRUE(got == golden::load_f32("qwen3_5").forward(ids));

  // The wrapper's tie_word_embeddings decides (Transformers ties the wrapper's lm_head by it), not
  // text_config's; a wrapper without its text_config is refused by name.
  tessera::testing::TempDir dir("tessera_qwen35_hub");
  std::filesystem::copy_file(golden::model_path("qwen3_5_hub/model.safetensors"),
                             dir.path() + "/model.safetensors");
  nlohmann::json cfg = golden::load_json(golden::model_path("qwen3_5_hub/config.json"));
  auto write = [&](const nlohmann::json& c) { std::ofstream(dir.path() + "/config.json") << c.dump(); };
  nlohmann::json tie = cfg;
  tie["tie_word_embeddings"] = true;
  tie["text_config"]["tie_word_embeddings"] = false;
  write(tie);
  LoadOptions f32;
  f32.dtype = DType::F32;
  EXPECT_FALSE(AutoModelForCausalLM::from_pretrained(dir.path(), f32).forward(ids) ==
               got);  // tied: other logits
  nlohmann::json bare = cfg;
  bare.erase("text_config");
  write(bare);
  expect_error_naming([&] { AutoModelForCausalLM::from_pretrained(dir.path(), {}); },
                      {"Qwen3_5ForConditionalGeneration", "text_config"});
}

// Qwen3.5-MoE's hub files: Qwen3_5MoeForConditionalGeneration with the experts fused
// (mlp.experts.gate_up_proj [E, 2I, H], down_proj [E, H, I]) where the plain fixture stores one tensor per
// expert: the same model.
TEST(LinearAttention, TheMoeHubLayoutWithFusedExpertsLoadsAsItsLanguageModel) {
  const nlohmann::json j = golden::load_json(golden::model_path("qwen3_5_moe_hub/hub_golden.json"));
  const std::vector<int64_t> ids64 = golden::ids(j["input_ids"]);
  const std::vector<int32_t> ids(ids64.begin(), ids64.end());
  CausalLM hub = golden::load_f32("qwen3_5_moe_hub");
  EXPECT_EQ(hub.info().architecture, "Qwen3_5MoeForCausalLM");
  const std::vector<float> got = hub.forward(ids);
  EXPECT_LE(golden::max_abs_diff(got, golden::matrix(j["logits"]).data).max_abs, 1e-4);
  EXPECT_TRUE(got == golden::load_f32("qwen3_5_moe").forward(ids));
}

// The same request in fresh batches, one after another: the same bits every time. The first run's buffers lie
// at other addresses than the later ones' (a new arena, then pooled ones), which once picked the vectorised
// or the scalar path of the delta rule's loops with and without fused multiply-adds (now compiled without
// contraction).
TEST(LinearAttention, RepeatedRunsGiveTheSameBits) {
  for (const char* name : kHybrids) {
    SCOPED_TRACE(name);
    CausalLM m = golden::load_f32(name);
    const std::vector<int32_t> prompt = ids(9, 7);
    SlotBatch first_batch(m, 1, 64, options());
    const Trace first = run(first_batch, 0, prompt, 6);
    for (int rep = 0; rep < 3; ++rep) {
      SlotBatch again(m, 1, 64, options());
      expect_bit_equal(run(again, 0, prompt, 6), first, "a later run");
    }
  }
}

// Qwen3.5 and Qwen3.5-MoE GGUFs as llama.cpp's own converter writes them (tools/make_io_fixtures.py
// tiny_qwen35, tiny_qwen35moe: the qwen3_5 and qwen3_5_moe fixtures converted, f32): norms stored as
// 1 + weight, A_log as -exp(A_log), the convolution squeezed, the linear attention's value heads reordered
// tiled over the key heads (2 key heads, 4 value heads); the MoE's experts stacked (ffn_*_exps) and its
// shared expert as ffn_*_shexp. Read as stored, the value heads in the converter's order: Transformers'
// logits for the safetensors checkpoint at every position within 1e-4 and its greedy tokens, on cpu and
// xla-cpu.
void expect_qwen35_gguf_matches_goldens(const std::string& device) {
  // tiny_qwen35moe_requantised: the same file through llama-quantize (COPY), which squeezes the shared
  // expert's gate to [H], as every quantised qwen35moe file stores it.
  for (const auto& [file, fixture] :
       {std::pair{"tiny_qwen35.gguf", "qwen3_5"}, std::pair{"tiny_qwen35moe.gguf", "qwen3_5_moe"},
        std::pair{"tiny_qwen35moe_requantised.gguf", "qwen3_5_moe"}}) {
    SCOPED_TRACE(file);
    const std::string path = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/io/" + file;
    const nlohmann::json j = golden::load_model_golden(fixture);
    LoadOptions o;
    o.device_map = device;
    o.dtype = DType::F32;
    CausalLM m = AutoModelForCausalLM::from_pretrained(path, o);
    EXPECT_EQ(m.info().architecture, j["architecture"].get<std::string>());
    for (const auto& c : j["forward"]) {
      const std::vector<int64_t> in64 = golden::ids(c["input_ids"]);
      const std::vector<int32_t> in(in64.begin(), in64.end());
      const auto want = golden::matrix(c["logits"]);
      EXPECT_LE(golden::max_abs_diff(m.forward(in), want.data).max_abs, 1e-4) << "length " << in.size();
    }
    const auto& g = j["greedy"][0];
    const std::vector<int64_t> in64 = golden::ids(g["input_ids"]);
    const std::vector<int32_t> in(in64.begin(), in64.end());
    const std::vector<int64_t> want64 = golden::ids(g["output_ids"]);
    EXPECT_EQ(m.generate({in}, {}, greedy(g["max_new_tokens"].get<int>())).sequences[0],
              std::vector<int32_t>(want64.begin(), want64.end()));
  }
}

TEST(LinearAttention, LlamaCppsQwen35GgufsMatchTheTransformersGoldens) {
  expect_qwen35_gguf_matches_goldens("cpu");
}

// A Qwen3-Next GGUF as llama.cpp's own converter writes it by default (tools/make_io_fixtures.py
// tiny_qwen3next: in_proj_qkvz split into attn_qkv / attn_gate, in_proj_ba whole as ssm_ba, the value heads
// in Transformers' grouped order, 3 per key head; its multi-token-prediction block appended as blk.4.*, which
// is left unread): Transformers' logits for the checkpoint it was converted from, at every position of a
// 90-token prompt, within 1e-4, on cpu and xla-cpu.
void expect_qwen3next_gguf_matches_transformers(const std::string& device) {
  const std::string dir = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/io/";
  const nlohmann::json j = golden::load_json(dir + "tiny_qwen3next.json");
  LoadOptions o;
  o.device_map = device;
  o.dtype = DType::F32;
  CausalLM m = AutoModelForCausalLM::from_pretrained(dir + "tiny_qwen3next.gguf", o);
  EXPECT_EQ(m.info().architecture, "Qwen3NextForCausalLM");
  EXPECT_EQ(m.info().num_layers, 4);  // the nextn block is not a decoder layer
  const std::vector<int64_t> in64 = golden::ids(j["input_ids"]);
  const std::vector<int32_t> in(in64.begin(), in64.end());
  EXPECT_LE(golden::max_abs_diff(m.forward(in), golden::matrix(j["logits"]).data).max_abs, 1e-4);
}

TEST(LinearAttention, LlamaCppsQwen3NextGgufMatchesTransformers) {
  expect_qwen3next_gguf_matches_transformers("cpu");
}

TEST(LinearAttention, LlamaCppsQwen3NextGgufMatchesTransformersOnXlaCpu) {
  REQUIRE_XLA_CPU();
  expect_qwen3next_gguf_matches_transformers("xla-cpu");
}

TEST(LinearAttention, LlamaCppsQwen35GgufsMatchTheTransformersGoldensOnXlaCpu) {
  REQUIRE_XLA_CPU();
  expect_qwen35_gguf_matches_goldens("xla-cpu");
}
