#include "http_server.h"

#include <malloc.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

#include "tessera/error.h"

namespace tessera::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

namespace {

bool iequal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

const char* reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 415:
      return "Unsupported Media Type";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

// A response head. `length` < 0: chunked (HTTP/1.1) or until close (HTTP/1.0).
std::string head(int status, const std::string& content_type, long long length, bool chunked, bool keep_alive,
                 const std::vector<Header>& extra) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\n";
  if (!content_type.empty()) h += "Content-Type: " + content_type + "\r\n";
  if (chunked)
    h += "Transfer-Encoding: chunked\r\n";
  else if (length >= 0)
    h += "Content-Length: " + std::to_string(length) + "\r\n";
  h += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& x : extra) h += x.name + ": " + x.value + "\r\n";
  return h + "\r\n";
}

// Requests whose body is at least this large return their memory to the system once answered (malloc_trim):
// the arenas of the thread that parsed them would otherwise keep what the largest request needed.
constexpr size_t kTrimAfterBytes = 256u << 10;
// A streaming handler waits while this much of its output is queued and not yet sent.
constexpr size_t kMaxQueuedBytes = 256u << 10;
// How long a refused client's remaining bytes are read and dropped before its connection closes.
constexpr double kLingerSeconds = 2;

}  // namespace

std::string Request::header(const std::string& name) const {
  for (const auto& h : headers)
    if (iequal(h.name, name)) return h.value;
  return "";
}

class Connection;

struct Server::Impl {
  Limits limits;
  Router router;
  ErrorPage error_page;
  // Declared before the event loop: connections still queued in it unregister themselves when it is
  // destroyed.
  std::mutex mu;  // guards live, blocking
  std::condition_variable cv;
  std::unordered_set<Connection*> live;
  int blocking = 0;

  net::io_context io{1};
  // Keeps io.run() going while nothing is pending on it: once stop() closes the listener, a connection whose
  // handler runs on its own thread has no operation in flight, and the bytes that handler posts must still
  // be written.
  net::executor_work_guard<net::io_context::executor_type> work{io.get_executor()};
  tcp::acceptor acceptor{io};
  net::steady_timer accept_backoff{io};
  std::thread thread;
  std::atomic<bool> stopping{false};

  void accept();
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Server::Impl& srv, tcp::socket sock)
      : srv_(srv),
        sock_(std::move(sock)),
        read_timer_(sock_.get_executor()),
        write_timer_(sock_.get_executor()) {
    std::lock_guard<std::mutex> lk(srv_.mu);
    srv_.live.insert(this);
  }
  ~Connection() {
    {
      std::lock_guard<std::mutex> lk(srv_.mu);
      srv_.live.erase(this);
    }
    srv_.cv.notify_all();
  }

  void start() { read_head(); }

  // ---- any thread ----
  // Queues bytes for the client; false when the connection has failed (nothing is queued then).
  bool send(std::string bytes, bool last_of_stream = false) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (failed_) return false;
      queued_ += bytes.size();
    }
    net::post(sock_.get_executor(),
              [self = shared_from_this(), b = std::move(bytes), last_of_stream]() mutable {
                self->outq_.push_back(std::move(b));
                if (last_of_stream) self->close_after_ = true;
                if (!self->writing_) self->write_next();
              });
    return true;
  }
  // Waits while too much is queued; false once the connection has failed.
  bool wait_drained() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return failed_ || queued_ <= kMaxQueuedBytes; });
    return !failed_;
  }
  bool gone() const {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (failed_) return true;
    }
    // The socket is closed only on the strand after the handler finished, so its descriptor is ours here.
    char c;
    const ssize_t r = ::recv(const_cast<tcp::socket&>(sock_).native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  // From Server::stop: every wait ends and every later send fails.
  void mark_failed() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      failed_ = true;
    }
    cv_.notify_all();
  }
  void handler_done(bool reusable) {
    net::post(sock_.get_executor(), [self = shared_from_this(), reusable] {
      self->handler_running_ = false;
      if (!reusable) self->keep_alive_ = false;
      self->next();
    });
  }
  // From Server::stop: closes now unless a handler runs or an answer is being written (then after it).
  void stop_soon() {
    net::post(sock_.get_executor(), [self = shared_from_this()] {
      self->keep_alive_ = false;
      if (!self->handler_running_ && !self->writing_) self->close();
    });
  }
  int version() const { return version_; }
  bool keep_alive() const { return keep_alive_.load(); }

 private:
  Server::Impl& srv_;
  tcp::socket sock_;
  net::steady_timer read_timer_, write_timer_;
  beast::flat_buffer buf_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bool read_timed_out_ = false, linger_ = false;
  std::array<char, 16384> scratch_;
  // keep_alive_ is also read by a handler's thread (the Connection header of its answer) while stop_soon()
  // may clear it on the I/O thread; the rest is the I/O thread's alone.
  std::atomic<bool> keep_alive_{true};
  bool close_after_ = false, handler_running_ = false, writing_ = false, closed_ = false;
  int version_ = 11;
  std::deque<std::string> outq_;

  mutable std::mutex mu_;  // with workers: failed_, queued_
  std::condition_variable cv_;
  bool failed_ = false;
  size_t queued_ = 0;

  bool failed() const {
    std::lock_guard<std::mutex> lk(mu_);
    return failed_;
  }

  void arm_read(double seconds) {
    read_timed_out_ = false;
    read_timer_.expires_after(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
    read_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (ec) return;
      self->read_timed_out_ = true;
      error_code ig;
      self->sock_.cancel(ig);
    });
  }

  void read_head() {
    if (srv_.stopping.load() || failed()) return close();
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(srv_.limits.max_header_bytes));
    parser_->body_limit(static_cast<uint64_t>(srv_.limits.max_body_bytes));
    arm_read(srv_.limits.header_timeout_s);
    bhttp::async_read_header(
        sock_, buf_, *parser_,
        [self = shared_from_this()](const error_code& ec, size_t) { self->on_head(ec); });
  }

  // A read that failed: answer what deserves an answer, then close.
  void read_failed(const error_code& ec, bool in_body) {
    read_timer_.cancel();
    const bool got_some = in_body || (parser_ && parser_->got_some());
    if (srv_.stopping.load() || !got_some || ec == bhttp::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset || (ec == net::error::operation_aborted && !read_timed_out_))
      return close();
    if (read_timed_out_)
      return refuse(408, in_body ? "the request body did not arrive in time"
                                 : "the request head did not arrive in time");
    if (ec == bhttp::error::header_limit)
      return refuse(
          431, "the request head is larger than " + std::to_string(srv_.limits.max_header_bytes) + " bytes");
    if (ec == bhttp::error::body_limit)
      return refuse(
          413, "the request body is larger than " + std::to_string(srv_.limits.max_body_bytes) + " bytes");
    if (ec == bhttp::error::partial_message) return close();
    refuse(400, "malformed HTTP request: " + ec.message());
  }

  void on_head(const error_code& ec) {
    if (ec) return read_failed(ec, false);
    read_timer_.cancel();
    auto& m = parser_->get();
    version_ = m.version() == 10 ? 10 : 11;
    keep_alive_ = m.keep_alive();
    const bool has_length = m.find(bhttp::field::content_length) != m.end();
    if (m.method() == bhttp::verb::post && !has_length && !parser_->chunked())
      return refuse(411, "a POST request needs Content-Length or Transfer-Encoding: chunked");
    if (parser_->is_done()) return dispatch();
    if (iequal(std::string(m[bhttp::field::expect]), "100-continue") && version_ == 11)
      send("HTTP/1.1 100 Continue\r\n\r\n");
    arm_read(srv_.limits.body_timeout_s);
    bhttp::async_read(sock_, buf_, *parser_, [self = shared_from_this()](const error_code& e, size_t) {
      if (e) return self->read_failed(e, true);
      self->read_timer_.cancel();
      self->dispatch();
    });
  }

  // Answers `status` itself and closes the connection after it.
  void refuse(int status, const std::string& message) {
    keep_alive_ = false;
    linger_ = true;
    Response r = srv_.error_page(status, message);
    send(head(r.status, r.content_type, static_cast<long long>(r.body.size()), false, false, r.headers) +
             r.body,
         true);
  }

  void dispatch() {
    auto msg = parser_->release();
    parser_.reset();
    if (buf_.capacity() > (64u << 10)) buf_.shrink_to_fit();
    auto req = std::make_shared<Request>();
    req->method = std::string(msg.method_string());
    req->target = std::string(msg.target());
    req->path = req->target.substr(0, req->target.find('?'));
    req->version = version_;
    for (const auto& f : msg) req->headers.push_back({std::string(f.name_string()), std::string(f.value())});
    req->body = std::move(msg.body());
    msg = {};
    Route route = srv_.router(*req);
    handler_running_ = true;
    if (!route.blocking) {
      Exchange ex(shared_from_this());
      try {
        route.handler(*req, ex);
      } catch (...) {  // the Exchange answers 500 when nothing was sent
      }
      return;
    }
    {
      std::lock_guard<std::mutex> lk(srv_.mu);
      if (srv_.blocking >= srv_.limits.max_blocking) {
        Exchange ex(shared_from_this());
        ex.respond(route.busy);
        return;
      }
      ++srv_.blocking;
    }
    std::thread([self = shared_from_this(), req, h = std::move(route.handler), &srv = srv_]() mutable {
      const bool large = req->body.size() >= kTrimAfterBytes;
      try {
        Exchange ex(self);
        h(*req, ex);
      } catch (...) {
      }
      req.reset();
      self.reset();
      if (large) ::malloc_trim(0);
      // Notified under the lock: once it is released this thread touches the server no more (stop() may be
      // waiting to free it).
      std::lock_guard<std::mutex> lk(srv.mu);
      --srv.blocking;
      srv.cv.notify_all();
    }).detach();
  }

  void write_next() {
    if (outq_.empty() || closed_) {
      writing_ = false;
      return next();
    }
    writing_ = true;
    write_timer_.expires_after(
        std::chrono::milliseconds(static_cast<int64_t>(srv_.limits.write_timeout_s * 1000)));
    write_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (!ec) self->fail();  // the client does not read
    });
    net::async_write(sock_, net::buffer(outq_.front()),
                     [self = shared_from_this()](const error_code& ec, size_t) { self->on_written(ec); });
  }

  void on_written(const error_code& ec) {
    write_timer_.cancel();
    const size_t n = outq_.front().size();
    outq_.pop_front();
    {
      std::lock_guard<std::mutex> lk(mu_);
      queued_ -= n;
    }
    cv_.notify_all();
    if (ec) {
      fail();
      size_t rest = 0;
      for (auto& b : outq_) rest += b.size();
      outq_.clear();
      {
        std::lock_guard<std::mutex> lk(mu_);
        queued_ -= rest;
      }
      writing_ = false;
      return next();
    }
    write_next();
  }

  // The connection cannot be used any more: handlers see it gone, pending operations end.
  void fail() {
    mark_failed();
    error_code ig;
    sock_.shutdown(tcp::socket::shutdown_both, ig);
    sock_.cancel(ig);
  }

  // After an answer is written or a handler ended: the next request, or the end of the connection.
  void next() {
    if (handler_running_ || writing_ || !outq_.empty() || closed_) return;
    if (close_after_ || !keep_alive_ || failed() || srv_.stopping.load()) return close();
    if (parser_) return;  // a read is under way (a 100 Continue was written)
    read_head();
  }

  void close() {
    if (handler_running_ || writing_) {
      keep_alive_ = false;
      return;
    }
    if (closed_) return;
    closed_ = true;
    mark_failed();
    read_timer_.cancel();
    write_timer_.cancel();
    error_code ig;
    sock_.shutdown(tcp::socket::shutdown_send, ig);
    if (linger_ && !srv_.stopping.load()) {
      // After a refusal the client may still be sending what was refused; closing with its bytes unread would
      // reset the connection and could destroy the answer before it reads it. So what it sends is read and
      // dropped for a short while (as nginx's lingering close), then the socket closes.
      linger_ = false;
      arm_read(kLingerSeconds);
      return discard();
    }
    sock_.close(ig);
  }

  void discard() {
    sock_.async_read_some(net::buffer(scratch_), [self = shared_from_this()](const error_code& ec, size_t) {
      if (!ec) return self->discard();
      self->read_timer_.cancel();
      error_code ig;
      self->sock_.close(ig);
    });
  }
};

// ---- Exchange ----

Exchange::Exchange(std::shared_ptr<Connection> c) : conn_(std::move(c)) {}

Exchange::~Exchange() {
  if (!answered_) {
    Response r;
    r.status = 500;
    r.body =
        "{\"error\":{\"message\":\"the handler gave no answer\",\"type\":\"server_error\",\"param\":null,"
        "\"code\":null}}";
    respond(std::move(r));
  }
  // A stream the handler did not end is cut (no last chunk): the client sees it incomplete.
  const bool reusable = !streaming_ || (ended_ && conn_->version() == 11);
  conn_->handler_done(reusable);
}

void Exchange::respond(Response r) {
  if (answered_) return;
  answered_ = true;
  conn_->send(head(r.status, r.content_type, static_cast<long long>(r.body.size()), false,
                   conn_->keep_alive(), r.headers) +
              r.body);
}

void Exchange::begin_stream(const std::string& content_type, const std::vector<Header>& headers) {
  if (answered_) return;
  answered_ = streaming_ = true;
  const bool chunked = conn_->version() == 11;
  conn_->send(head(200, content_type, -1, chunked, chunked && conn_->keep_alive(), headers));
}

bool Exchange::write(std::string data) {
  if (!streaming_ || ended_) return false;
  if (data.empty()) return !client_gone();
  if (conn_->version() == 11) {
    char size[32];
    std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    data = size + data + "\r\n";
  }
  return conn_->send(std::move(data)) && conn_->wait_drained();
}

void Exchange::end() {
  if (!streaming_ || ended_) return;
  ended_ = true;
  if (conn_->version() == 11)
    conn_->send("0\r\n\r\n");
  else
    conn_->send("", true);  // HTTP/1.0: the end of the body is the end of the connection
}

bool Exchange::client_gone() const { return conn_->gone(); }

// ---- Server ----

void Server::Impl::accept() {
  acceptor.async_accept(net::make_strand(io), [this](const error_code& ec, tcp::socket sock) {
    if (stopping.load() || ec == net::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors (or another transient failure): try again shortly instead of spinning.
      accept_backoff.expires_after(std::chrono::milliseconds(50));
      accept_backoff.async_wait([this](const error_code& e) {
        if (!e) accept();
      });
      return;
    }
    size_t open;
    {
      std::lock_guard<std::mutex> lk(mu);
      open = live.size();
    }
    if (open >= static_cast<size_t>(limits.max_connections)) {
      // Full: one 503 written without waiting (it fits any socket buffer), then the connection is closed.
      const Response r = error_page(
          503, "too many open connections (" + std::to_string(limits.max_connections) + "); try again later");
      const std::string bytes =
          head(r.status, r.content_type, static_cast<long long>(r.body.size()), false, false, r.headers) +
          r.body;
      error_code ig;
      sock.non_blocking(true, ig);
      sock.write_some(net::buffer(bytes), ig);
      sock.shutdown(tcp::socket::shutdown_send, ig);
      sock.close(ig);
    } else {
      error_code ig;
      sock.set_option(tcp::no_delay(true), ig);
      std::make_shared<Connection>(*this, std::move(sock))->start();
    }
    accept();
  });
}

Server::Server(Limits limits, Router router, ErrorPage error_page) : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
  impl_->router = std::move(router);
  impl_->error_page = std::move(error_page);
}

Server::~Server() {
  stop();
  // Handler threads still running past stop()'s grace hold the connection objects (and through them this
  // server's event loop); the process is about to end, so they are left what they use rather than freed under
  // them.
  std::lock_guard<std::mutex> lk(impl_->mu);
  if (impl_->blocking > 0) (void)impl_.release();
}

int Server::bind(const std::string& host, int port) {
  // Every connection is a descriptor: the soft limit is raised to the hard one, and the connection cap kept
  // under it.
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
    ::getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur != RLIM_INFINITY && static_cast<rlim_t>(impl_->limits.max_connections) + 128 > rl.rlim_cur)
    fail("--max-connections ", impl_->limits.max_connections,
         " needs more open files than this process may have (", rl.rlim_cur, "; ulimit -n)");
  error_code ec;
  tcp::resolver resolver(impl_->io);
  auto found = resolver.resolve(host, std::to_string(port), tcp::resolver::numeric_service, ec);
  if (ec || found.empty())
    fail("serve: cannot listen on ", host, " (--host): ", ec ? ec.message() : "no address");
  const tcp::endpoint at = found.begin()->endpoint();
  auto& a = impl_->acceptor;
  a.open(at.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);  // TIME_WAIT only; never SO_REUSEPORT
  if (!ec) a.bind(at, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    error_code ig;
    a.close(ig);
    fail("serve: cannot listen on ", host, ":", port, " (--host/--port): ", ec.message());
  }
  return a.local_endpoint().port();
}

void Server::start() {
  impl_->accept();
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

void Server::stop(double grace_s) {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) return;
  net::post(s.io, [&s] {
    error_code ig;
    s.acceptor.close(ig);
    s.accept_backoff.cancel();
  });
  // Connections between requests (idle, or still sending a head or body) close now; those whose handler runs
  // close once its answer is written. Handlers get `grace_s` to end and their last bytes to go out.
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    for (Connection* c : s.live)
      if (auto p = c->weak_from_this().lock()) open.push_back(std::move(p));
  }
  for (auto& c : open) c->stop_soon();
  open.clear();
  const auto wait = [&s](double seconds) {
    std::unique_lock<std::mutex> lk(s.mu);
    return s.cv.wait_for(lk, std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)),
                         [&] { return s.blocking == 0 && s.live.empty(); });
  };
  if (!wait(grace_s)) {
    // Past the grace: every connection fails, so blocked handlers wake and see their client gone.
    {
      std::lock_guard<std::mutex> lk(s.mu);
      for (Connection* c : s.live) c->mark_failed();
    }
    wait(1);
  }
  s.work.reset();
  s.io.stop();
  if (s.thread.joinable()) s.thread.join();
}

int Server::open_connections() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return static_cast<int>(impl_->live.size());
}

}  // namespace tessera::http
