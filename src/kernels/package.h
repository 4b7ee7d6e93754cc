// Kernel packages loaded at run time (LoadOptions::kernels, `--kernels DIR`): a folder holding a manifest,
// kernel.json, that names the graph op the package replaces, the dtypes and shapes it accepts, and one
// implementation per backend:
//
//   {"name": "rms_norm_cpu", "abi_version": 1, "op": "rms_norm",
//    "dtypes": ["float32"],                      the op's weight dtype (absent: any)
//    "shapes": {"dim": [64, 16], "eps": [1e-6]}, accepted values of the op's attributes (absent: any)
//    "implementations": [
//      {"backend": "cpu", "platform": "linux-x86_64", "library": "librms_norm.so"},
//      {"backend": "pjrt", "platform": "cpu", "stablehlo": "rms_norm.mlir"}]}
//
// A pjrt implementation may also name a library of XLA FFI handlers that its StableHLO calls with typed
// custom calls (stablehlo.custom_call @target {api_version = 4}):
//      {"backend": "pjrt", "platform": "cpu", "stablehlo": "rms_norm_ffi.mlir",
//       "ffi_library": "librms_norm_ffi.so",
//       "ffi_handlers": [{"target": "tessera_rms_norm_f32", "symbol": "tessera_rms_norm_f32_ffi"}]}
// The library is dlopened and each symbol (an XLA_FFI_Handler) looked up when the package is selected
// (load_ffi_library); the PJRT backend registers them with the plugin's PJRT_FFI_Extension before compiling.
//
// A package is read and checked in full before use (read_package: a bad manifest is an Error naming the file
// and field); the implementation for the backend in use is then loaded (load_cpu_library: dlopen, the
// exported ABI version, the kernels it registers; each failure an Error naming the library); and a package
// that does not apply here — no implementation for this backend or platform, no node of the model with its
// dtype and shapes — is skipped with a note (select_kernels). What applies goes to the backend as a
// KernelSet.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "kernels/stablehlo_text.h"
#include "kernels/target.h"
#include "tessera/kernel_abi.h"
#include "tessera/model.h"
#include "tessera/tensor.h"

namespace tessera::kernels {

// The package format's versions this build reads (manifest "abi_version"; the cpu library's
// tessera_kernel_abi_version()): kMinAbiVersion to kAbiVersion (tessera/kernel_abi.h "Versions").
inline constexpr uint32_t kAbiVersion = TESSERA_KERNEL_ABI_VERSION;
inline constexpr uint32_t kMinAbiVersion = TESSERA_KERNEL_ABI_MIN_VERSION;

// The ops a package may name, and the attributes its "shapes" may constrain.
struct OpSpec {
  const char* name;  // manifest "op"
  graph::Op op;
  std::vector<const char*> attributes;  // "dim", ... (eps: float32, compared as such; the others integers)
  int min_args, max_args;               // the node's operands (a PJRT function's arguments)
};
const std::vector<OpSpec>& known_ops();
// The values of the attributes of `op` for node `n` of `g` ("dim" of an RmsNorm, "in"/"out" of a MatMul,
// ...).
std::map<std::string, double> node_attributes(const graph::Graph& g, const graph::Node& n);
// The dtype a package's "dtypes" constrain: the node's weight operand (an RmsNorm's scale, a MatMul's
// matrix); the model dtype for ops without a weight.
DType node_dtype(const graph::Graph& g, const graph::Node& n);

// This machine's platform as a cpu implementation names it: "linux-x86_64", "linux-aarch64", ...
std::string host_platform();

struct Implementation {
  std::string backend;   // "cpu" or "pjrt"
  std::string platform;  // cpu: host_platform(); pjrt: the plugin's platform name ("cpu", "tpu", "cuda")
  std::string file;      // the library (cpu) or StableHLO text (pjrt), as a path
  std::string field;     // "implementations[i]" (for messages)
  // pjrt only: a library of XLA FFI handlers (a path; "" = none) and the custom-call targets it serves.
  struct FfiHandler {
    std::string target, symbol;  // the custom call's target name; the library's exported handler
  };
  std::string ffi_library;
  std::vector<FfiHandler> ffi_handlers;
};

// One XLA FFI handler found in a package's library (load_ffi_library).
struct FfiHandlerFn {
  std::string target, symbol;
  void* fn = nullptr;  // XLA_FFI_Handler*, as the plugin's register_handler takes it
};

// One kernel a cpu library registered.
struct CpuKernel {
  graph::Op op = graph::Op::RmsNorm;
  DType dtype = DType::F32;
  int isa = TESSERA_KERNEL_ISA_SCALAR;  // TesseraKernelIsa
  std::string name;
  void (*fn)(void) = nullptr;
};

struct KernelPackage {
  std::string dir, manifest;  // the folder and its kernel.json
  std::string name;
  const OpSpec* op = nullptr;
  std::vector<DType> dtypes;                          // empty: any
  std::map<std::string, std::vector<double>> shapes;  // attribute -> accepted values; absent: any
  std::vector<Implementation> implementations;
  std::string hash;  // of the manifest and every implementation file (compile-cache keys)

  // Filled by load_cpu_library:
  std::vector<CpuKernel> cpu_kernels;
  uint32_t library_abi_version = 0;  // its tessera_kernel_abi_version()
  std::shared_ptr<void> library;  // the dlopen handle (never closed: kernels may be in use to the end)
  // Filled by load_ffi_library (pjrt implementations naming an ffi_library):
  std::vector<FfiHandlerFn> ffi_handlers;
  std::string ffi_library;  // its path

  // Whether node `n` of `g` (an op of this package's kind) has a dtype and shapes this package accepts; else
  // why not (one phrase, e.g. "dim 64 not in [128]").
  bool accepts(const graph::Graph& g, const graph::Node& n, std::string* why = nullptr) const;
  // The implementation for `backend` on `platform`; nullptr if none.
  const Implementation* implementation(const std::string& backend, const std::string& platform) const;
};

// Reads and checks `dir`/kernel.json. Throws Error (one line naming the file and field) for a missing or
// malformed manifest, an unknown op or attribute, a wrong abi_version, or an implementation file that is not
// in the package.
KernelPackage read_package(const std::string& dir);

// Loads the library of the cpu implementation for host_platform(): dlopen, tessera_kernel_abi_version() in
// [kMinAbiVersion, kAbiVersion], then tessera_register_kernels (each kernel's op one of that version's).
// Throws Error naming the library for a dlopen failure, a missing symbol, another ABI version, a refused
// registration, or kernels for another op than the manifest's.
void load_cpu_library(KernelPackage& p);

// Loads the XLA FFI library of pjrt implementation `impl` (dlopen, then each ffi_handlers symbol). Throws
// Error naming the library for a dlopen failure or a missing symbol.
void load_ffi_library(KernelPackage& p, const Implementation& impl);

// Reads a pjrt implementation's StableHLO text (parse_stablehlo_kernel, symbols prefixed with `prefix`) and
// checks it has a public function of the op's arity (its operands in, one result). Throws Error naming the
// file.
StablehloKernelText read_stablehlo_implementation(const KernelPackage& p, const Implementation& impl,
                                                  const std::string& prefix);

// The cpu kernel of `p` for `dtype` with the highest ISA at most `isa` (TesseraKernelIsa); nullptr if none.
const CpuKernel* best_cpu_kernel(const KernelPackage& p, DType dtype, int isa);

// What the runtime reports: a package in use and the op it took (ModelInfo::kernels).
using KernelUse = KernelInUse;

// The packages that apply to one model on one backend, in the order given (the first that accepts a node
// takes it).
struct KernelSet {
  std::vector<std::shared_ptr<const KernelPackage>> packages;

  const KernelPackage* for_node(const graph::Graph& g, const graph::Node& n) const;
  // Names and hashes of the packages, for compile-cache keys ("" when empty).
  std::string identity() const;
  bool empty() const { return packages.empty(); }
};

// Reads every package in `dirs`, keeps those that apply to `target` and to some node of `reference` (the
// model's graph at any key: attributes and dtypes do not depend on it), loading their implementation, and
// notes each one skipped (log_note, one line naming the package and why). `uses` gets one entry per package
// kept.
KernelSet select_kernels(const std::vector<std::string>& dirs, const KernelTarget& target,
                         const graph::Graph& reference, std::vector<KernelUse>& uses);

}  // namespace tessera::kernels
