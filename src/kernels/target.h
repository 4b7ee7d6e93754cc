// Where a backend takes kernel packages from (Backend::kernel_target; src/kernels/package.h). Its own small
// header so that backend.h does not pull in the package reader.
#pragma once
#include <string>
#include <utility>

#include "tessera/kernel_abi.h"

namespace tessera::kernels {

struct KernelSet;

struct KernelTarget {
  KernelTarget() = default;
  KernelTarget(std::string backend_, std::string platform_, int cpu_isa_ = TESSERA_KERNEL_ISA_SCALAR,
               std::string ffi_platform_ = "")
      : backend(std::move(backend_)),
        platform(std::move(platform_)),
        cpu_isa(cpu_isa_),
        ffi_platform(std::move(ffi_platform_)) {}

  std::string backend;                      // "cpu", "pjrt"; "" = this backend takes no kernels
  std::string platform;                     // cpu: host_platform(); pjrt: the plugin's platform name
  int cpu_isa = TESSERA_KERNEL_ISA_SCALAR;  // cpu: the instruction set kernels may use (TesseraKernelIsa)
  // pjrt: the platform name XLA FFI handlers are registered for through the plugin's PJRT_FFI_Extension
  // ("Host" for xla-cpu); "" = the plugin has no such extension (packages with FFI handlers are skipped).
  std::string ffi_platform;
};

}  // namespace tessera::kernels
