// `tessera serve --reasoning-parser` end to end on the default model (SmolLM2, whose template has no think
// block and which writes none): with qwen3 the answer is all content, reasoning_content null, streamed deltas
// never carry an empty reasoning_content and add up to the unstreamed answer; with none (what auto picks for
// this template) there is no reasoning_content field; harmony over a vocabulary without its markers refuses
// to start. Suite `Cli` (subprocesses; the sanitizer stage leaves them to stage 1).
#include <gtest/gtest.h>

#include "serve_test_util.h"

namespace {

using namespace tessera::testing::serve;

json ask(int port, bool stream) {
  auto c = client(port);
  json body = {{"messages", {{{"role", "user"}, {"content", "Name a colour."}}}},
               {"max_tokens", 10},
               {"temperature", 0},
               {"stream", stream}};
  auto r = c->Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r);
  if (!r) return nullptr;
  EXPECT_EQ(r->status, 200) << r->body;
  if (!stream) return json::parse(r->body);
  json all = json::array();
  for (const json& e : events(r->body)) all.push_back(e);
  return all;
}

TEST(Cli, ServeReasoningParserFieldsOnTheDefaultModel) {
  {
    START_OR_FAIL(s, {"--max-num-seqs", "1", "--max-model-len", "128", "--reasoning-parser", "qwen3"});
    const json whole = ask(s.port, false);
    const json& msg = whole["choices"][0]["message"];
    ASSERT_TRUE(msg.contains("reasoning_content")) << whole;
    EXPECT_TRUE(msg["reasoning_content"].is_null()) << whole;
    const std::string content = msg["content"];
    EXPECT_FALSE(content.empty());
    std::string streamed;
    for (const json& e : ask(s.port, true)) {
      if (e["choices"].empty()) continue;
      const json& d = e["choices"][0]["delta"];
      EXPECT_FALSE(d.contains("reasoning_content")) << e;
      if (d.contains("content")) streamed += d["content"].get<std::string>();
    }
    EXPECT_EQ(streamed, content);
    EXPECT_NE(s.proc->err().find("reasoning parser qwen3"), std::string::npos) << s.proc->err();
    EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
  }
  {
    START_OR_FAIL(s, {"--max-num-seqs", "1", "--max-model-len", "128"});
    const json whole = ask(s.port, false);
    EXPECT_FALSE(whole["choices"][0]["message"].contains("reasoning_content")) << whole;
    EXPECT_NE(s.proc->err().find("reasoning parser none"), std::string::npos) << s.proc->err();
    EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
  }
  {
    ServeProcess p({"--port", "0", "--reasoning-parser", "harmony"});
    for (int i = 0; i < 600 && !p.exited(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(p.exited()) << p.err();
    EXPECT_NE(p.err().find("harmony"), std::string::npos) << p.err();
  }
}

}  // namespace
