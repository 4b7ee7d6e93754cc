// Lowers a whole graph::Graph to one StableHLO module (MLIR text) for PJRT_Client_Compile.
//
// @main's signature, fixed for every graph:
//   arguments = every weight (graph node order; matrices in the model dtype, vectors f32),
//               the step inputs present (ids i32[rows], positions i32[rows], slots i32[rows] (rows = batch *
//               seq: each row's own slots), kv_begin i32[batch], cache_rows i32[batch] (row-mapped steps),
//               seen_from i32[batch], sample_params i32[batch * kSampleParams]), every KV cache (f32
//               [cache_batch, kv_heads, cache_len, head_dim]; layer 0 K, layer 0 V, layer 1 K, ...), then
//               the sampler's seen mask (f32 [cache_batch, vocab]) when the step samples, then each
//               linear-attention layer's recurrent state (f32 [cache_batch, linear_state_floats], a Cache
//               argument with which = kLinearStateWhich), each annotated `tf.aliasing_output = <result>` so
//               it is donated and updated in place;
//   results   = logits f32 [rows_out, vocab] (or, when the step samples, token ids i32 [batch, 1], -1 for a
//               row whose logits were not all finite), then every updated state in argument order.
// Within a step row the slots must be consecutive (each row's cache write is one dynamic_update_slice at its
// first slot). A row-mapped step (ShapeKey::row_mapped()) writes and reads cache row cache_rows[b] for step
// row b (dynamic_update_slice / gather on dim 0); the other cache rows pass through unchanged.
// A graph with tp_size > 1 is one replica's program: module attribute mhlo.num_replicas = tp_size, AllReduce
// as stablehlo.all_reduce (add) and AllGather as stablehlo.all_gather (dim 1), both over the one replica
// group [0 .. tp_size-1]; it must be compiled with num_replicas = tp_size. A graph with several outputs (the
// segments of src/backends/pjrt/pjrt_backend.cpp) returns them all, in order, before the states.
// All arithmetic is float32 (bf16/f16 weights are converted inside the program; dots use HIGHEST precision
// so a TPU does not drop to bf16 passes). A block-quantised weight (Q8_0 .. Q6_K, a GGUF's blocks) is up to
// three arguments, its parts (quant_part_name): the integers i8 [N, K], the scales f32 [N, K / group] and,
// for the offset formats, the offsets f32 [N, K / 32] (cpu::split_quant_rows); the program computes
// q * scale (+ offset) where the weight is used (a matmul's operand, the embedding's gathered rows).
// No host callbacks, no dynamic shapes.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "kernels/package.h"
#include "kernels/stablehlo_text.h"
#include "tessera/tensor.h"

namespace tessera::pjrt {

// StablehloArg::Cache's `which` for a linear-attention layer's recurrent state (Op::GatedDeltaNet): per cache
// row [conv history: C channels x (K - 1) inputs, channel-major | S: Hv x dk x dv], f32, zero before a
// sequence's first step (the backend creates it zeroed on first use).
constexpr int kLinearStateWhich = 2;
int64_t linear_state_floats(const graph::Node& n);  // the floats of one row's state of GatedDeltaNet node n

struct StablehloArg {
  enum Kind { Weight, Input, Cache, Seen } kind = Weight;
  std::string name;  // weight name / input name / "layers.<l>.k_cache"
  graph::InputKind input = graph::InputKind::TokenIds;
  int layer = -1, which = 0;  // Cache: layer, 0 = K / 1 = V / kLinearStateWhich
  Shape shape;
  DType dtype = DType::F32;
};

struct StablehloProgram {
  std::string text;                // the MLIR module
  std::vector<StablehloArg> args;  // @main's arguments, in order
  Shape logits_shape;              // result 0: [rows_out, vocab] f32, or [batch, 1] i32 token ids
  bool tokens = false;             // result 0 holds token ids (in-step sampling)
  int num_outputs = 1;             // graph outputs (results 0 .. num_outputs-1; only segments have several)
  int num_results = 0;             // num_outputs + number of states; result num_outputs + i aliases the i-th
                                   // Cache/Seen argument
  // Nodes lowered as a call to a kernel package's function, and those a package accepted but had no function
  // of the node's signature for (built-in lowering; "package: op (types) -> type").
  int spliced = 0;
  std::vector<std::string> kernel_misses;
};

// Kernel packages spliced into the program (LoadOptions::kernels on a PJRT device): a node a package accepts
// (KernelSet::for_node) whose operand and result types equal those of one of the package's public functions
// becomes `func.call` of that function, and the package's functions (symbols prefixed) are appended to the
// module; any other node gets the built-in lowering. `texts[i]` is packages[i]'s StableHLO.
struct KernelSplice {
  std::shared_ptr<const kernels::KernelSet> set;
  std::vector<kernels::StablehloKernelText> texts;
  std::string platform;  // the plugin's platform: a module with tpu_custom_call is refused unless "tpu"
};
// The splice of `set` for a plugin of `platform`: each package's pjrt implementation for that platform read
// (symbols prefixed k<i>_). Throws Error naming a file that cannot be read as StableHLO.
KernelSplice make_kernel_splice(std::shared_ptr<const kernels::KernelSet> set, const std::string& platform);

// The device arrays a block-quantised matrix of `dtype` and `shape` [N, K] is bound as: part 0 the integers
// (i8 [N, K]), 1 the scales (f32 [N, K / cpu::quant_scale_group]), 2 the offsets (f32 [N, K / 32], only where
// cpu::quant_has_offset), as cpu::split_quant_rows writes them. The emitter declares them and the backend
// uploads them from this one description.
struct QuantPart {
  int part = 0;
  DType dtype = DType::I8;
  Shape shape;
};
std::vector<QuantPart> quant_parts_of(DType dtype, const Shape& shape);
// The argument name of part `part` (0 integers, 1 scales, 2 offsets) of block-quantised weight `weight`, and
// the weight a part's argument name belongs to ("" for any other name).
std::string quant_part_name(const std::string& weight, int part);
std::string quant_part_owner(const std::string& arg_name);

// Throws Error for an op the emitter cannot lower (none today) or a graph it cannot honour.
StablehloProgram lower_to_stablehlo(const graph::Graph& g, const KernelSplice* kernels = nullptr);
inline std::string emit_stablehlo(const graph::Graph& g) { return lower_to_stablehlo(g).text; }

}  // namespace tessera::pjrt
