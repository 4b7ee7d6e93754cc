// Loading a checkpoint's weights for one rank: strict validation against the architecture's full weight list,
// then each weight node's view (a tensor-parallel block, a part of a fused tensor, a reordering)
// materialised.
#pragma once
#include <functional>

#include "backends/backend.h"
#include "graph/graph.h"
#include "io/weight_source.h"
#include "models/architecture.h"

namespace tessera::runtime {

// Cheap checks of the checkpoint against the config, before anything proportional to the config is built
// (the weight list, graphs, rotary tables): the number of layers the checkpoint really has tensors for, and
// the embedding's shape against vocab_size x hidden_size. One pass over the tensor names.
void check_checkpoint_matches_config(const io::WeightSource& src, const models::DecoderConfig& c);

// Every tensor the architecture needs must be present with its shape; any tensor it does not need is an error
// (except ignorable suffixes and a tied lm_head). Then loads what this rank's graphs read (config.tp), keyed
// by graph::weight_key. `bytes` receives the total held.
backends::WeightMap load_weights(const io::WeightSource& src, const models::Architecture& arch,
                                 const models::DecoderConfig& c, DType dtype,
                                 const std::function<void(size_t, size_t)>& progress, size_t& bytes);

// The part of `full` (the stored tensor, in its load dtype) that `v` selects for tensor-parallel `rank`, with
// shape `local`. A block of whole rows of a tensor mapped from the file stays a zero-copy view when
// `zero_copy` is set; anything else is copied.
Tensor apply_view(const Tensor& full, const graph::WeightView& v, const Shape& local, int rank,
                  bool zero_copy);

}  // namespace tessera::runtime
