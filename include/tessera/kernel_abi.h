/* The C ABI of native cpu kernels loaded at run time (a kernel package's `cpu` implementation, see
 * README.md "Kernels loaded at run time"). A kernel author compiles a shared object against this header alone
 * (C99 or C++; no Tessera library to link) and exports two functions:
 *
 *   uint32_t tessera_kernel_abi_version(void);            returns TESSERA_KERNEL_ABI_VERSION
 *   int tessera_register_kernels(const TesseraKernelHost* host);
 *                                                          calls host->add(host, &kernel) once per kernel;
 *                                                          returns 0, or non-zero to refuse to load
 *
 * Tessera calls tessera_kernel_abi_version first and refuses a library built for a version it does not read
 * before it calls anything else. Every struct starts with struct_size (set it to sizeof the struct you were
 * compiled with), so later versions can append fields.
 *
 * Versions. A version adds ops with a C signature (or appends struct fields); it never changes what an
 * earlier version's op or field means, so a host reads every version from TESSERA_KERNEL_ABI_MIN_VERSION to
 * its TESSERA_KERNEL_ABI_VERSION, and refuses (one line naming the library) a library of another version
 * or a kernel for an op its library's version does not have. A package's kernel.json "abi_version" must be
 * a version the host reads too (pjrt implementations have no C signature: any op at any such version).
 *
 * Version 1: rms_norm, on float32 activations:
 *   y[r, :] = x[r, :] * (1 / sqrt(mean(x[r, :]^2) + eps)) * weight[:]   for r in [0, rows), groups of `dim`
 * computed in float32 as Hugging Face does (the built-in kernel: src/backends/cpu/kernels_norm.cpp). x and y
 * may be the same buffer (the cpu backend normalises in place when it can).
 *
 * Version 2 adds matmul (a linear layer), float32 activations and weights of the kernel's dtype:
 *   y[r, o] = sum_i x[r, i] * w[o, i]  (+ bias[o] when bias is not NULL)   r < rows, o < out, i < in
 * x: [rows, in] float32; w: [out, in] row-major, float32 (TESSERA_KERNEL_F32) or bfloat16 as uint16_t bits
 * (TESSERA_KERNEL_BF16); bias: [out] float32 or NULL; y: [rows, out] float32, never aliasing x or w. The
 * manifest's "shapes" keys "in" and "out" are these sizes. The backend calls it for prefill and decode
 * steps alike (rows = the step's tokens), for the matmul nodes whose weight dtype the kernel is registered
 * for; quantised (GGUF block) weights always take the built-in kernels.
 *
 * Kernels are called from one thread at a time per step, and from several threads for different steps:
 * keep no mutable global state. */
#ifndef TESSERA_KERNEL_ABI_H
#define TESSERA_KERNEL_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TESSERA_KERNEL_ABI_VERSION 2u
/* The oldest version a host of this header still loads. */
#define TESSERA_KERNEL_ABI_MIN_VERSION 1u

/* The op a kernel replaces (graph::Op in the library). */
typedef enum TesseraKernelOp {
  TESSERA_KERNEL_OP_RMS_NORM = 1, /* ABI version 1 */
  TESSERA_KERNEL_OP_MATMUL = 2    /* ABI version 2 */
} TesseraKernelOp;

/* The dtype a kernel is for (its weight's): rms_norm's weight and activations are float32 in every model;
 * matmul's weight is float32 or bfloat16 (activations float32). */
typedef enum TesseraKernelDtype {
  TESSERA_KERNEL_F32 = 1,
  TESSERA_KERNEL_BF16 = 2,
  TESSERA_KERNEL_F16 = 3
} TesseraKernelDtype;

/* The least instruction set a kernel needs; the backend takes, for an op and dtype, the kernel with the
 * highest ISA the running CPU has (TESSERA_ISA=... lowers it, as for the built-in kernels). */
typedef enum TesseraKernelIsa {
  TESSERA_KERNEL_ISA_SCALAR = 1,
  TESSERA_KERNEL_ISA_AVX2 = 2,
  TESSERA_KERNEL_ISA_AVX512 = 3,
  TESSERA_KERNEL_ISA_AVX512BF16 = 4
} TesseraKernelIsa;

/* x, y: [rows, dim] float32 row-major; weight: [dim] float32. */
typedef void (*TesseraRmsNormFn)(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                                 float* y);
/* ABI 2. x: [rows, in] float32; w: [out, in] in the kernel's dtype; bias: [out] float32 or NULL; y: [rows,
 * out]. */
typedef void (*TesseraMatmulFn)(const float* x, const void* w, const float* bias, int64_t rows, int64_t in,
                                int64_t out, float* y);

typedef struct TesseraKernel {
  uint32_t struct_size; /* sizeof(TesseraKernel) */
  uint32_t op;          /* TesseraKernelOp */
  uint32_t dtype;       /* TesseraKernelDtype */
  uint32_t isa;         /* TesseraKernelIsa */
  const char* name;     /* for reports and errors, e.g. "rms_norm_avx2" */
  void (*fn)(void); /* the op's function type, cast (RMS_NORM: TesseraRmsNormFn, MATMUL: TesseraMatmulFn) */
} TesseraKernel;

typedef struct TesseraKernelHost {
  uint32_t struct_size; /* sizeof(TesseraKernelHost) of the host */
  uint32_t abi_version; /* TESSERA_KERNEL_ABI_VERSION of the host: >= the library's (see Versions) */
  void* context;        /* the host's; pass `host` back unchanged */
  /* Adds a kernel (copied; `name` must stay valid while the library is loaded). 0 = accepted; otherwise the
   * host has recorded why and will refuse the package. */
  int (*add)(const struct TesseraKernelHost* host, const TesseraKernel* kernel);
} TesseraKernelHost;

typedef uint32_t (*TesseraKernelAbiVersionFn)(void);
typedef int (*TesseraRegisterKernelsFn)(const TesseraKernelHost* host);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_KERNEL_ABI_H */
