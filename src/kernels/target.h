// Where a backend takes kernel packages from (Backend::kernel_target; src/kernels/package.h). Its own small
// header so that backend.h does not pull in the package reader.
#pragma once
#include <string>

#include "tessera/kernel_abi.h"

namespace tessera::kernels {

struct KernelSet;

struct KernelTarget {
  std::string backend;                      // "cpu", "pjrt"; "" = this backend takes no kernels
  std::string platform;                     // cpu: host_platform(); pjrt: the plugin's platform name
  int cpu_isa = TESSERA_KERNEL_ISA_SCALAR;  // cpu: the instruction set kernels may use (TesseraKernelIsa)
};

}  // namespace tessera::kernels
