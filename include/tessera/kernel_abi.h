/* The C ABI of native cpu kernels loaded at run time (a kernel package's `cpu` implementation, see
 * README.md "Kernels loaded at run time"). A kernel author compiles a shared object against this header alone
 * (C99 or C++; no Tessera library to link) and exports two functions:
 *
 *   uint32_t tessera_kernel_abi_version(void);            returns TESSERA_KERNEL_ABI_VERSION
 *   int tessera_register_kernels(const TesseraKernelHost* host);
 *                                                          calls host->add(host, &kernel) once per kernel;
 *                                                          returns 0, or non-zero to refuse to load
 *
 * Tessera calls tessera_kernel_abi_version first and refuses a library built for another version before it
 * calls anything else. Every struct starts with struct_size (set it to sizeof the struct you were compiled
 * with), so later versions can append fields.
 *
 * Version 1 has one op with a C signature, rms_norm, on float32 activations:
 *   y[r, :] = x[r, :] * (1 / sqrt(mean(x[r, :]^2) + eps)) * weight[:]   for r in [0, rows), groups of `dim`
 * computed in float32 as Hugging Face does (the built-in kernel: src/backends/cpu/kernels_norm.cpp). x and y
 * may be the same buffer (the cpu backend normalises in place when it can). The function is called from one
 * thread at a time per step, and from several threads for different steps: keep no mutable global state. */
#ifndef TESSERA_KERNEL_ABI_H
#define TESSERA_KERNEL_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TESSERA_KERNEL_ABI_VERSION 1u

/* The op a kernel replaces (graph::Op in the library). */
typedef enum TesseraKernelOp { TESSERA_KERNEL_OP_RMS_NORM = 1 } TesseraKernelOp;

/* The dtype a kernel is for: rms_norm's weight and activations are float32 in every model. */
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

typedef struct TesseraKernel {
  uint32_t struct_size; /* sizeof(TesseraKernel) */
  uint32_t op;          /* TesseraKernelOp */
  uint32_t dtype;       /* TesseraKernelDtype */
  uint32_t isa;         /* TesseraKernelIsa */
  const char* name;     /* for reports and errors, e.g. "rms_norm_avx2" */
  void (*fn)(void);     /* the op's function type, cast (TESSERA_KERNEL_OP_RMS_NORM: TesseraRmsNormFn) */
} TesseraKernel;

typedef struct TesseraKernelHost {
  uint32_t struct_size; /* sizeof(TesseraKernelHost) of the host */
  uint32_t abi_version; /* TESSERA_KERNEL_ABI_VERSION of the host */
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
