// The HTTP/1.1 server under `tessera serve`, built for untrusted clients on Boost.Beast's parser and Asio's
// event loop: every connection is a few hundred bytes of state on one I/O thread, never a thread of its own,
// so clients that are slow, silent or abusive cost no worker and starve nobody.
//
// What it promises, whatever clients do:
// - the request head (request line + headers) must arrive within `header_timeout_s` of the first wait for it
//   (an idle keep-alive connection also closes then), the body within `body_timeout_s` after the head, and
//   every write must progress within `write_timeout_s`; a connection past a deadline is closed (a head that
//   is late gets 408 first);
// - at most `max_connections` open connections (beyond: 503 and close, nothing else waits for them);
// - bodies of more than `max_body_bytes`, whether framed by Content-Length or chunked, get 413 before they
// are
//   read; heads of more than `max_header_bytes` get 431; malformed framing (a negative or unparsable length,
//   a bad chunk, both Content-Length and chunked) 400; a POST without a length 411;
// - pipelined requests are answered in order on their connection;
// - the port is bound exclusively (SO_REUSEADDR, never SO_REUSEPORT): a second server on a port in use is an
//   error, not a silent split of clients;
// - stop() returns within a bounded time: connections are closed whatever state they are in.
//
// A handler either answers at once (inline handlers run on the I/O thread and must not block) or runs on a
// thread of its own (`Route::blocking`, for generation), answering whole or as a chunked stream.
#pragma once
#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tessera::http {

struct Limits {
  size_t max_body_bytes = 4u << 20;
  size_t max_header_bytes = 16u << 10;
  double header_timeout_s = 10;
  double body_timeout_s = 30;
  double write_timeout_s = 30;
  int max_connections = 512;
  int max_blocking = 64;  // handlers running on their own threads at once; beyond, the route's `busy` answer
};

struct Header {
  std::string name, value;
};

struct Request {
  std::string method, target, path;  // path: the target without its query
  int version = 11;                  // 10 or 11
  std::vector<Header> headers;
  std::string body;
  // The value of header `name` (case-insensitive), "" when absent.
  std::string header(const std::string& name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<Header> headers;
};

class Connection;

// One request's answer. Thread-safe; exactly one of respond() or begin_stream() is called, then, for a
// stream, write() any number of times and end(). Destroying it without an answer sends 500.
class Exchange {
 public:
  explicit Exchange(std::shared_ptr<Connection> c);
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  void respond(Response r);
  // Starts a streamed 200 (chunked on HTTP/1.1; on HTTP/1.0 the body runs until the connection closes).
  void begin_stream(const std::string& content_type, const std::vector<Header>& headers = {});
  // Queues `data`; blocks while more than a bounded amount waits to be sent. False once the client is gone,
  // a write timed out or the server stops: the caller should stop producing.
  bool write(std::string data);
  void end();
  // Whether the client went away (closed or reset its connection, a write failed) or the server stops. Cheap
  // enough to poll between tokens.
  bool client_gone() const;

 private:
  std::shared_ptr<Connection> conn_;
  bool answered_ = false, streaming_ = false, ended_ = false;
};

using Handler = std::function<void(const Request&, Exchange&)>;

// What to do with a request, chosen from its head and body by the router.
struct Route {
  Handler handler;
  bool blocking = false;  // run on a thread of its own (at most Limits::max_blocking at once)
  Response busy;          // blocking, and max_blocking are running: this answer instead
};
using Router = std::function<Route(const Request&)>;
// The body of an answer the server gives by itself (400, 408, 411, 413, 431, 503, 500): status and one line.
using ErrorPage = std::function<Response(int status, const std::string& message)>;

class Server {
 public:
  Server(Limits limits, Router router, ErrorPage error_page);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds `host` (an address or a name) and `port` (0: any free port) and listens; returns the port. Throws
  // tessera::Error with one line naming the address and the cause (in use, not an address here ...).
  int bind(const std::string& host, int port);
  // Runs the I/O thread.
  void start();
  // Closes the listener and every connection, wakes blocked handlers (their writes fail) and waits up to
  // `grace_s` for handler threads to return; joins the I/O thread.
  void stop(double grace_s = 5);

  int open_connections() const;

  struct Impl;  // defined in http_server.cpp only

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::http
