// `tessera chat --server URL`: see chat_client.h.
#include "chat_client.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "chat_loop.h"
#include "io/io_util.h"
#include "tessera/error.h"

namespace tessera::cli {

namespace {

using ordered_json = nlohmann::ordered_json;

// Where the requests go: the scheme://host:port httplib connects to and the path of the chat endpoint.
struct Endpoint {
  std::string origin;  // "http://127.0.0.1:8080"
  std::string path;    // "/v1/chat/completions"
};

Endpoint parse_url(const std::string& url) {
  const std::string shown = io::printable(url, 80);
  auto bad = [&](const std::string& why) {
    fail("--server: '", shown, "' is not a server URL (", why, "; expected e.g. http://127.0.0.1:8080)");
  };
  const size_t sep = url.find("://");
  if (sep == std::string::npos) bad("no scheme");
  std::string scheme = url.substr(0, sep);
  std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                 [](unsigned char ch) { return std::tolower(ch); });
  if (scheme != "http" && scheme != "https") bad("the scheme must be http or https");
  const std::string rest = url.substr(sep + 3);
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  std::string path = slash == std::string::npos ? "" : rest.substr(slash);
  if (authority.find('@') != std::string::npos)
    bad("credentials in the URL are not supported; use --api-key");
  if (path.find_first_of("?#") != std::string::npos || authority.find_first_of("?#") != std::string::npos)
    bad("a query or fragment has no meaning here");
  std::string host, port;
  if (!authority.empty() && authority[0] == '[') {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string::npos) bad("unclosed '['");
    host = authority.substr(0, close + 1);
    const std::string after = authority.substr(close + 1);
    if (!after.empty() && after[0] != ':') bad("junk after the address");
    if (!after.empty()) port = after.substr(1);
    if (host.size() < 3) bad("no host");
  } else {
    const size_t colon = authority.rfind(':');
    host = authority.substr(0, colon);
    if (colon != std::string::npos) port = authority.substr(colon + 1);
    if (host.empty()) bad("no host");
    if (host.find_first_of(":[] ") != std::string::npos) bad("a malformed host");
  }
  if (port.empty() && authority.back() == ':') bad("an empty port");
  if (!port.empty()) {
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) < 1 ||
        std::stoi(port) > 65535)
      bad("the port must be a number from 1 to 65535");
  } else {
    port = scheme == "https" ? "443" : "80";
  }
  while (!path.empty() && path.back() == '/') path.pop_back();
  // An OpenAI base URL ends in /v1 (http://host:8000/v1); a bare server URL does not.
  const bool has_v1 = path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0;
  return {scheme + "://" + host + ":" + port, path + (has_v1 ? "" : "/v1") + "/chat/completions"};
}

// The message of an error answer: OpenAI's {"error": {"message": ...}}, else the start of the body.
std::string error_message(const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const auto& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"];
    if (e.is_string()) return e;
  }
  std::string text = io::printable(body, 200);
  return text.empty() ? "(no message)" : text;
}

// Server-Sent Events, fed as bytes arrive: calls `on_data` with the data of each complete event.
class SseParser {
 public:
  template <typename F>
  bool feed(const char* bytes, size_t n, F&& on_data) {
    buf_.append(bytes, n);
    size_t nl;
    while ((nl = buf_.find('\n')) != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) {  // the end of an event
        if (has_data_ && !on_data(data_)) return false;
        data_.clear();
        has_data_ = false;
      } else if (line.rfind("data:", 0) == 0) {
        std::string value = line.substr(5);
        if (!value.empty() && value[0] == ' ') value.erase(0, 1);
        data_ += (has_data_ ? "\n" : "") + value;
        has_data_ = true;
      }  // comments (":...") and the event/id/retry fields do not matter here
    }
    return true;
  }

 private:
  std::string buf_, data_;
  bool has_data_ = false;
};

// The request's sampling fields from the flags given.
void add_sampling_fields(const ChatClientOptions& opt, ordered_json& body) {
  const GenerationOverrides& o = opt.sampling;
  if (o.max_new_tokens) body["max_tokens"] = *o.max_new_tokens;
  if (o.do_sample == false)
    body["temperature"] = 0;  // greedy (Transformers: do_sample=false ignores the temperature)
  else if (o.temperature)
    body["temperature"] = *o.temperature;
  if (o.top_p) body["top_p"] = *o.top_p;
  if (o.top_k) body["top_k"] = *o.top_k;
  if (o.min_p) body["min_p"] = *o.min_p;
  if (o.repetition_penalty) body["repetition_penalty"] = *o.repetition_penalty;
  if (o.seed) body["seed"] = *o.seed;
  if (!opt.stop.empty()) body["stop"] = opt.stop;
}

// What went wrong on the wire, in words (httplib's own names are one word: "Connection").
std::string transport_error(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "could not connect (is a server listening there?)";
    case httplib::Error::ConnectionTimeout:
      return "the connection timed out";
    case httplib::Error::Read:
      return "reading the answer failed (connection closed or timed out)";
    case httplib::Error::Write:
      return "sending the request failed";
    case httplib::Error::SSLConnection:
    case httplib::Error::SSLServerVerification:
      return "TLS failed (" + httplib::to_string(e) + ")";
    default:
      return httplib::to_string(e);
  }
}

}  // namespace

void check_chat_server_flags(const CLI::App& chat) {
  static const std::set<std::string> kApply = {
      "model",     "--system", "--max-new-tokens",     "--do-sample", "--greedy", "--temperature", "--top-k",
      "--top-p",   "--min-p",  "--repetition-penalty", "--seed",      "--stop",   "--quiet",       "--server",
      "--api-key", "--help"};
  for (const CLI::Option* o : chat.get_options()) {
    if (o->count() == 0) continue;
    const std::string name = o->get_name();
    if (kApply.count(name)) continue;
    if (name == "--max-length") fail("chat --server: --max-length does not apply; give --max-new-tokens");
    fail("chat --server: ", name,
         " does not apply (the server loaded the model: its own flags choose device, dtype, threads and "
         "compilation)");
  }
}

int run_chat_client(const ChatClientOptions& opt) {
  const Endpoint ep = parse_url(opt.url);
  if (opt.stop.size() > 4) fail("--stop: at most 4 stop strings with --server (OpenAI's limit)");
  for (const auto& s : opt.stop)
    if (s.empty()) fail("--stop: a stop string must not be empty");
  httplib::Client http(ep.origin);
  if (!http.is_valid()) fail("--server: '", io::printable(opt.url, 80), "' is not a server URL");
  http.set_connection_timeout(10, 0);
  http.set_read_timeout(600, 0);  // between two chunks of a stream: a long prompt's prefill, a busy queue
  http.set_write_timeout(30, 0);
  const std::string where = ep.origin + ep.path;

  const std::string who = ep.origin + (opt.model.empty() ? "" : " (model " + opt.model + ")");
  run_chat_loop(who, opt.system, opt.quiet, [&](const ordered_json& msgs) {
    ordered_json body;
    if (!opt.model.empty()) body["model"] = opt.model;
    body["messages"] = msgs;
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    add_sampling_fields(opt, body);

    httplib::Request req;
    req.method = "POST";
    req.path = ep.path;
    req.set_header("Content-Type", "application/json");
    req.set_header("Accept", "text/event-stream");
    if (!opt.api_key.empty()) req.set_header("Authorization", "Bearer " + opt.api_key);
    req.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);

    int status = 0;
    std::string error_body, reply, failure;
    bool done = false;
    std::optional<int> completion_tokens;
    std::optional<std::chrono::steady_clock::time_point> first;
    SseParser sse;
    auto on_event = [&](const std::string& data) {
      if (data == "[DONE]") {
        done = true;
        return true;
      }
      const auto j = nlohmann::json::parse(data, nullptr, false);
      if (!j.is_object()) {
        failure = "the stream from " + where + " has an event that is not JSON: " + io::printable(data, 120);
        return false;
      }
      if (j.contains("error")) {
        failure = where + " ended the reply with an error: " + error_message(data);
        return false;
      }
      if (j.contains("usage") && j["usage"].is_object() && j["usage"].contains("completion_tokens") &&
          j["usage"]["completion_tokens"].is_number_integer())
        completion_tokens = j["usage"]["completion_tokens"].get<int>();
      if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return true;
      const auto& ch = j["choices"][0];
      if (ch.is_object() && ch.contains("delta") && ch["delta"].is_object() &&
          ch["delta"].contains("content") && ch["delta"]["content"].is_string()) {
        const std::string piece = ch["delta"]["content"];
        if (!first) first = std::chrono::steady_clock::now();
        reply += piece;
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
      return true;
    };
    req.response_handler = [&](const httplib::Response& r) {
      status = r.status;
      return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (status != 200) {
        if (error_body.size() < (64 << 10)) error_body.append(data, n);
        return true;
      }
      return sse.feed(data, n, on_event);
    };
    const httplib::Result res = http.send(req);
    if (!failure.empty()) {
      if (!reply.empty()) std::fputc('\n', stdout), std::fflush(stdout);
      fail(failure);
    }
    if (!res)
      fail(status ? "the stream from " + where + " broke off: " : "cannot reach " + where + ": ",
           transport_error(res.error()));
    if (status != 200) fail(where, " answered ", status, ": ", error_message(error_body));
    if (!done) {
      if (!reply.empty()) std::fputc('\n', stdout), std::fflush(stdout);
      fail("the stream from ", where, " ended before its [DONE]");
    }
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!opt.quiet) {
      const double s =
          first ? std::chrono::duration<double>(std::chrono::steady_clock::now() - *first).count() : 0;
      if (completion_tokens)
        std::fprintf(stderr, "[%d tokens, %.1f tok/s]\n", *completion_tokens,
                     s > 0 && *completion_tokens > 1 ? (*completion_tokens - 1) / s : 0.0);
      else
        std::fprintf(stderr, "[%.1f s]\n", s);
    }
    return reply;
  });
  return 0;
}

}  // namespace tessera::cli
