// Collectives between the ranks of a tensor-parallel group, as the native backend's AllReduce / AllGather ops
// need them. One implementation runs over MPI (src/dist/mpi_communicator.cpp); every rank calls each
// collective in the same order with the same sizes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace tessera::backends {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[i] <- sum over ranks of data[i]. Every rank ends with bitwise the same values.
  virtual void all_reduce_sum(float* data, size_t count) = 0;
  // out[r * count + i] <- rank r's in[i], for every rank r (out holds size() * count floats).
  virtual void all_gather(const float* in, size_t count, float* out) = 0;
  // Rank `root`'s bytes copied to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // broadcast() without the collective deadline: a rank waiting for its leader's next command, which may come
  // after any idle time (SlotBatch::follow()).
  virtual void broadcast_untimed(void* data, size_t bytes, int root) { broadcast(data, bytes, root); }
};

}  // namespace tessera::backends
