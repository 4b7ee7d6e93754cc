// Where backends are found: one table with a row per backend kind (the native cpu backend, each PJRT device
// name, pjrt:PATH), which make_backend looks names up in and "auto" walks (tpu, then cuda, then cpu). The
// runtime asks for a backend by device name and never names a backend class itself.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/communicator.h"
#include "backends/pjrt/pjrt_info.h"

namespace tessera::backends {

struct BackendRequest {
  // cpu, xla-cpu, tpu, cuda, pjrt:/path/to/plugin.so, or auto (the first of tpu, cuda, cpu that is present
  // here and starts; what it found and chose is logged with tessera::log_info, never a silent cpu fallback).
  std::string device = "cpu";
  // Tensor parallelism over processes (one rank each; native cpu, or a PJRT device per rank running its
  // graphs in segments around host collectives). nullptr: one rank.
  std::shared_ptr<Communicator> comm = nullptr;
  // Tensor parallelism over devices of this one process (a PJRT device: one program on `replicas` devices).
  int replicas = 1;
  CpuBackendOptions cpu = {};  // the native cpu backend's options (also what auto falls back to)
  // PJRT devices: plugin search, start-up timeout, dumps. Unset: pjrt::default_pjrt_settings().
  std::optional<pjrt::PjrtSettings> pjrt = std::nullopt;
  DType pjrt_kv_dtype = DType::F32;  // PJRT devices' KV cache dtype (PjrtOptions::kv_dtype)
};

// The backend for `request.device`. Throws Error for an unknown name (listing the known ones), for tensor
// parallelism on a device that has none, or when the device cannot be started (the plugin's error, then
// the devices that do have a backend here).
std::unique_ptr<Backend> make_backend(const BackendRequest& request);

// True for every name make_backend accepts (whether or not that device is present here).
bool is_known_device(const std::string& device);

// The device names of the table whose backend is present here (cpu always; a PJRT device when its plugin is
// installed, and for tpu a chip is present), table order. Nothing is started.
std::vector<std::string> available_devices(const pjrt::PjrtSettings& settings);

}  // namespace tessera::backends
