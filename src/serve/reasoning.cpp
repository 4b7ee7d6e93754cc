#include "serve/reasoning.h"

#include <utility>

#include "tessera/error.h"
#include "tokenizer/unicode_util.h"

namespace tessera::serve {

std::optional<ReasoningFormat> reasoning_format_from_name(std::string_view name) {
  if (name == "none") return ReasoningFormat::None;
  if (name == "harmony") return ReasoningFormat::Harmony;
  if (name == "qwen3") return ReasoningFormat::Qwen3;
  if (name == "gemma4") return ReasoningFormat::Gemma4;
  return std::nullopt;
}

const char* reasoning_format_name(ReasoningFormat f) {
  switch (f) {
    case ReasoningFormat::Harmony:
      return "harmony";
    case ReasoningFormat::Qwen3:
      return "qwen3";
    case ReasoningFormat::Gemma4:
      return "gemma4";
    default:
      return "none";
  }
}

ReasoningFormat choose_reasoning_format(std::string_view architecture, std::string_view chat_template) {
  if (architecture == "GptOssForCausalLM") return ReasoningFormat::Harmony;
  if (chat_template.find("<|channel|>") != std::string_view::npos &&
      chat_template.find("<|message|>") != std::string_view::npos)
    return ReasoningFormat::Harmony;
  if (architecture.starts_with("Gemma4") || chat_template.find("<|channel>thought") != std::string_view::npos)
    return ReasoningFormat::Gemma4;
  if (chat_template.find("<think>") != std::string_view::npos) return ReasoningFormat::Qwen3;
  return ReasoningFormat::None;
}

namespace {
bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
constexpr std::string_view kOpen = "<think>", kClose = "</think>";
// Gemma 4's thought channel: <|channel> (a token) and "thought" open it, <channel|> (a token) closes it.
constexpr std::string_view kGemmaOpenToken = "<|channel>", kGemmaOpen = "<|channel>thought",
                           kGemmaClose = "<channel|>";
}  // namespace

bool prompt_opens_thinking(std::string_view prompt) {
  size_t end = prompt.size();
  while (end > 0 && space(prompt[end - 1])) --end;
  return prompt.substr(0, end).ends_with(kOpen);
}

void append_segment(std::vector<Segment>& out, Channel channel, std::string text) {
  if (text.empty()) return;
  if (!out.empty() && out.back().channel == channel)
    out.back().text += text;
  else
    out.push_back({channel, std::move(text)});
}

namespace {

// Bytes in, valid UTF-8 out: a character split over tokens waits for its last byte; what can never complete
// becomes U+FFFD (as the tokenizer's StreamDecoder does).
class Utf8Joiner {
 public:
  std::string push(std::string_view bytes) {
    pending_.append(bytes);
    const size_t cut = tok::utf8_incomplete_tail(pending_);
    std::string out;
    tok::utf8_repair_append(std::string_view(pending_).substr(0, cut), out);
    pending_.erase(0, cut);
    return out;
  }
  std::string flush() {
    std::string out;
    tok::utf8_repair_append(pending_, out);
    pending_.clear();
    return out;
  }

 private:
  std::string pending_;
};

// ---- harmony ----

class HarmonyParser final : public ReasoningParser {
 public:
  HarmonyParser(const HarmonyTokens& ids, std::set<int32_t> eos, bool tool_calls)
      : ids_(ids), eos_(std::move(eos)), tool_calls_(tool_calls) {}

  void push(int32_t id, std::string_view bytes, bool /*special*/, std::vector<Segment>& out) override {
    if (eos_.count(id)) {  // the end of generation: as at finish(), minus what follows it (nothing)
      close(out);
      state_ = State::ExpectStart;
      return;
    }
    switch (state_) {
      case State::ExpectStart:
        if (id == ids_.start) return open_header(bytes);
        if (ended(id)) return;  // a second end marker says nothing
        // Text where a message should start: it is content, up to the next <|start|>.
        state_ = State::Content;
        dest_ = Channel::Content;
        stray_ = true;
        break;
      case State::Header:
        return header(id, bytes, out);
      case State::Content:
        break;
    }
    if (ended(id) || (stray_ && id == ids_.start)) {
      append_segment(out, dest_, text_.flush());
      if (in_call_) append_segment(out, Channel::Content, "<|call|>");
      in_call_ = false;
      stray_ = false;
      if (id == ids_.start) return open_header(bytes);
      state_ = State::ExpectStart;
      return;
    }
    append_segment(out, dest_, text_.push(bytes));
  }

  void finish(std::vector<Segment>& out) override { close(out); }

 private:
  enum class State { Header, Content, ExpectStart };
  // Longer than any header a model writes (`commentary to=functions.NAME <|constrain|>json`): past it, what
  // was taken for a header is text.
  static constexpr size_t kMaxHeader = 256;

  bool ended(int32_t id) const { return id == ids_.end || id == ids_.return_ || id == ids_.call; }

  void open_header(std::string_view start_bytes) {
    state_ = State::Header;
    raw_.assign(start_bytes);
    pre_.clear();
    channel_.clear();
    part_ = Part::Role;
  }

  void header(int32_t id, std::string_view bytes, std::vector<Segment>& out) {
    if (id == ids_.message) {
      dest_ = destination();
      state_ = State::Content;
      stray_ = false;
      raw_.clear();
      if (const std::string name = function_recipient(); tool_calls_ && !name.empty()) {
        dest_ = Channel::Content;
        in_call_ = true;
        append_segment(out, Channel::Content, "<|channel|>commentary to=functions." + name + "<|message|>");
      }
      return;
    }
    if (ended(id) || id == ids_.start) {  // a message that never got its text: its header is content
      header_as_content(out);
      append_segment(out, Channel::Content, text_.flush());
      if (id == ids_.start) return open_header(bytes);
      state_ = State::ExpectStart;
      return;
    }
    raw_.append(bytes);
    if (id == ids_.channel) {
      part_ = Part::Channel;
    } else if (id == ids_.constrain) {
      part_ = Part::Constrain;
    } else if (part_ == Part::Role) {
      pre_.append(bytes);
    } else if (part_ == Part::Channel) {
      channel_.append(bytes);
    }
    if (raw_.size() > kMaxHeader) {  // not a header: the message is content, header and all
      header_as_content(out);
      state_ = State::Content;
      dest_ = Channel::Content;
      stray_ = true;
    }
  }

  void header_as_content(std::vector<Segment>& out) {
    append_segment(out, Channel::Content, text_.push(raw_));
    raw_.clear();
  }

  // The channel named after <|channel|> (its first word; ` to=...` may follow it): analysis is reasoning,
  // anything else (final, commentary, a recipient's message, an unknown or missing channel) is content.
  Channel destination() const {
    if (part_ == Part::Role) return Channel::Content;  // no <|channel|>
    size_t b = 0;
    while (b < channel_.size() && space(channel_[b])) ++b;
    size_t e = b;
    while (e < channel_.size() && !space(channel_[e])) ++e;
    return channel_.compare(b, e - b, "analysis") == 0 ? Channel::Reasoning : Channel::Content;
  }

  // The NAME of a header's `to=functions.NAME` (in the role part or after the channel), "" when the message
  // is not addressed to a function.
  std::string function_recipient() const {
    const std::string header = pre_ + " " + channel_;
    const size_t at = header.find("to=functions.");
    if (at == std::string::npos) return "";
    size_t b = at + 13, e = b;
    while (e < header.size() && !space(header[e]) && header[e] != '<') ++e;
    return header.substr(b, e - b);
  }

  void close(std::vector<Segment>& out) {
    if (state_ == State::Header) header_as_content(out);
    append_segment(out, state_ == State::Header ? Channel::Content : dest_, text_.flush());
  }

  HarmonyTokens ids_;
  std::set<int32_t> eos_;
  // The completion continues the prompt's `<|start|>assistant`: its header comes first.
  State state_ = State::Header;
  enum class Part { Role, Channel, Constrain } part_ = Part::Role;
  std::string raw_;            // the header's bytes so far, markers included
  std::string pre_, channel_;  // the role part (a recipient may stand there), the channel part
  Channel dest_ = Channel::Content;
  bool stray_ = false;                         // content that is not in a message: ends at <|start|> too
  bool tool_calls_ = false, in_call_ = false;  // calls in canonical form; inside one
  Utf8Joiner text_;
};

// ---- <think> ----

class ThinkParser final : public ReasoningParser {
 public:
  // open / close: the tags as text; open_token: the text of the token ids.open stands for (the whole open tag
  // for Qwen3, its first part for Gemma 4).
  ThinkParser(const ThinkTokens& ids, bool in_reasoning, std::string_view open = kOpen,
              std::string_view close = kClose, std::string_view open_token = kOpen)
      : ids_(ids),
        after_start_(in_reasoning ? Channel::Reasoning : Channel::Content),
        open_(open),
        close_(close),
        open_token_(open_token) {}

  void push(int32_t id, std::string_view bytes, bool special, std::vector<Segment>& out) override {
    if (ids_.open && id == *ids_.open) return feed(text_.push(open_token_), out);
    if (ids_.close && id == *ids_.close) return feed(text_.push(close_), out);
    if (special) return;
    feed(text_.push(bytes), out);
  }

  void finish(std::vector<Segment>& out) override {
    feed(text_.flush(), out);
    const Channel c = state_ == State::Reasoning ? Channel::Reasoning
                      : state_ == State::Content ? Channel::Content
                                                 : after_start_;
    append_segment(out, c, std::move(held_));
    held_.clear();
  }

 private:
  // Start: only whitespace so far (held), then a <think> opens the block (the whitespace before it is
  // dropped), anything else goes to after_start_ (content; reasoning when the prompt opened the block).
  enum class State { Start, Reasoning, Content };

  void feed(std::string text, std::vector<Segment>& out) {
    held_ += text;
    while (true) {
      if (state_ == State::Content) {
        append_segment(out, Channel::Content, std::move(held_));
        held_.clear();
        return;
      }
      if (state_ == State::Start) {
        size_t b = 0;
        while (b < held_.size() && space(held_[b])) ++b;
        const std::string_view rest = std::string_view(held_).substr(b);
        if (rest.starts_with(open_)) {
          held_.erase(0, b + open_.size());
          state_ = State::Reasoning;
          continue;
        }
        if (open_.starts_with(rest)) return;  // whitespace, maybe the start of <think>: wait
        state_ = after_start_ == Channel::Reasoning ? State::Reasoning : State::Content;
        continue;
      }
      // Reasoning: up to </think>; a tail that may begin it waits.
      const size_t at = held_.find(close_);
      if (at != std::string::npos) {
        append_segment(out, Channel::Reasoning, held_.substr(0, at));
        held_.erase(0, at + close_.size());
        state_ = State::Content;
        continue;
      }
      size_t keep = std::min(held_.size(), close_.size() - 1);
      while (keep > 0 && !close_.starts_with(std::string_view(held_).substr(held_.size() - keep))) --keep;
      append_segment(out, Channel::Reasoning, held_.substr(0, held_.size() - keep));
      held_.erase(0, held_.size() - keep);
      return;
    }
  }

  ThinkTokens ids_;
  Channel after_start_;
  std::string_view open_, close_, open_token_;  // the tags
  State state_ = State::Start;
  std::string held_;
  Utf8Joiner text_;
};

}  // namespace

std::optional<HarmonyTokens> harmony_tokens(const Tokenizer& tok) {
  HarmonyTokens t;
  const std::pair<const char*, int32_t*> names[] = {
      {"<|start|>", &t.start},        {"<|channel|>", &t.channel},
      {"<|message|>", &t.message},    {"<|end|>", &t.end},
      {"<|return|>", &t.return_},     {"<|call|>", &t.call},
      {"<|constrain|>", &t.constrain}};
  for (const auto& [name, id] : names) {
    const auto found = tok.token_to_id(name);
    if (!found) return std::nullopt;
    *id = *found;
  }
  return t;
}

std::unique_ptr<ReasoningParser> make_harmony_parser(const HarmonyTokens& ids, std::set<int32_t> eos,
                                                     bool tool_calls) {
  for (int32_t m : {ids.end, ids.return_, ids.call}) eos.erase(m);
  return std::make_unique<HarmonyParser>(ids, std::move(eos), tool_calls);
}

ThinkTokens think_tokens(const Tokenizer& tok) { return {tok.token_to_id(kOpen), tok.token_to_id(kClose)}; }

std::unique_ptr<ReasoningParser> make_qwen3_parser(const ThinkTokens& ids, bool in_reasoning) {
  return std::make_unique<ThinkParser>(ids, in_reasoning);
}

ThinkTokens gemma4_think_tokens(const Tokenizer& tok) {
  return {tok.token_to_id(kGemmaOpenToken), tok.token_to_id(kGemmaClose)};
}

std::unique_ptr<ReasoningParser> make_gemma4_parser(const ThinkTokens& ids) {
  return std::make_unique<ThinkParser>(ids, false, kGemmaOpen, kGemmaClose, kGemmaOpenToken);
}

std::unique_ptr<ReasoningParser> make_reasoning_parser(ReasoningFormat format, const Tokenizer& tok,
                                                       bool in_reasoning, const std::vector<int32_t>& eos_ids,
                                                       bool tool_calls) {
  switch (format) {
    case ReasoningFormat::Harmony: {
      const auto ids = harmony_tokens(tok);
      if (!ids)
        fail(
            "the harmony reasoning parser needs the tokens <|start|>, <|channel|>, <|message|>, <|end|>, "
            "<|return|>, <|call|> and <|constrain|>; this tokenizer lacks one");
      return make_harmony_parser(*ids, std::set<int32_t>(eos_ids.begin(), eos_ids.end()), tool_calls);
    }
    case ReasoningFormat::Qwen3:
      return make_qwen3_parser(think_tokens(tok), in_reasoning);
    case ReasoningFormat::Gemma4:
      return make_gemma4_parser(gemma4_think_tokens(tok));
    default:
      return nullptr;
  }
}

}  // namespace tessera::serve
