// `tessera serve` against hostile and careless clients: raw sockets on 127.0.0.1 that send what HTTP clients
// should not (deep or broken JSON, bad framing, slow heads, bursts), each case bounded in requests and time.
// Suite `Cli`: these run the real binary (stage 1 only, as the other subprocess tests).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "serve_test_util.h"
#include "socket_test_util.h"

namespace {

using namespace tessera::testing::serve;
using tessera::testing::dial;
using tessera::testing::send_all;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Reads from `fd` into `buf` until `done(buf)` or the peer closes or `limit_s` passes; false on timeout.
template <typename Done>
bool read_until(int fd, std::string& buf, double limit_s, Done done) {
  const auto t0 = Clock::now();
  while (!done(buf)) {
    const double left = limit_s - since(t0);
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) continue;
    char tmp[65536];
    const ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
    if (n <= 0) return true;  // closed (or reset)
    buf.append(tmp, static_cast<size_t>(n));
  }
  return true;
}

struct Reply {
  int status = 0;                              // 0: no response (closed or timed out)
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  bool closed = false;  // the server closed the connection after it
};

// One response read from `buf` (filled from `fd` as needed); what follows it stays in `buf`.
Reply read_reply(int fd, std::string& buf, double limit_s = 30) {
  Reply r;
  read_until(fd, buf, limit_s, [](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; });
  const size_t end = buf.find("\r\n\r\n");
  if (end == std::string::npos || buf.rfind("HTTP/1.1 ", 0) != 0) {
    r.closed = true;
    return r;
  }
  r.status = std::atoi(buf.c_str() + 9);
  size_t at = buf.find("\r\n") + 2;
  while (at < end) {
    const size_t eol = buf.find("\r\n", at);
    const std::string line = buf.substr(at, eol - at);
    const size_t colon = line.find(':');
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    r.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
    at = eol + 2;
  }
  buf.erase(0, end + 4);
  if (r.headers.count("content-length")) {
    const size_t n = std::stoul(r.headers["content-length"]);
    read_until(fd, buf, limit_s, [n](const std::string& b) { return b.size() >= n; });
    r.body = buf.substr(0, n);
    buf.erase(0, std::min(n, buf.size()));
  } else if (r.headers["transfer-encoding"] == "chunked") {
    while (true) {
      read_until(fd, buf, limit_s, [](const std::string& b) { return b.find("\r\n") != std::string::npos; });
      const size_t eol = buf.find("\r\n");
      if (eol == std::string::npos) break;
      const size_t n = std::stoul(buf.substr(0, eol), nullptr, 16);
      read_until(fd, buf, limit_s, [&](const std::string& b) { return b.size() >= eol + 2 + n + 2; });
      r.body += buf.substr(eol + 2, n);
      buf.erase(0, std::min(buf.size(), eol + 2 + n + 2));
      if (n == 0) break;
    }
  }
  r.closed = r.headers["connection"] == "close";
  return r;
}

// Sends `raw` on a new connection and reads one response.
Reply roundtrip(int port, const std::string& raw, double limit_s = 30) {
  const int fd = dial(port);
  if (fd < 0) return {};
  send_all(fd, raw);
  std::string buf;
  Reply r = read_reply(fd, buf, limit_s);
  ::close(fd);
  return r;
}

std::string post(const std::string& path, const std::string& body,
                 const std::string& type = "application/json") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
         (type.empty() ? std::string() : "Content-Type: " + type + "\r\n") +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string error_param(const Reply& r) {
  const json e = json::parse(r.body, nullptr, false);
  if (e.is_discarded() || !e.contains("error")) return "<no error object: " + r.body + ">";
  return e["error"]["param"].is_null() ? "" : e["error"]["param"].get<std::string>();
}

bool healthy(int port) {
  return roundtrip(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 10).status == 200;
}

long rss_kb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

// Bodies no parser should choke on: each a 400 naming what is wrong, and the server still up.
TEST(Cli, ServeFaultBadJsonIsA400NamingTheField) {
  START_OR_FAIL(s, {"--max-num-seqs", "2", "--max-model-len", "128"});
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "{\"a\":";
  deep += "1";
  for (int i = 0; i < 100000; ++i) deep += "}";
  struct Case {
    std::string what, body, param;
  };
  const std::vector<Case> cases = {
      {"deep chat_template_kwargs", "{" + msgs + ", \"chat_template_kwargs\": " + deep + "}", ""},
      {"deep messages", R"({"messages": )" + std::string(100000, '[') + std::string(100000, ']') + "}", ""},
      {"1e999 max_tokens", "{" + msgs + R"(, "max_tokens": 1e999})", "max_tokens"},
      {"1e999 seed", "{" + msgs + R"(, "seed": 1e999})", "seed"},
      {"1e999 temperature", "{" + msgs + R"(, "temperature": 1e999})", "temperature"},
      {"-1e999 n", "{" + msgs + R"(, "n": -1e999})", "n"},
      {"raw 0xFF", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\xff\"}]}", ""},
      {"overlong /", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\xc0\xaf\"}]}", ""},
  };
  for (const auto& k : cases) {
    const Reply r = roundtrip(s.port, post("/v1/chat/completions", k.body));
    EXPECT_EQ(r.status, 400) << k.what << ": " << r.body.substr(0, 300);
    if (!k.param.empty()) {
      EXPECT_EQ(error_param(r), k.param) << k.what << ": " << r.body;
    }
    ASSERT_TRUE(healthy(s.port)) << k.what << " took the server down:\n" << s.proc->err();
  }
  const Reply utf = roundtrip(s.port, post("/v1/chat/completions", cases[6].body));
  EXPECT_NE(utf.body.find("UTF-8"), std::string::npos) << utf.body;
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
}

// Framing a parser must refuse, each answered (never a held connection) with the status HTTP gives it.
TEST(Cli, ServeFaultBadFramingGetsTheRightStatus) {
  START_OR_FAIL(s, {"--max-num-seqs", "2", "--max-model-len", "128"});
  const std::string ok_body = R"({"prompt": "hi", "max_tokens": 2, "temperature": 0})";
  auto chunked = [](const std::string& chunks) {
    return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           "Transfer-Encoding: chunked\r\n\r\n" +
           chunks;
  };
  // 4 MiB + 1 in 64 KiB chunks: counted against the same limit as a Content-Length body.
  std::string big;
  const size_t limit = 4u << 20;
  for (size_t sent = 0; sent < limit + 1;) {
    const size_t n = std::min<size_t>(65536, limit + 1 - sent);
    char size[16];
    std::snprintf(size, sizeof(size), "%zx\r\n", n);
    big += size + std::string(n, ' ') + "\r\n";
    sent += n;
  }
  big += "0\r\n\r\n";
  struct Case {
    std::string what, raw;
    int status;
  };
  const std::vector<Case> cases = {
      {"chunked 4 MiB + 1", chunked(big), 413},
      {"Content-Length 4 MiB + 1",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(limit + 1) + "\r\n\r\n",
       413},
      {"negative chunk size", chunked("-5\r\nhello\r\n0\r\n\r\n"), 400},
      {"Content-Length -1",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
       "-1\r\n\r\n",
       400},
      {"absurd Content-Length",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
       "99999999999999999999999\r\n\r\n",
       400},
      {"POST without a length",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\r\n", 411},
      {"64 KiB header line", "GET /health HTTP/1.1\r\nX-Long: " + std::string(65536, 'a'), 431},
      {"garbage request line", "HELLO\r\n\r\n", 400},
      {"a valid chunked body",
       chunked("b\r\n{\"prompt\": \r\n" +
               [&] {
                 const std::string rest = R"("hi", "max_tokens": 2, "temperature": 0})";
                 char size[16];
                 std::snprintf(size, sizeof(size), "%zx\r\n", rest.size());
                 return size + rest + "\r\n0\r\n\r\n";
               }()),
       200},
  };
  for (const auto& k : cases) {
    const auto t0 = Clock::now();
    const Reply r = roundtrip(s.port, k.raw, 20);
    EXPECT_EQ(r.status, k.status) << k.what << ": " << r.body.substr(0, 300);
    EXPECT_LT(since(t0), 5.0) << k.what << " held the connection";
    if (k.status != 200) {
      EXPECT_TRUE(r.closed) << k.what;
      EXPECT_NE(error_param(r).find("<no error object"), 0u) << k.what;
    }
  }
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
}

// Two requests sent back to back on one connection: both answered, in order, on that connection.
TEST(Cli, ServeFaultPipelinedRequestsAreAllAnsweredInOrder) {
  START_OR_FAIL(s, {"--max-num-seqs", "2", "--max-model-len", "128"});
  const int fd = dial(s.port);
  ASSERT_GE(fd, 0);
  const std::string body = R"({"prompt": "hi", "max_tokens": 2, "temperature": 0})";
  ASSERT_TRUE(send_all(fd, post("/v1/completions", body) + "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" +
                               post("/v1/completions", R"({"prompt": []})")));
  std::string buf;
  const Reply a = read_reply(fd, buf), b = read_reply(fd, buf), c = read_reply(fd, buf);
  ::close(fd);
  EXPECT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(json::parse(a.body, nullptr, false).value("object", ""), "text_completion") << a.body;
  EXPECT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(json::parse(b.body, nullptr, false).value("object", ""), "list") << b.body;
  EXPECT_EQ(c.status, 400) << c.body;
  EXPECT_EQ(error_param(c), "prompt");
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
}

// JSON endpoints take JSON only: what a web page may send cross-site without a preflight is 415.
TEST(Cli, ServeFaultContentTypeOtherThanJsonIs415) {
  START_OR_FAIL(s, {"--max-num-seqs", "2", "--max-model-len", "128"});
  const std::string body = R"({"prompt": "hi", "max_tokens": 2, "temperature": 0})";
  for (const std::string type :
       {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data", ""}) {
    const Reply r = roundtrip(s.port, post("/v1/completions", body, type));
    EXPECT_EQ(r.status, 415) << "'" << type << "': " << r.body;
  }
  for (const std::string type : {"application/json", "Application/JSON; charset=utf-8"}) {
    const Reply r = roundtrip(s.port, post("/v1/completions", body, type));
    EXPECT_EQ(r.status, 200) << "'" << type << "': " << r.body;
  }
  // response_format text (the API's default) is accepted.
  const Reply r = roundtrip(s.port, post("/v1/chat/completions",
                                         R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                                            "response_format": {"type": "text"}})"));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
}

// 200 connections that dribble their head a byte a second hold no thread: a normal client is answered at
// once meanwhile, and the dribblers are dropped at the head deadline.
TEST(Cli, ServeFaultSlowClientsStarveNobody) {
  START_OR_FAIL(s, {"--max-num-seqs", "2", "--max-model-len", "128", "--header-timeout", "4"});
  std::vector<int> slow;
  for (int i = 0; i < 200; ++i) {
    const int fd = dial(s.port);
    ASSERT_GE(fd, 0) << "connection " << i;
    slow.push_back(fd);
  }
  const std::string head = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  std::atomic<bool> stop{false};
  std::thread dribble([&] {
    for (size_t k = 0; k < head.size() && !stop.load(); ++k) {
      for (int fd : slow) ::send(fd, head.data() + k, 1, MSG_NOSIGNAL);
      for (int i = 0; i < 10 && !stop.load(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  double worst = 0;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    const Reply r = roundtrip(s.port, post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2})"), 10);
    worst = std::max(worst, since(t0));
    EXPECT_EQ(r.status, 200) << r.body;
  }
  std::printf("200 slow connections: the normal client's slowest answer %.3f s\n", worst);
  EXPECT_LT(worst, 2.0);
  // Past the 4 s head deadline each dribbler has its 408 (or its connection closed).
  int answered = 0;
  for (int fd : slow) {
    std::string buf;
    const Reply r = read_reply(fd, buf, 8);
    answered += r.status == 408 || r.closed;
  }
  stop.store(true);
  dribble.join();
  for (int fd : slow) ::close(fd);
  EXPECT_EQ(answered, 200);
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
}

// 100 connections at once, each asking for a completion: every one answered, 200 or 429, none reset; and
// beyond --max-connections a connection gets 503.
TEST(Cli, ServeFaultBurstGetsOnly200sAnd429s) {
  START_OR_FAIL(s, {"--max-num-seqs", "4", "--max-queue", "16", "--max-model-len", "128"});
  std::mutex mu;
  std::map<int, int> statuses;
  std::vector<std::thread> clients;
  const std::string req =
      post("/v1/completions", R"({"prompt": "Hello", "max_tokens": 8, "temperature": 0})");
  for (int i = 0; i < 100; ++i)
    clients.emplace_back([&] {
      const Reply r = roundtrip(s.port, req, 60);
      std::lock_guard<std::mutex> lk(mu);
      ++statuses[r.status];
    });
  for (auto& t : clients) t.join();
  std::printf("burst of 100: %d x 200, %d x 429, %d other\n", statuses[200], statuses[429],
              100 - statuses[200] - statuses[429]);
  EXPECT_EQ(statuses[200] + statuses[429], 100);
  EXPECT_GE(statuses[200], 20);  // the 4 slots and 16 queue places at least
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();

  START_OR_FAIL(capped, {"--max-num-seqs", "1", "--max-model-len", "128", "--max-connections", "8"});
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(dial(capped.port));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const Reply over = roundtrip(capped.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 10);
  EXPECT_EQ(over.status, 503) << over.body;
  for (int fd : idle) ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(healthy(capped.port));
  EXPECT_EQ(capped.proc->terminate(), 0) << capped.proc->err();
}

// Large refused requests do not leave their memory behind: RSS after 20 of them within 50 MB of before.
TEST(Cli, ServeFaultLargeRequestsGiveTheirMemoryBack) {
  START_OR_FAIL(s, {"--max-num-seqs", "2", "--max-model-len", "128"});
  std::string body = R"({"messages": [)";
  for (int i = 0; i < 100000; ++i) body += std::string(i ? "," : "") + R"({"role": "user", "content": "hi"})";
  body += "]}";
  ASSERT_GT(body.size(), 3000000u);
  ASSERT_TRUE(healthy(s.port));
  const long before = rss_kb(s.proc->pid());
  long peak = before;
  std::vector<std::thread> clients;
  for (int round = 0; round < 5; ++round) {
    clients.clear();
    for (int i = 0; i < 4; ++i)
      clients.emplace_back([&] {
        const Reply r = roundtrip(s.port, post("/v1/chat/completions", body), 120);
        EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
      });
    for (auto& t : clients) t.join();
    peak = std::max(peak, rss_kb(s.proc->pid()));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const long after = rss_kb(s.proc->pid());
  std::printf("RSS before %.1f MB, after 20 large refused requests %.1f MB (peak seen %.1f MB)\n",
              before / 1024.0, after / 1024.0, peak / 1024.0);
  EXPECT_LT(after - before, 50 * 1024);
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
}

// A port in use is a one-line error, not a second server sharing it.
TEST(Cli, ServeFaultPortInUseIsAnError) {
  START_OR_FAIL(s, {"--max-num-seqs", "1", "--max-model-len", "128"});
  const auto t0 = Clock::now();
  auto r = tessera::testing::run_cli("serve --port " + std::to_string(s.port));
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("in use"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(std::to_string(s.port)), std::string::npos) << r.err;
  EXPECT_LT(since(t0), 20.0);
  EXPECT_TRUE(healthy(s.port));
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
}

// SIGTERM while a client is still sending its head: the server is gone within --shutdown-timeout and a bit.
TEST(Cli, ServeFaultSigtermWithASlowClientIsBounded) {
  START_OR_FAIL(s, {"--max-num-seqs", "1", "--max-model-len", "128", "--shutdown-timeout", "3",
                    "--header-timeout", "60"});
  const int fd = dial(s.port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = Clock::now();
  EXPECT_EQ(s.proc->terminate(20), 0) << s.proc->err();
  const double took = since(t0);
  std::printf("SIGTERM with a slow client: exited after %.3f s\n", took);
  EXPECT_LT(took, 5.0);
  ::close(fd);
}

// The same seeded request gives the same text in whatever slot it lands: alone (slot 0), then beside two
// long requests holding slots 0 and 1.
TEST(Cli, ServeFaultSeededRequestIsTheSameInAnySlot) {
  START_OR_FAIL(s, {"--max-num-seqs", "3", "--max-model-len", "256"});
  const std::string seeded = post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 24,
                                                         "temperature": 1.0, "seed": 1234})");
  const Reply alone = roundtrip(s.port, seeded, 60);
  ASSERT_EQ(alone.status, 200) << alone.body;
  std::vector<std::thread> busy;
  for (int i = 0; i < 2; ++i)
    busy.emplace_back([&] {
      roundtrip(s.port, post("/v1/completions", R"({"prompt": "Count: 1, 2, 3,", "max_tokens": 120,
                                                   "temperature": 0})"),
                120);
    });
  auto c = client(s.port);
  bool two = false;
  for (int i = 0; i < 3000 && !two; ++i) {
    auto m = c->Get("/metrics");
    two = m && m->body.find("tessera:num_requests_running{model_name=\"smollm2\"} 2\n") != std::string::npos;
    if (!two) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(two) << "the two long requests never ran together";
  const Reply beside = roundtrip(s.port, seeded, 60);
  for (auto& t : busy) t.join();
  ASSERT_EQ(beside.status, 200) << beside.body;
  const json a = json::parse(alone.body), b = json::parse(beside.body);
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_FALSE(a["choices"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(s.proc->terminate(), 0) << s.proc->err();
}

}  // namespace
