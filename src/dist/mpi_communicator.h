// The native backend's tensor-parallel group over MPI: MPI_COMM_WORLD of the processes `tessera launch`
// (through mpirun) started. MPI is initialised on first use and finalised at exit.
#pragma once
#include <memory>

#include "backends/communicator.h"

namespace tessera::dist {

// True when this process was started as one of several MPI ranks (OpenMPI's mpirun sets
// OMPI_COMM_WORLD_SIZE).
bool launched_under_mpi();
// MPI_COMM_WORLD; its size must equal `tp_size` (throws Error with the command to use otherwise).
std::shared_ptr<backends::Communicator> mpi_world(int tp_size);

}  // namespace tessera::dist
