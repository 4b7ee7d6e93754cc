// The native backend's tensor-parallel group over MPI: MPI_COMM_WORLD of the processes `tessera launch`
// (through mpirun) started. MPI is initialised on first use and finalised at exit.
//
// Every collective has a deadline: a rank that stops answering (SIGSTOP, a wedged host, a hang) would
// otherwise leave the others waiting in MPI forever. Collectives are posted non-blocking and polled with a
// sleeping backoff; past the deadline the waiting rank asks every other rank, on a side communicator, which
// collective it is in, and throws one Error naming the collective and the ranks that did not answer. MPI is
// then left unfinalised (MPI_Finalize would wait for the missing rank too), so the process exits and mpirun /
// the launcher stop the job.
#pragma once
#include <memory>

#include "backends/communicator.h"

namespace tessera::distributed {

// Default collective deadline in seconds. A decode step's collectives take microseconds to milliseconds; a
// minute tolerates a heavily loaded or swapping host and still ends a hung job well before anyone gives up on
// it. The first collective after loading waits at least kFirstCollectiveTimeoutS, since ranks finish reading
// their weight shares at different times.
constexpr double kDefaultCollectiveTimeoutS = 60;
constexpr double kFirstCollectiveTimeoutS = 600;

// MPI_COMM_WORLD; its size must equal `tp_size` (throws Error saying how to start the ranks otherwise).
// `launched_under_mpi`: this process is one of several MPI ranks (DistributedConfig::mpi; the tessera command
// sets it when mpirun's OMPI_COMM_WORLD_SIZE > 1). `collective_timeout_s`: each collective's deadline (0: none).
// `rank`: this process's rank as the launcher numbered it, for the start-up watchdog's message (-1: unknown).
// Set by the first call. The library reads no environment variable: the caller passes what it knows.
std::shared_ptr<backends::Communicator> mpi_world(int tp_size, double collective_timeout_s,
                                                  bool launched_under_mpi, int rank = -1);

}  // namespace tessera::distributed
