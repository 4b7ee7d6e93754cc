// apps/http_server.*: the event-driven HTTP layer on its own, with toy routes, from several client threads at
// once (suite HttpServerConcurrency: also run under ThreadSanitizer by scripts/test.sh). Everything listens
// on 127.0.0.1 and every wait is bounded.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "http_server.h"
#include "socket_test_util.h"
#include "tessera/error.h"

namespace {

using namespace tessera;
using tessera::testing::dial;
using tessera::testing::send_all;
using Clock = std::chrono::steady_clock;

// Reads until `marker` has been seen `count` times, the peer closes, or 10 s pass.
std::string read_until(int fd, const std::string& marker, int count = 1) {
  std::string buf;
  const auto t0 = Clock::now();
  auto seen = [&] {
    int n = 0;
    for (size_t at = buf.find(marker); at != std::string::npos; at = buf.find(marker, at + 1)) ++n;
    return n;
  };
  while (seen() < count && Clock::now() - t0 < std::chrono::seconds(10)) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char tmp[4096];
    const ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
    if (n <= 0) break;
    buf.append(tmp, static_cast<size_t>(n));
  }
  return buf;
}

http::Response error_page(int status, const std::string& message) {
  return {status, "text/plain", message, {}};
}

struct Toy {
  std::atomic<int> streams_done{0}, saw_gone{0}, inline_calls{0};
  http::Route route(const http::Request& req) {
    if (req.path == "/fast")
      return {[this](const http::Request& r, http::Exchange& ex) {
                ++inline_calls;
                ex.respond({200, "text/plain", "fast:" + r.body, {}});
              },
              false,
              {}};
    if (req.path == "/stream")
      return {[this](const http::Request&, http::Exchange& ex) {
                ex.begin_stream("text/plain");
                for (int i = 0; i < 50; ++i)
                  if (!ex.write("chunk" + std::to_string(i) + ";")) return;
                ex.end();
                ++streams_done;
              },
              true,
              {}};
    if (req.path == "/slowstream")  // three chunks 200 ms apart
      return {[](const http::Request&, http::Exchange& ex) {
                ex.begin_stream("text/plain");
                for (int i = 0; i < 3; ++i) {
                  std::this_thread::sleep_for(std::chrono::milliseconds(200));
                  ex.write("part" + std::to_string(i) + ";");
                }
                ex.end();
              },
              true,
              {}};
    if (req.path == "/wait")  // blocks until the client leaves (or 10 s)
      return {[this](const http::Request&, http::Exchange& ex) {
                const auto t0 = Clock::now();
                while (!ex.client_gone() && Clock::now() - t0 < std::chrono::seconds(10))
                  std::this_thread::sleep_for(std::chrono::milliseconds(5));
                if (ex.client_gone()) ++saw_gone;
                ex.respond({200, "text/plain", "late", {}});
              },
              true,
              {429, "text/plain", "busy", {}}};
    return {[](const http::Request&, http::Exchange& ex) {
              ex.respond({404, "text/plain", "no", {}});
            },
            false,
            {}};
  }
};

TEST(HttpServerConcurrency, ManyClientsStreamsAndDisconnectsAtOnce) {
  Toy toy;
  http::Limits limits;
  limits.max_blocking = 16;
  http::Server server(
      limits, [&](const http::Request& r) { return toy.route(r); }, error_page);
  const int port = server.bind("127.0.0.1", 0);
  ASSERT_GT(port, 0);
  server.start();
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int c = 0; c < 8; ++c)
    clients.emplace_back([&, c] {
      const int fd = dial(port);
      if (fd < 0) return;
      // Keep-alive: an inline answer, a stream, an inline answer, on one connection.
      const std::string body = "b" + std::to_string(c);
      send_all(fd, "POST /fast HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
                       "\r\n\r\n" + body +
                       "GET /stream HTTP/1.1\r\nHost: x\r\n\r\nGET /fast HTTP/1.1\r\nHost: x\r\n\r\n");
      const std::string got = read_until(fd, "fast:", 2);
      ::close(fd);
      if (got.find("fast:" + body) != std::string::npos && got.find("chunk49;") != std::string::npos &&
          got.find("0\r\n\r\n") != std::string::npos)
        ++ok;
    });
  // Two clients that leave while their handler waits: each handler sees it.
  for (int c = 0; c < 2; ++c)
    clients.emplace_back([&] {
      const int fd = dial(port);
      if (fd < 0) return;
      send_all(fd, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ::close(fd);
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 8);
  const auto t0 = Clock::now();
  while (toy.saw_gone.load() < 2 && Clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(toy.saw_gone.load(), 2);
  EXPECT_EQ(toy.streams_done.load(), 8);
  EXPECT_EQ(toy.inline_calls.load(), 16);
  server.stop(2);
}

// stop() with a handler blocked on a client that never leaves and one still sending its head: bounded.
TEST(HttpServerConcurrency, StopIsBoundedWhateverClientsDo) {
  Toy toy;
  http::Limits limits;
  http::Server server(
      limits, [&](const http::Request& r) { return toy.route(r); }, error_page);
  const int port = server.bind("127.0.0.1", 0);
  server.start();
  const int waiting = dial(port), slow = dial(port);
  ASSERT_GE(waiting, 0);
  ASSERT_GE(slow, 0);
  send_all(waiting, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n");
  send_all(slow, "GET /fast HTTP/1.1\r\nHo");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = Clock::now();
  server.stop(0.5);
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(took, 3.0);
  EXPECT_EQ(toy.saw_gone.load(), 1);  // stop() made the waiting handler see its client gone
  ::close(waiting);
  ::close(slow);
}

// stop() while a handler is still streaming: once the listener is closed nothing else is pending on the event
// loop, yet the handler's last chunks must go out within the grace (the loop must not run dry and return).
TEST(HttpServerConcurrency, StopLetsARunningHandlerFinishItsAnswer) {
  Toy toy;
  http::Server server(
      {}, [&](const http::Request& r) { return toy.route(r); }, error_page);
  const int port = server.bind("127.0.0.1", 0);
  server.start();
  const int fd = dial(port);
  ASSERT_GE(fd, 0);
  send_all(fd, "GET /slowstream HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::thread stopper([&] { server.stop(3); });
  const std::string got = read_until(fd, "0\r\n\r\n");
  stopper.join();
  ::close(fd);
  EXPECT_NE(got.find("part2;"), std::string::npos) << got;
  EXPECT_NE(got.find("0\r\n\r\n"), std::string::npos) << got;
}

TEST(HttpServer, PortInUseIsAnErrorNamingIt) {
  Toy toy;
  http::Server a(
      {}, [&](const http::Request& r) { return toy.route(r); }, error_page);
  const int port = a.bind("127.0.0.1", 0);
  http::Server b(
      {}, [&](const http::Request& r) { return toy.route(r); }, error_page);
  try {
    b.bind("127.0.0.1", port);
    FAIL() << "a second server bound port " << port;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(port)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("in use"), std::string::npos) << e.what();
  }
  try {
    b.bind("not an address at all", 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not an address at all"), std::string::npos) << e.what();
  }
}

}  // namespace
