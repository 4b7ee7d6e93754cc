// Speculative decoding with a draft model (SlotBatchOptions::draft_model): whatever the draft model
// proposes, every token and every logit is what plain decoding gives (greedy and seeded sampled, on every
// golden model, beside other slots); the model itself as its draft confirms nearly every draft; a different
// model of the same vocabulary confirms some; bad settings are refused by name.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "golden_util.h"
#include "tessera/batch.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
namespace golden = tessera::golden;

namespace {

CausalLM load(const std::string& name) { return golden::load_f32(name); }

std::vector<int32_t> ids(int len, int salt, int64_t vocab) { return golden::made_up_ids(len, salt, vocab); }

struct Request {
  std::vector<int32_t> prompt;
  GenerationConfig config;
};

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<std::vector<float>>> logits;  // per request, per token
  SpeculationStats spec;
};

// Every request in its own slot; the second joins two steps after the first.
Outcome run(CausalLM& m, const std::vector<Request>& reqs, CausalLM* draft) {
  const int n = static_cast<int>(reqs.size());
  SlotBatch batch(m, n, 200,
                  {.keep_logits = true,
                   .decode_rows = SlotBatchOptions::DecodeRows::Running,
                   .draft_model = draft,
                   .draft_tokens = 4});
  Outcome out;
  out.tokens.resize(reqs.size());
  out.logits.resize(reqs.size());
  auto keep = [&](int s) {
    const std::vector<int32_t>& t = batch.tokens(s);
    for (int i = static_cast<int>(out.tokens[static_cast<size_t>(s)].size()); i < static_cast<int>(t.size());
         ++i) {
      out.tokens[static_cast<size_t>(s)].push_back(t[static_cast<size_t>(i)]);
      out.logits[static_cast<size_t>(s)].push_back(batch.token_logits(s, i));
    }
  };
  int started = 0;
  for (int step = 0; started < n || batch.running_count() > 0; ++step) {
    if (started < n && (started == 0 || step >= 2)) {
      batch.prefill(started, reqs[static_cast<size_t>(started)].prompt,
                    reqs[static_cast<size_t>(started)].config);
      keep(started++);
    }
    if (batch.running_count() == 0) continue;
    batch.step();
    for (int s = 0; s < started; ++s) keep(s);
  }
  out.spec = batch.speculation();
  return out;
}

std::vector<Request> requests(int64_t vocab) {
  std::vector<Request> r(3);
  r[0].prompt = ids(23, 1, vocab);
  r[0].config.max_new_tokens = 40;
  r[1].prompt = ids(9, 2, vocab);
  r[1].config.max_new_tokens = 33;
  r[1].config.do_sample = true;
  r[1].config.temperature = 0.8f;
  r[1].config.top_k = 30;
  r[1].config.seed = 77;
  r[2].prompt = ids(41, 3, vocab);
  r[2].config.max_new_tokens = 25;
  r[2].config.repetition_penalty = 1.3f;
  return r;
}

void expect_same(const Outcome& got, const Outcome& want) {
  ASSERT_EQ(got.tokens.size(), want.tokens.size());
  for (size_t i = 0; i < got.tokens.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(got.tokens[i], want.tokens[i]);
    ASSERT_EQ(got.logits[i].size(), want.logits[i].size());
    for (size_t t = 0; t < got.logits[i].size(); ++t)
      ASSERT_TRUE(got.logits[i][t] == want.logits[i][t]) << "token " << t << ": logits differ";
  }
}

}  // namespace

// The model drafting for itself: for greedy requests its drafts are its own choices, so nearly all are
// confirmed (the draft's prompt runs as one program, the target's in chunks: a last-bit difference may flip a
// near tie); for a sampled or penalised request (the drafts are greedy and unpenalised) fewer.
TEST(DraftModel, TheModelAsItsOwnDraftGivesPlainTokensAndLogitsOnEveryGoldenModel) {
  for (const std::string& name : golden::positional_model_names()) {
    SCOPED_TRACE(name);
    CausalLM m = load(name);
    const std::vector<Request> reqs = requests(m.info().vocab_size);
    const Outcome plain = run(m, reqs, nullptr);
    const Outcome spec = run(m, reqs, &m);
    expect_same(spec, plain);
    EXPECT_GT(spec.spec.draft_tokens, 0);
    // Greedy requests without penalties: the drafts are (nearly all) the model's own choices.
    const Outcome own = run(m, {reqs[0], reqs[0]}, &m);
    EXPECT_GT(own.spec.accepted_tokens, own.spec.draft_tokens * 9 / 10)
        << own.spec.accepted_tokens << " of " << own.spec.draft_tokens << " confirmed";
  }
}

// Another model of the same vocabulary: its drafts are mostly wrong, and change nothing.
TEST(DraftModel, ADifferentDraftModelChangesNoToken) {
  CausalLM target = load("qwen3_untied"), draft = load("llama_gqa");
  const std::vector<Request> reqs = requests(target.info().vocab_size);
  const Outcome spec = run(target, reqs, &draft);
  expect_same(spec, run(target, reqs, nullptr));
  EXPECT_GT(spec.spec.draft_tokens, 0);
}

// generate(..., assistant): Transformers' goldens (single and left-padded batches) and plain generate(),
// greedy and seeded sampled, with the model as its own assistant and with another.
TEST(DraftModel, GenerateWithAnAssistantEqualsGoldensAndPlainGenerate) {
  CausalLM other = load("llama_gqa");
  for (const std::string& name : golden::positional_model_names()) {
    SCOPED_TRACE(name);
    CausalLM m = load(name);
    const bool use_other =
        (name == "qwen3_tied" || name == "mistral") && other.info().vocab_size == m.info().vocab_size;
    CausalLM& assistant = use_other ? other : m;
    const nlohmann::json j = golden::load_model_golden(name);
    auto to32 = [](const nlohmann::json& a) {
      const std::vector<int64_t> v = golden::ids(a);
      return std::vector<int32_t>(v.begin(), v.end());
    };
    for (const auto& c : j["greedy"]) {
      GenerationConfig g;
      g.max_new_tokens = c["max_new_tokens"].get<int>();
      g.num_assistant_tokens = 4;
      const std::vector<int32_t> ids = to32(c["input_ids"]);
      const GenerateOutput spec = m.generate({ids}, {}, g, nullptr, assistant);
      EXPECT_EQ(spec.sequences[0], to32(c["output_ids"]));
      EXPECT_GT(spec.draft_tokens, 0);
    }
    const auto& b = j["batched"];
    std::vector<std::vector<int32_t>> rows, mask;
    for (const auto& r : b["input_ids"]) rows.push_back(to32(r));
    for (const auto& r : b["attention_mask"]) mask.push_back(to32(r));
    GenerationConfig g;
    g.max_new_tokens = b["max_new_tokens"].get<int>();
    g.pad_token_id = b["pad_token_id"].get<int32_t>();
    EXPECT_EQ(m.generate(rows, mask, g, nullptr, assistant).sequences, m.generate(rows, mask, g).sequences);
    g.do_sample = true;
    g.temperature = 0.7f;
    g.seed = 5;
    EXPECT_EQ(m.generate(rows, mask, g, nullptr, assistant).sequences, m.generate(rows, mask, g).sequences);
  }
}

TEST(DraftModel, BadSettingsAreRefusedByName) {
  CausalLM m = load("qwen3_tied"), other = load("llama3_v4");  // 1024 ids and 128
  auto message = [&](const SlotBatchOptions& o) -> std::string {
    try {
      SlotBatch b(m, 2, 64, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  using Rows = SlotBatchOptions::DecodeRows;
  EXPECT_NE(message({.decode_rows = Rows::Running, .draft_model = &other}).find("vocabulary has 128 ids"),
            std::string::npos);
  EXPECT_NE(
      message({.decode_rows = Rows::Running, .draft_model = &m, .draft_tokens = 0}).find("draft_tokens"),
      std::string::npos);
  EXPECT_NE(message({.decode_rows = Rows::All, .draft_model = &m}).find("verifies drafts"),
            std::string::npos);
}
