#include "dist/mpi_communicator.h"

#include <cstdlib>
#include <string>

#include "tessera/error.h"

#ifdef TESSERA_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace tessera::dist {

bool launched_under_mpi() {
  const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
  return n && std::atoi(n) > 1;
}

#ifdef TESSERA_HAVE_MPI
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail("MPI ", what, " failed: ", std::string(msg, static_cast<size_t>(len)));
}

class MpiCommunicator : public backends::Communicator {
 public:
  MpiCommunicator() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float* data, size_t count) override {
    check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
          "all-reduce");
  }
  void all_gather(const float* in, size_t count, float* out) override {
    check(MPI_Allgather(in, static_cast<int>(count), MPI_FLOAT, out, static_cast<int>(count), MPI_FLOAT,
                        MPI_COMM_WORLD),
          "all-gather");
  }
  void broadcast(void* data, size_t bytes, int root) override {
    check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD), "broadcast");
  }

 private:
  int rank_ = 0, size_ = 1;
};

void finalize() {
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Finalize();
}

}  // namespace

std::shared_ptr<backends::Communicator> mpi_world(int tp_size) {
  if (!launched_under_mpi())
    fail("--tp-size ", tp_size,
         " on the cpu device runs one process per rank; start them with: tessera launch "
         "--nproc-per-node ",
         tp_size, " -- tessera ...");
  static std::shared_ptr<MpiCommunicator> world = [] {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init");
      std::atexit(finalize);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    return std::make_shared<MpiCommunicator>();
  }();
  if (world->size() != tp_size)
    fail("--tp-size ", tp_size, " but this job has ", world->size(),
         " MPI ranks (tessera launch --nproc-per-node ", tp_size, ")");
  return world;
}
#else
std::shared_ptr<backends::Communicator> mpi_world(int tp_size) {
  fail("--tp-size ", tp_size,
       " on the cpu device needs MPI, and this build has none (apt-get install "
       "libopenmpi-dev openmpi-bin, then rebuild)");
}
#endif

}  // namespace tessera::dist
