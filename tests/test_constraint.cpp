// Constrained decoding (include/tessera/constraint.h) on the real default model (SmolLM2-135M, which keeps
// to no format by itself): outputs parse and match their constraint in generate() and in a SlotBatch, greedy
// and sampled; a complete constraint ends its row as an eos, a short budget as length; a constrained row
// changes no other row's tokens and is itself the same alone and beside others; on xla-cpu the mask is an
// input of the compiled step, which then picks what the host sampler picks; bad inputs are
// clear errors. llguidance is installed by scripts/setup.sh: without it these fail, saying so.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "default_model_util.h"
#include "pjrt_test_util.h"
#include "serve/openai.h"
#include "tessera/auto_tokenizer.h"
#include "tessera/batch.h"
#include "tessera/constraint.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;

namespace {

using tessera::test_models::smollm2_path;

#define REQUIRE_CONSTRAINTS(path)                                                                \
  std::string path = smollm2_path();                                                             \
  if (path.empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed (scripts/setup.sh installs it)"; \
  if (std::string why; !ConstraintLibrary::available(&why)) FAIL() << why

struct Fixture {
  CausalLM model;
  Tokenizer tok;
  ConstraintVocabulary vocab;
  explicit Fixture(const std::string& path, const std::string& device = "cpu")
      : model(load(path, device)),
        tok(AutoTokenizer::from_pretrained(path)),
        vocab(tok, model.info().vocab_size, model.generation_config().eos_token_id) {}
  static CausalLM load(const std::string& path, const std::string& device) {
    LoadOptions o;
    o.device_map = device;
    return AutoModelForCausalLM::from_pretrained(path, o);
  }
  std::vector<int32_t> chat(const std::string& user) const {
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array({{{"role", "user"}, {"content", user}}});
    return tok.encode(apply_chat_template(tok, msgs, true), false);
  }
  std::string text(const std::vector<int32_t>& seq, size_t prompt) const {
    return tok.decode(std::vector<int32_t>(seq.begin() + static_cast<long>(prompt), seq.end()), true);
  }
};

constexpr const char* kPerson =
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 30},
        "age": {"type": "integer", "minimum": 0, "maximum": 130}},
        "required": ["name", "age"], "additionalProperties": false})";

void expect_person(const std::string& text) {
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(text)) << text;
  ASSERT_TRUE(j.is_object()) << text;
  EXPECT_EQ(j.size(), 2u) << text;
  ASSERT_TRUE(j.contains("name") && j["name"].is_string()) << text;
  EXPECT_LE(j["name"].get<std::string>().size(), 30u) << text;  // bytes >= characters
  ASSERT_TRUE(j.contains("age") && j["age"].is_number_integer()) << text;
  EXPECT_GE(j["age"].get<int64_t>(), 0) << text;
  EXPECT_LE(j["age"].get<int64_t>(), 130) << text;
}

bool all_digits_dash(const std::string& s) {  // [0-9]{3}-[0-9]{4}
  if (s.size() != 8 || s[3] != '-') return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (i != 3 && (s[i] < '0' || s[i] > '9')) return false;
  return true;
}

}  // namespace

TEST(SmolLM2Constraint, JsonSchemaGreedyAndSampledOutputsValidateAndEndAsEos) {
  REQUIRE_CONSTRAINTS(path);
  Fixture f(path);
  auto c = f.vocab.compile(ConstraintKind::JsonSchema, kPerson);
  EXPECT_EQ(c->kind(), ConstraintKind::JsonSchema);
  EXPECT_EQ(c->vocab_size(), f.model.info().vocab_size);
  const auto ids = f.chat("Describe a person.");
  GenerationConfig g = f.model.generation_config();
  g.max_new_tokens = 200;
  g.constraint = c;
  auto out = f.model.generate({ids}, {}, g);
  expect_person(f.text(out.sequences[0], ids.size()));
  EXPECT_EQ(out.finish_reasons[0], FinishReason::Eos);
  // Unconstrained, the model answers in prose: the constraint is what made it JSON.
  GenerationConfig plain = g;
  plain.constraint = nullptr;
  const std::string prose = f.text(f.model.generate({ids}, {}, plain).sequences[0], ids.size());
  EXPECT_ANY_THROW(nlohmann::json::parse(prose)) << prose;
  for (uint64_t seed : {1u, 7u, 42u}) {
    GenerationConfig s = g;
    s.do_sample = true;
    s.temperature = 1.2f;
    s.top_k = 0;
    s.seed = seed;
    auto o = f.model.generate({ids}, {}, s);
    expect_person(f.text(o.sequences[0], ids.size()));
  }
}

// Prompt lookup on a constrained row: the JSON copies names from the prompt, drafts are confirmed, and the
// tokens are those of the constrained row decoded one token a step.
TEST(SmolLM2Constraint, PromptLookupGivesTheSameConstrainedTokens) {
  REQUIRE_CONSTRAINTS(path);
  Fixture f(path);
  const auto ids = f.chat("Alexandra Montgomery-Smith is 42 years old. Give her name and age as JSON.");
  GenerationConfig g = f.model.generation_config();
  g.max_new_tokens = 60;
  g.constraint = f.vocab.compile(ConstraintKind::JsonSchema, kPerson);
  const auto plain = f.model.generate({ids}, {}, g);
  g.prompt_lookup_num_tokens = 6;
  const auto spec = f.model.generate({ids}, {}, g);
  EXPECT_EQ(spec.sequences, plain.sequences);
  EXPECT_EQ(spec.finish_reasons, plain.finish_reasons);
  expect_person(f.text(spec.sequences[0], ids.size()));
  EXPECT_GT(spec.accepted_tokens, 0);
}

TEST(SmolLM2Constraint, RegexGrammarJsonObjectAndAShortBudget) {
  REQUIRE_CONSTRAINTS(path);
  Fixture f(path);
  const auto ids = f.chat("What is your phone number?");
  GenerationConfig g = f.model.generation_config();
  g.max_new_tokens = 30;
  g.constraint = f.vocab.compile(ConstraintKind::Regex, "[0-9]{3}-[0-9]{4}");
  auto out = f.model.generate({ids}, {}, g);
  EXPECT_TRUE(all_digits_dash(f.text(out.sequences[0], ids.size()))) << f.text(out.sequences[0], ids.size());
  EXPECT_EQ(out.finish_reasons[0], FinishReason::Eos);

  g.constraint = f.vocab.compile(ConstraintKind::Grammar, R"(start: ("yes" | "no") "." )");
  const std::string yn = f.text(f.model.generate({ids}, {}, g).sequences[0], ids.size());
  EXPECT_TRUE(yn == "yes." || yn == "no.") << yn;

  g.max_new_tokens = 200;
  g.constraint = f.vocab.compile(ConstraintKind::JsonObject, "");
  const std::string obj = f.text(f.model.generate({ids}, {}, g).sequences[0], ids.size());
  EXPECT_TRUE(nlohmann::json::parse(obj).is_object()) << obj;

  g.max_new_tokens = 3;  // too short for the schema: the row ends at its budget
  g.constraint = f.vocab.compile(ConstraintKind::JsonSchema, kPerson);
  auto cut = f.model.generate({ids}, {}, g);
  EXPECT_EQ(cut.finish_reasons[0], FinishReason::Length);
  EXPECT_EQ(cut.new_tokens, 3);
}

TEST(SmolLM2Constraint, AConstrainedRowChangesNoOtherRowAndIsTheSameAloneInASlotBatch) {
  REQUIRE_CONSTRAINTS(path);
  Fixture f(path);
  const auto a = f.chat("Tell me about the sea.");
  const auto b = f.chat("Describe a person.");
  GenerationConfig plain = f.model.generation_config();
  plain.max_new_tokens = 24;
  plain.eos_token_id.clear();  // every plain row runs its whole budget
  GenerationConfig constrained = f.model.generation_config();
  constrained.max_new_tokens = 120;
  constrained.constraint = f.vocab.compile(ConstraintKind::JsonSchema, kPerson);

  auto run = [&](const std::vector<std::pair<const std::vector<int32_t>*, const GenerationConfig*>>& reqs) {
    SlotBatch batch(f.model, 3, 256, {.host_sampling = true});
    std::vector<std::vector<int32_t>> out(reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i)
      out[i].push_back(batch.prefill(static_cast<int>(i), *reqs[i].first, *reqs[i].second));
    while (batch.running_count() > 0)
      for (const SlotToken& t : batch.step()) out[static_cast<size_t>(t.slot)].push_back(t.token);
    return out;
  };
  const auto plain_alone = run({{&a, &plain}});
  const auto constrained_alone = run({{&b, &constrained}});
  const auto together = run({{&a, &plain}, {&b, &constrained}, {&a, &plain}});
  EXPECT_EQ(together[0], plain_alone[0]);
  EXPECT_EQ(together[2], plain_alone[0]);
  EXPECT_EQ(together[1], constrained_alone[0]);
  expect_person(f.tok.decode(together[1], true));
  // generate() gives the constrained request what the batch gave it.
  auto g = f.model.generate({b}, {}, constrained);
  EXPECT_EQ(std::vector<int32_t>(g.sequences[0].begin() + static_cast<long>(b.size()), g.sequences[0].end()),
            constrained_alone[0]);
}

TEST(SmolLM2Constraint, XlaCpuMasksInsideTheCompiledStepAsTheHostDoes) {
  REQUIRE_CONSTRAINTS(path);
  REQUIRE_XLA_CPU();
  Fixture xla(path, "xla-cpu");
  const auto ids = xla.chat("Describe a person.");
  GenerationConfig g = xla.model.generation_config();
  g.max_new_tokens = 120;
  g.constraint = xla.vocab.compile(ConstraintKind::JsonSchema, kPerson);
  // generate(): the step samples (the mask is a program input) and keeps to the schema.
  auto out = xla.model.generate({ids}, {}, g);
  EXPECT_TRUE(out.device_sampling);
  expect_person(xla.text(out.sequences[0], ids.size()));
  // A SlotBatch sampling in the step and one sampling on the host (same device, same logits) give the same
  // tokens, greedy and sampled, with an unconstrained row beside.
  GenerationConfig sampled = g;
  sampled.do_sample = true;
  sampled.temperature = 1.1f;
  sampled.top_k = 0;
  sampled.seed = 5;
  GenerationConfig plain = xla.model.generation_config();
  plain.max_new_tokens = 16;
  auto run = [&](bool host) {
    SlotBatch batch(xla.model, 3, 256, {.host_sampling = host});
    EXPECT_EQ(batch.device_sampling(), !host);
    std::vector<std::vector<int32_t>> toks(3);
    toks[0].push_back(batch.prefill(0, ids, g));
    toks[1].push_back(batch.prefill(1, ids, plain));
    toks[2].push_back(batch.prefill(2, ids, sampled));
    while (batch.running_count() > 0)
      for (const SlotToken& t : batch.step()) toks[static_cast<size_t>(t.slot)].push_back(t.token);
    return toks;
  };
  const auto device = run(false), host = run(true);
  EXPECT_EQ(device, host);
  expect_person(xla.tok.decode(device[0], true));
  expect_person(xla.tok.decode(device[2], true));
}

TEST(SmolLM2Constraint, BadConstraintsAndMismatchedVocabulariesAreClearErrors) {
  REQUIRE_CONSTRAINTS(path);
  Fixture f(path);
  auto message = [&](ConstraintKind k, const std::string& text) {
    try {
      f.vocab.compile(k, text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(compiled)");
  };
  EXPECT_NE(
      message(ConstraintKind::JsonSchema, R"({"type": "array", "uniqueItems": true})").find("uniqueItems"),
      std::string::npos);
  EXPECT_NE(message(ConstraintKind::JsonSchema, "{not json").find("invalid json_schema"), std::string::npos);
  EXPECT_NE(message(ConstraintKind::Regex, "(unclosed").find("invalid regex"), std::string::npos);
  EXPECT_NE(message(ConstraintKind::Grammar, "start: undefined_rule").find("invalid grammar"),
            std::string::npos);
  EXPECT_NE(message(ConstraintKind::Regex, std::string("a\0b", 3)).find("NUL"), std::string::npos);
  // A constraint for another vocabulary size is refused by generate() and by a SlotBatch.
  ConstraintVocabulary bigger(f.tok, f.model.info().vocab_size + 64, {2});
  GenerationConfig g = f.model.generation_config();
  g.constraint = bigger.compile(ConstraintKind::JsonObject, "");
  const auto ids = f.chat("hi");
  EXPECT_THROW(f.model.generate({ids}, {}, g), Error);
  SlotBatch batch(f.model, 1, 128, {.host_sampling = true});
  EXPECT_THROW(batch.prefill(0, ids, g), Error);
  EXPECT_THROW(ConstraintVocabulary(f.tok, f.tok.vocab_size() - 1, {2}), Error);
}

TEST(SmolLM2Constraint, AConstrainedChatAnswerIsNotReadAsReasoning) {
  REQUIRE_CONSTRAINTS(path);
  Fixture f(path);
  serve::ServedModel served;
  served.name = "m";
  served.tokenizer = &f.tok;
  served.defaults = f.model.generation_config();
  served.vocab_size = f.model.info().vocab_size;
  served.reasoning = serve::ReasoningFormat::Qwen3;
  served.constraint_vocab =
      std::make_shared<const ConstraintVocabulary>(f.tok, served.vocab_size, served.defaults.eos_token_id);
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  auto plain = serve::parse_request(serve::Endpoint::Chat, "{" + msgs + "}", served);
  EXPECT_EQ(plain.reasoning, serve::ReasoningFormat::Qwen3);
  EXPECT_EQ(plain.config.constraint, nullptr);
  auto constrained = serve::parse_request(
      serve::Endpoint::Chat, "{" + msgs + R"(, "response_format": {"type": "json_object"}})", served);
  EXPECT_EQ(constrained.reasoning, serve::ReasoningFormat::None);
  EXPECT_FALSE(constrained.reasoning_open);
  ASSERT_NE(constrained.config.constraint, nullptr);
  EXPECT_EQ(constrained.config.constraint->kind(), ConstraintKind::JsonObject);
}
