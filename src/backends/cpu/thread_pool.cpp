#include "backends/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "tessera/error.h"

namespace tessera::cpu {
namespace {

// How long a worker spins on the generation counter before sleeping. Decode runs dozens of kernels per
// token with gaps of a few microseconds, so the spin covers those; idle pools fall asleep quickly.
constexpr auto kSpinTime = std::chrono::microseconds(200);
// How long run() spins waiting for the workers to finish before it yields its core between checks.
constexpr auto kJoinSpinTime = std::chrono::microseconds(50);

thread_local bool t_inside_job = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// The library's default; the tessera command sizes the pool from --threads or $TESSERA_NUM_THREADS
// (apps/cli_env.h) with set_num_threads.
int default_threads() {
  unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

}  // namespace

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool(default_threads());
  return pool;
}

ThreadPool::ThreadPool(int num_threads) { start(num_threads); }

ThreadPool::~ThreadPool() { stop(); }

void ThreadPool::set_num_threads(int n) {
  if (n <= 0) n = default_threads();
  if (n == num_threads_) return;
  stop();
  start(n);
}

void ThreadPool::start(int n) {
  num_threads_ = std::max(1, n);
  stopping_.store(false);
  workers_.reserve(static_cast<size_t>(num_threads_ - 1));
  // Read here, not in the worker: a run() issued before a worker starts must still count as new.
  uint64_t seen = generation_.load();
  for (int tid = 1; tid < num_threads_; ++tid) {
    workers_.emplace_back([this, tid, seen] { worker_main(tid, seen); });
  }
}

void ThreadPool::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_.store(true);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  num_threads_ = 1;
}

void ThreadPool::worker_main(int tid, uint64_t seen) {
  for (;;) {
    // Spin first: the next kernel usually follows within microseconds.
    auto deadline = std::chrono::steady_clock::now() + kSpinTime;
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 0; gen == seen && !stopping_.load(std::memory_order_relaxed); ++i) {
      cpu_relax();
      if ((i & 255) == 255 && std::chrono::steady_clock::now() > deadline) break;
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen && !stopping_.load()) {
      std::unique_lock<std::mutex> lk(mu_);
      sleepers_.fetch_add(1);  // seq_cst: pairs with the caller's store of generation_ then load of sleepers_
      cv_.wait(lk, [&] { return generation_.load() != seen || stopping_.load(); });
      sleepers_.fetch_sub(1);
      gen = generation_.load(std::memory_order_acquire);
    }
    if (stopping_.load()) return;
    seen = gen;
    if (gen & 1) {  // chunked: joins only if the job is still open (never waited for)
      join_chunks(gen);
      continue;
    }
    // A plain job cannot be replaced before every worker ran it (the caller waits on pending_), so job_ is
    // this generation's.
    t_inside_job = true;
    try {
      (*job_)(tid, num_threads_);
    } catch (...) {
      std::lock_guard<std::mutex> lk(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    t_inside_job = false;
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

uint64_t ThreadPool::publish(bool chunked) {
  const uint64_t gen = ((generation_.load(std::memory_order_relaxed) >> 1) + 1) << 1 | (chunked ? 1 : 0);
  if (chunked) chunk_state_.store(gen << 16);  // open, nobody joined
  generation_.store(gen);                      // seq_cst publish (job state becomes visible with it)
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lk(mu_); }  // a worker between its check and its wait holds mu_
    cv_.notify_all();
  }
  return gen;
}

void ThreadPool::ChunkJob::work(int first) {
  for (int k = 0; k < spans; ++k) {
    Span& s = span[static_cast<size_t>((first + k) % spans)];
    for (int64_t c = s.next.fetch_add(1, std::memory_order_relaxed); c < s.end;
         c = s.next.fetch_add(1, std::memory_order_relaxed))
      (*fn)(c * chunk, std::min(n, (c + 1) * chunk));
  }
}

void ThreadPool::ChunkJob::stop() {
  for (int k = 0; k < spans; ++k) span[static_cast<size_t>(k)].next.store(chunks);
}

void ThreadPool::join_chunks(uint64_t gen) {
  uint64_t st = chunk_state_.load();
  for (;;) {
    if ((st >> 16) != gen || (st & 1)) return;                  // closed, or a later job
    if (chunk_state_.compare_exchange_weak(st, st + 2)) break;  // joined: the caller now waits for us
  }
  t_inside_job = true;
  try {
    chunk_job_->work(chunk_job_->handed.fetch_add(1, std::memory_order_relaxed) % chunk_job_->spans);
  } catch (...) {
    std::lock_guard<std::mutex> lk(error_mu_);
    if (!error_) error_ = std::current_exception();
  }
  t_inside_job = false;
  chunk_state_.fetch_sub(2);
}

void ThreadPool::run(const std::function<void(int tid, int nthreads)>& fn) {
  if (num_threads_ == 1 || t_inside_job) {
    fn(0, 1);
    return;
  }
  std::lock_guard<std::mutex> one_job(run_mu_);  // callers on different threads take turns
  job_ = &fn;
  error_ = nullptr;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  publish(false);
  t_inside_job = true;
  std::exception_ptr caller_error;
  try {
    fn(0, num_threads_);
  } catch (...) {
    caller_error = std::current_exception();
  }
  t_inside_job = false;
  // Spin briefly (workers normally finish within microseconds of the caller), then yield: on a busy machine
  // a worker may have been preempted, and a spinning caller would keep the core it could run on.
  std::chrono::steady_clock::time_point spin_until{};
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
    if ((i & 255) == 255) {
      const auto now = std::chrono::steady_clock::now();
      if (spin_until == std::chrono::steady_clock::time_point{}) spin_until = now + kJoinSpinTime;
      if (now > spin_until) {
        std::this_thread::yield();
        continue;
      }
    }
    cpu_relax();
  }
  job_ = nullptr;
  if (caller_error) std::rethrow_exception(caller_error);
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t chunks = std::min<int64_t>(num_threads_, (n + grain - 1) / grain);
  if (chunks <= 1 || t_inside_job) {
    fn(0, n);
    return;
  }
  run([&](int tid, int) {
    if (tid >= chunks) return;
    int64_t begin = n * tid / chunks;
    int64_t end = n * (tid + 1) / chunks;
    if (begin < end) fn(begin, end);
  });
}

void ThreadPool::parallel_chunks(int64_t n, int64_t chunk,
                                 const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  const int64_t chunks = (n + chunk - 1) / chunk;
  if (chunks <= 1 || num_threads_ == 1 || t_inside_job) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> one_job(run_mu_);
  ChunkJob job;
  job.fn = &fn;
  job.n = n;
  job.chunk = chunk;
  job.chunks = chunks;
  job.spans = static_cast<int>(std::min<int64_t>(num_threads_, chunks));
  if (job.spans > ChunkJob::kInline)
    job.heap_spans = std::make_unique<Span[]>(static_cast<size_t>(job.spans));
  job.span = job.spans > ChunkJob::kInline ? job.heap_spans.get() : job.inline_spans;
  for (int k = 0; k < job.spans; ++k) {
    job.span[static_cast<size_t>(k)].next.store(chunks * k / job.spans, std::memory_order_relaxed);
    job.span[static_cast<size_t>(k)].end = chunks * (k + 1) / job.spans;
  }
  chunk_job_ = &job;
  error_ = nullptr;
  const uint64_t gen = publish(true);
  t_inside_job = true;
  std::exception_ptr caller_error;
  try {
    job.work(0);
  } catch (...) {
    caller_error = std::current_exception();
    job.stop();
  }
  t_inside_job = false;
  // Close the job, then wait only for the workers that joined it.
  uint64_t st = chunk_state_.fetch_or(1) | 1;
  std::chrono::steady_clock::time_point spin_until{};
  for (int i = 0; st != ((gen << 16) | 1); ++i) {
    if ((i & 255) == 255) {
      const auto now = std::chrono::steady_clock::now();
      if (spin_until == std::chrono::steady_clock::time_point{}) spin_until = now + kJoinSpinTime;
      if (now > spin_until) std::this_thread::yield();
    }
    cpu_relax();
    st = chunk_state_.load(std::memory_order_acquire);
  }
  chunk_job_ = nullptr;
  if (caller_error) std::rethrow_exception(caller_error);
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

}  // namespace tessera::cpu
