// A persistent pool of worker threads for the CPU kernels. One run() is a fork-join of all threads: the
// caller publishes the job by bumping an atomic generation counter; workers spin briefly on it before
// sleeping on a condition variable, so back-to-back kernels (per-token decode) cost a few hundred
// nanoseconds of synchronisation instead of a futex wake-up each.
//
// Any number of threads may submit work at once (several models or sequences stepping in parallel): their
// parallel regions take turns on the one pool (a mutex per region, so regions of different callers
// interleave), each region using every worker. The alternative, a pool per calling thread, would put
// callers x workers spinning threads on the same cores. Only set_num_threads must not race with any job.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::cpu {

class ThreadPool {
 public:
  // Persistent workers, std::thread::hardware_concurrency() of them until set_num_threads (the tessera
  // command calls it for --threads or $TESSERA_NUM_THREADS; the library reads no environment).
  static ThreadPool& instance();

  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // Rebuilds the pool with n threads (n <= 0: hardware concurrency). Not called while a job runs or while
  // another thread may submit one (set it before models run).
  void set_num_threads(int n);

  // Runs fn(tid, nthreads) once on each of the nthreads threads (the caller is thread 0) and returns when
  // all finished. An exception thrown by fn is rethrown here (the first one). Called from inside a job it
  // runs fn(0, 1) inline instead of deadlocking; calls from different threads are serialised.
  void run(const std::function<void(int tid, int nthreads)>& fn);

  // Splits [0, n) into contiguous chunks (>= grain elements, except a single short chunk) over the threads.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& fn);

  // Covers [0, n) with chunks of `chunk` elements (the last one shorter) that the threads claim: the chunks
  // are split into one contiguous span per thread, each taken front to back by the thread it is handed to
  // (so a thread streams through neighbouring memory, as the decode kernels want), and a thread whose span
  // is done claims from the others' in turn, so one that starts late or is preempted on a busy machine takes
  // fewer chunks instead of holding up the others; the caller waits only for workers that took part. Runs
  // inline when there is a single chunk.
  void parallel_chunks(int64_t n, int64_t chunk, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void start(int n);
  void stop();
  void worker_main(int tid, uint64_t seen);
  uint64_t publish(bool chunked);  // makes the job visible to the workers; returns its generation word
  void join_chunks(uint64_t gen);  // a worker's part of chunked job `gen`, if it is still open

  // A parallel_chunks job: the caller's state, read only by workers that joined it (see chunk_state_).
  struct alignas(64) Span {  // chunks next .. end - 1, claimed at next (a cache line each)
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  struct ChunkJob {
    const std::function<void(int64_t, int64_t)>* fn;
    int64_t n, chunk, chunks;
    int spans;
    Span* span;  // kInline of them here; more (a pool past 16 threads) on the heap
    static constexpr int kInline = 16;
    Span inline_spans[kInline];
    std::unique_ptr<Span[]> heap_spans;
    std::atomic<int> handed{1};  // the span the next worker to join starts on (the caller has span 0)
    void work(int first);        // claims chunks of span `first`, then of the others, until none is left
    void stop();                 // no chunk is handed out after this
  };

  int num_threads_ = 1;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  // Generation word, bumped once per job: (sequence << 1) | chunked. Workers wait for a change.
  std::atomic<uint64_t> generation_{0};
  // Chunked jobs do not wait for workers that have not started: a worker joins by a CAS on
  // (generation << 16) | (joined workers << 1) | closed, which fails once the caller has closed the job or
  // moved on, so a late worker never touches a finished job's state.
  std::atomic<uint64_t> chunk_state_{0};
  ChunkJob* chunk_job_ = nullptr;
  std::atomic<int> pending_{0};   // workers that have not finished the current job
  std::atomic<int> sleepers_{0};  // workers blocked on cv_ (the caller only notifies if > 0)
  std::atomic<bool> stopping_{false};
  std::mutex run_mu_;  // serialises run() calls from different caller threads
  std::mutex mu_;
  std::condition_variable cv_;
  std::mutex error_mu_;
  std::exception_ptr error_;
};

}  // namespace tessera::cpu
