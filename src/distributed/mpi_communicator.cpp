#include "distributed/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/error.h"

#ifdef TESSERA_HAVE_MPI
#include <unistd.h>

#define OMPI_SKIP_MPICXX 1  // the C API only
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace tessera::distributed {

#ifdef TESSERA_HAVE_MPI
namespace {

using Clock = std::chrono::steady_clock;

// Tags on the side communicator: "which collective are you in?" and its answer (the collective's number).
constexpr int kPingTag = 1, kPongTag = 2;
// How long a rank that timed out waits for the others' answers.
constexpr auto kAnswerWait = std::chrono::milliseconds(1500);

bool g_abandoned = false;  // a collective timed out: MPI_Finalize would wait for the missing rank

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail("MPI ", what, " failed: ", std::string(msg, static_cast<size_t>(len)));
}

int as_count(size_t n, const char* what) {
  if (n > static_cast<size_t>(INT_MAX))
    fail("MPI ", what, " of ", n, " elements is more than MPI's int count");
  return static_cast<int>(n);
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  return s;
}

std::string seconds_text(double s) {
  std::string t = std::to_string(s);
  t.erase(t.find_last_not_of('0') + 1);
  if (!t.empty() && t.back() == '.') t.pop_back();
  return t;
}

class MpiCommunicator : public backends::Communicator {
 public:
  explicit MpiCommunicator(double timeout_s) : timeout_s_(timeout_s) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    check(MPI_Comm_dup(MPI_COMM_WORLD, &ctl_), "communicator duplication");
    post_ping_receive();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float* data, size_t count) override {
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, data, as_count(count, "all-reduce"), MPI_FLOAT, MPI_SUM,
                         MPI_COMM_WORLD, &req),
          "all-reduce");
    wait(req, "all-reduce");
  }
  void all_gather(const float* in, size_t count, float* out) override {
    MPI_Request req = MPI_REQUEST_NULL;
    const int n = as_count(count, "all-gather");
    check(MPI_Iallgather(in, n, MPI_FLOAT, out, n, MPI_FLOAT, MPI_COMM_WORLD, &req), "all-gather");
    wait(req, "all-gather");
  }
  void broadcast(void* data, size_t bytes, int root) override {
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Ibcast(data, as_count(bytes, "broadcast"), MPI_BYTE, root, MPI_COMM_WORLD, &req), "broadcast");
    wait(req, "broadcast");
  }
  void broadcast_untimed(void* data, size_t bytes, int root) override {
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Ibcast(data, as_count(bytes, "broadcast"), MPI_BYTE, root, MPI_COMM_WORLD, &req), "broadcast");
    wait(req, "broadcast", /*untimed=*/true);
  }

  // Before MPI_Finalize: the standing ping receive is withdrawn and the answers sent are completed.
  void shutdown() {
    if (ping_req_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&ping_req_);
      MPI_Wait(&ping_req_, MPI_STATUS_IGNORE);
    }
    for (Reply& r : replies_) MPI_Wait(&r.req, MPI_STATUS_IGNORE);
    replies_.clear();
    MPI_Comm_free(&ctl_);
  }

 private:
  struct Reply {
    long long seq = 0;
    MPI_Request req = MPI_REQUEST_NULL;
  };

  void post_ping_receive() {
    check(MPI_Irecv(&ping_buf_, 1, MPI_LONG_LONG, MPI_ANY_SOURCE, kPingTag, ctl_, &ping_req_), "receive");
  }

  // Answers every ping that has arrived with the number of the collective this rank is in.
  void serve_pings() {
    while (true) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Test(&ping_req_, &flag, &st) != MPI_SUCCESS || !flag) break;
      replies_.push_back({seq_, MPI_REQUEST_NULL});
      MPI_Isend(&replies_.back().seq, 1, MPI_LONG_LONG, st.MPI_SOURCE, kPongTag, ctl_, &replies_.back().req);
      post_ping_receive();
    }
    while (!replies_.empty()) {  // completed answers (a deque keeps the others' buffers in place)
      int flag = 0;
      MPI_Test(&replies_.front().req, &flag, MPI_STATUS_IGNORE);
      if (!flag) break;
      replies_.pop_front();
    }
  }

  // Polls `req` until it completes or the deadline passes. The backoff yields the core at once and sleeps
  // after a few hundred polls (up to 1 ms): with more ranks than cores a spinning waiter starves the rank
  // whose result it waits for.
  // `untimed`: no deadline (and a longer sleep once idle: such a wait may last hours).
  void wait(MPI_Request& req, const char* what, bool untimed = false) {
    ++seq_;
    const auto start = Clock::now();
    double limit = untimed ? 0 : timeout_s_;
    if (limit > 0 && seq_ == 1) limit = std::max(limit, kFirstCollectiveTimeoutS);
    auto sleep = std::chrono::microseconds(0);
    for (int polls = 0;; ++polls) {
      int flag = 0;
      check(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), what);
      if (flag) return;
      serve_pings();
      if (limit > 0 && (polls & 63) == 0 &&
          std::chrono::duration<double>(Clock::now() - start).count() > limit)
        timed_out(what, limit);
      if (polls < 256) {
        std::this_thread::yield();
      } else {
        const auto most = std::chrono::microseconds(untimed && polls > 4096 ? 5000 : 1000);
        sleep = std::min(most, std::max(sleep * 2, std::chrono::microseconds(20)));
        std::this_thread::sleep_for(sleep);
      }
    }
  }

  // Asks every other rank which collective it is in, then throws naming the ranks that did not answer.
  [[noreturn]] void timed_out(const char* what, double limit) {
    g_abandoned = true;
    // A member: an answer arriving after this throws is still written into it.
    answers_.assign(static_cast<size_t>(size_), -1);
    std::vector<long long>& answers = answers_;
    std::vector<MPI_Request> pongs, pings;
    std::vector<int> peers;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      peers.push_back(r);
      pongs.push_back(MPI_REQUEST_NULL);
      pings.push_back(MPI_REQUEST_NULL);
      MPI_Irecv(&answers[static_cast<size_t>(r)], 1, MPI_LONG_LONG, r, kPongTag, ctl_, &pongs.back());
      MPI_Isend(&seq_, 1, MPI_LONG_LONG, r, kPingTag, ctl_, &pings.back());
    }
    const auto until = Clock::now() + kAnswerWait;
    std::vector<bool> answered(peers.size(), false);
    while (Clock::now() < until) {
      bool all = true;
      for (size_t i = 0; i < peers.size(); ++i) {
        if (!answered[i]) {
          int flag = 0;
          MPI_Test(&pongs[i], &flag, MPI_STATUS_IGNORE);
          answered[i] = flag != 0;
        }
        all = all && answered[i];
      }
      serve_pings();  // the others time out too and ask us
      if (all) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::vector<int> silent, elsewhere;
    std::string where;
    for (size_t i = 0; i < peers.size(); ++i) {
      const long long at = answers[static_cast<size_t>(peers[i])];
      if (!answered[i]) {
        silent.push_back(peers[i]);
      } else if (at != seq_) {
        elsewhere.push_back(peers[i]);
        where += (where.empty() ? "" : ", ") +
                 ("rank " + std::to_string(peers[i]) + " is at collective #" + std::to_string(at));
      }
    }
    const std::string head = std::string("tensor-parallel ") + what + " (collective #" +
                             std::to_string(seq_) + ") timed out after " + seconds_text(limit) +
                             " s on rank " + std::to_string(rank_) + ": ";
    const std::string tail = "; giving up (collective_timeout_s sets the deadline, 0 = none)";
    if (!silent.empty())
      fail(head, silent.size() == 1 ? "rank " : "ranks ", rank_list(silent),
           " did not answer (stopped, hung, far behind or its host unreachable)",
           where.empty() ? "" : "; " + where, tail);
    if (!elsewhere.empty())
      fail(head, "every rank answered but not all are in this collective (", where, ")", tail);
    fail(head, "every rank answered and is waiting in it (MPI made no progress)", tail);
  }

  int rank_ = 0, size_ = 1;
  double timeout_s_;
  MPI_Comm ctl_ = MPI_COMM_NULL;  // side channel for the who-is-there question
  long long seq_ = 0;             // collectives entered so far
  long long ping_buf_ = 0;
  MPI_Request ping_req_ = MPI_REQUEST_NULL;
  std::deque<Reply> replies_;
  std::vector<long long> answers_;  // timed_out(): each rank's answer
};

MpiCommunicator* g_world = nullptr;

void finalize() {
  if (g_abandoned) return;  // MPI_Finalize synchronises with every rank, the missing one included
  int done = 0;
  MPI_Finalized(&done);
  if (done) return;
  if (g_world) g_world->shutdown();
  MPI_Finalize();
}

}  // namespace

std::shared_ptr<backends::Communicator> mpi_world(int tp_size, double collective_timeout_s,
                                                  bool launched_under_mpi, int rank) {
  if (!launched_under_mpi)
    fail("tp_size ", tp_size,
         " on the cpu device runs one process per rank, and this process is not one of an MPI job "
         "(DistributedConfig::mpi); start them with: tessera launch --nproc-per-node ",
         tp_size, " -- tessera ...");
  // Never destroyed: finalize() (atexit) still needs it after static destructors have run.
  static const std::shared_ptr<MpiCommunicator>& world = *new std::shared_ptr<MpiCommunicator>([&] {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      // MPI_Init waits for every rank to join (OpenMPI exchanges their addresses): a rank stopped before it
      // would hang this one there, before any collective. A watchdog ends the process at the deadline.
      struct Watch {
        std::mutex mu;
        std::condition_variable cv;
        bool done = false;
      };
      auto watch = std::make_shared<Watch>();
      if (collective_timeout_s > 0) {
        const std::string msg = "tessera: error: MPI start-up did not complete within " +
                                seconds_text(collective_timeout_s) + " s on rank " +
                                (rank >= 0 ? std::to_string(rank) : std::string("?")) +
                                ": some rank did not join (stopped, hung or its host unreachable); giving up "
                                "(collective_timeout_s sets the deadline, 0 = none)\n";
        std::thread([watch, msg, limit = collective_timeout_s] {
          std::unique_lock<std::mutex> lock(watch->mu);
          if (watch->cv.wait_for(lock, std::chrono::duration<double>(limit), [&] { return watch->done; }))
            return;
          ssize_t ignored = ::write(STDERR_FILENO, msg.data(), msg.size());
          (void)ignored;
          ::_exit(1);
        }).detach();
      }
      int provided = 0;
      const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      {
        std::lock_guard<std::mutex> lock(watch->mu);
        watch->done = true;
      }
      watch->cv.notify_all();
      check(rc, "init");
      std::atexit(finalize);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    auto w = std::make_shared<MpiCommunicator>(collective_timeout_s);
    g_world = w.get();
    return w;
  }());
  if (world->size() != tp_size)
    fail("tp_size ", tp_size, " but this job has ", world->size(),
         " MPI ranks (tessera launch --nproc-per-node ", tp_size, ")");
  return world;
}
#else
std::shared_ptr<backends::Communicator> mpi_world(int tp_size, double, bool, int) {
  fail("tp_size ", tp_size,
       " on the cpu device needs MPI, and this build has none (apt-get install "
       "libopenmpi-dev openmpi-bin, then rebuild)");
}
#endif

}  // namespace tessera::distributed
