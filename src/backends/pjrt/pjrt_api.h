// The thin C++ layer over the PJRT C API (internal to src/backends/pjrt; needs pjrt_c_api.h, so it is
// only included when TESSERA_HAVE_PJRT). What it guarantees:
//  - the plugin is dlopen()ed, never linked, and never unloaded (plugins keep threads and globals);
//  - every function pointer is checked against the plugin's table size before it is called
//    (PJRT_CALL), so an older plugin that lacks a function gives an Error, not a jump into garbage;
//  - every args struct is zero-filled with our header's struct_size (make_args);
//  - every PJRT_Error is turned into tessera::Error and destroyed in one place (Plugin::check);
//  - every PJRT object the caller owns lives in an RAII handle.
#pragma once
#if TESSERA_HAVE_PJRT
#include <pjrt_c_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/pjrt/pjrt_info.h"
#include "tessera/error.h"

namespace tessera::pjrt {

// Zero-filled args struct with struct_size set to this header's size for it.
template <class Args>
Args make_args();

#define TESSERA_PJRT_ARGS(X)              \
  template <>                             \
  inline X##_Args make_args<X##_Args>() { \
    X##_Args a;                           \
    std::memset(&a, 0, sizeof a);         \
    a.struct_size = X##_Args_STRUCT_SIZE; \
    return a;                             \
  }
TESSERA_PJRT_ARGS(PJRT_Error_Destroy)
TESSERA_PJRT_ARGS(PJRT_Error_Message)
TESSERA_PJRT_ARGS(PJRT_Error_GetCode)
TESSERA_PJRT_ARGS(PJRT_Plugin_Initialize)
TESSERA_PJRT_ARGS(PJRT_Plugin_Attributes)
TESSERA_PJRT_ARGS(PJRT_Event_Destroy)
TESSERA_PJRT_ARGS(PJRT_Event_Await)
TESSERA_PJRT_ARGS(PJRT_Client_Create)
TESSERA_PJRT_ARGS(PJRT_Client_Destroy)
TESSERA_PJRT_ARGS(PJRT_Client_PlatformName)
TESSERA_PJRT_ARGS(PJRT_Client_PlatformVersion)
TESSERA_PJRT_ARGS(PJRT_Client_AddressableDevices)
TESSERA_PJRT_ARGS(PJRT_Client_Compile)
TESSERA_PJRT_ARGS(PJRT_Client_BufferFromHostBuffer)
TESSERA_PJRT_ARGS(PJRT_Device_GetDescription)
TESSERA_PJRT_ARGS(PJRT_DeviceDescription_Id)
TESSERA_PJRT_ARGS(PJRT_DeviceDescription_Kind)
TESSERA_PJRT_ARGS(PJRT_DeviceDescription_ToString)
TESSERA_PJRT_ARGS(PJRT_Executable_Destroy)
TESSERA_PJRT_ARGS(PJRT_Executable_NumOutputs)
TESSERA_PJRT_ARGS(PJRT_Executable_Serialize)
TESSERA_PJRT_ARGS(PJRT_Executable_DeserializeAndLoad)
TESSERA_PJRT_ARGS(PJRT_LoadedExecutable_Destroy)
TESSERA_PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable)
TESSERA_PJRT_ARGS(PJRT_LoadedExecutable_Execute)
TESSERA_PJRT_ARGS(PJRT_Buffer_Destroy)
TESSERA_PJRT_ARGS(PJRT_Buffer_ToHostBuffer)
TESSERA_PJRT_ARGS(PJRT_Buffer_IsDeleted)
TESSERA_PJRT_ARGS(PJRT_Buffer_UnsafePointer)
#undef TESSERA_PJRT_ARGS

inline PJRT_ExecuteOptions make_execute_options() {
  PJRT_ExecuteOptions o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  return o;
}
inline PJRT_Program make_program() {
  PJRT_Program p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = PJRT_Program_STRUCT_SIZE;
  return p;
}
inline PJRT_NamedValue make_int64_option(const char* name, int64_t value) {
  PJRT_NamedValue v;
  std::memset(&v, 0, sizeof v);
  v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  v.name = name;
  v.name_size = std::strlen(name);
  v.type = PJRT_NamedValue_kInt64;
  v.int64_value = value;
  v.value_size = 1;
  return v;
}

// A loaded plugin: the library handle and its function table. Process-wide and never unloaded.
class Plugin {
 public:
  // Loads (once per path) and initialises the plugin (within settings.start_timeout_s; settings.plugin_log:
  // the plugin's own logs and a note naming it and its attributes); throws Error naming the path on failure.
  static Plugin& load(const std::string& path, const PjrtSettings& settings);

  const std::string& path() const { return path_; }
  int api_major() const { return major_; }
  int api_minor() const { return minor_; }
  std::string api_version() const { return std::to_string(major_) + "." + std::to_string(minor_); }
  const std::vector<std::pair<std::string, std::string>>& attributes() const { return attributes_; }

  // The function at `offset` in PJRT_Api, after checking the plugin's table holds it.
  template <class Fn>
  Fn* fn(size_t offset, const char* name) const {
    if (offset + sizeof(Fn*) > api_->struct_size)
      fail("plugin ", path_, " (PJRT API ", api_version(), ") lacks ", name);
    Fn* f = nullptr;
    std::memcpy(&f, reinterpret_cast<const char*>(api_) + offset, sizeof f);
    if (!f) fail("plugin ", path_, " (PJRT API ", api_version(), ") lacks ", name, " (null entry)");
    return f;
  }
  bool has(size_t offset) const {
    if (offset + sizeof(void*) > api_->struct_size) return false;
    void* f = nullptr;
    std::memcpy(&f, reinterpret_cast<const char*>(api_) + offset, sizeof f);
    return f != nullptr;
  }

  // The extension of `type` on the plugin's extension chain (PJRT_Api::extension_start); nullptr if none.
  const PJRT_Extension_Base* extension(PJRT_Extension_Type type) const;
  // Registers the typed XLA FFI handler `handler` (an XLA_FFI_Handler*) for custom-call `target` on XLA
  // platform `platform` ("Host" for xla-cpu) through the plugin's PJRT_FFI_Extension. Registering the same
  // target and platform again with the same handler does nothing; with another handler, or on a plugin
  // without the extension, throws Error naming `what` (the package and library). `verify` runs after a new
  // registration (it throws if the plugin did not take it); only then is the registration remembered.
  void register_ffi_handler(const std::string& target, void* handler, const std::string& platform,
                            const std::string& what, const std::function<void()>& verify);
  // Runs a start-up call (`what`, e.g. PJRT_Client_Create) on a thread of its own and waits at most
  // `limit_s` seconds (PjrtSettings::start_timeout_s) for it. Past that it throws Error naming the plugin,
  // the call and the timeout; the thread stays inside the plugin, which is then unusable in this process
  // (every later load of it fails at once), and the process's exit skips the exit handlers registered before
  // (the plugin's could wait for that thread). Returns what the call returned.
  PJRT_Error* bounded(const char* what, std::function<PJRT_Error*()> call, double limit_s) const;

  // Turns a non-null error into tessera::Error("<what>: <message> (<code>)") after destroying it.
  void check(PJRT_Error* err, const char* what) const;
  void destroy_error(PJRT_Error* err) const;

 private:
  Plugin(std::string path, const PjrtSettings& settings);
  std::string path_;
  void* handle_ = nullptr;
  const PJRT_Api* api_ = nullptr;
  int major_ = 0, minor_ = 0;
  std::vector<std::pair<std::string, std::string>> attributes_;
};

// Calls PJRT_<name>(&args) on `plugin`, checking the table first and the returned error after.
// The PJRT FFI extension (PJRT_Extension_Type_FFI), declared here since no wheel ships its header. The
// layouts are those of xla-cpu-pjrt 0.0.1, read from its code (its register_handler checks struct_size >= 52
// and reads the fields at these offsets): no api_version field (the handler is always a typed XLA FFI
// handler, registered as the execute stage of a bundle), unlike an XLA source tree that has one after
// target_name_size. The extension reports struct_size 48.
struct FfiRegisterHandlerArgs {
  size_t struct_size;       // kFfiRegisterHandlerArgsSize
  const char* target_name;  // 8
  size_t target_name_size;  // 16
  void* handler;            // 24: XLA_FFI_Handler* (null is refused)
  const char* platform_name;
  size_t platform_name_size;
  uint32_t traits;  // 48: bit 0 command-buffer compatible (0 here)
};
inline constexpr size_t kFfiRegisterHandlerArgsSize =
    offsetof(FfiRegisterHandlerArgs, traits) + sizeof(uint32_t);
struct FfiExtension {
  PJRT_Extension_Base base;
  void* type_id_register;  // not used by Tessera
  void* user_data_add;     // not used by Tessera
  PJRT_Error* (*register_handler)(FfiRegisterHandlerArgs* args);
};
static_assert(sizeof(FfiExtension) == 48 && kFfiRegisterHandlerArgsSize == 52);

// The XLA platform name FFI handlers are registered for on a plugin of PJRT platform `platform`
// ("cpu" -> "Host", "cuda" -> "CUDA", "rocm" -> "ROCM"; others unchanged).
std::string ffi_platform_name(const std::string& platform);

#define PJRT_CALL(plugin, name, args)                                                               \
  (plugin).check((plugin).fn<PJRT_##name>(offsetof(PJRT_Api, PJRT_##name), "PJRT_" #name)(&(args)), \
                 "PJRT_" #name)
#define PJRT_HAS(plugin, name) (plugin).has(offsetof(PJRT_Api, PJRT_##name))

// Owning handle for one PJRT object; `Destroy` frees it (errors on destruction are logged, not thrown).
template <class T, void (*Destroy)(const Plugin&, T*)>
class Handle {
 public:
  Handle() = default;
  Handle(const Plugin* p, T* h) : p_(p), h_(h) {}
  Handle(Handle&& o) noexcept : p_(o.p_), h_(std::exchange(o.h_, nullptr)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = o.p_;
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  T* get() const { return h_; }
  T* release() { return std::exchange(h_, nullptr); }
  explicit operator bool() const { return h_ != nullptr; }
  void reset() {
    if (h_) Destroy(*p_, std::exchange(h_, nullptr));
  }

 private:
  const Plugin* p_ = nullptr;
  T* h_ = nullptr;
};

void destroy_client(const Plugin& p, PJRT_Client* c);
void destroy_buffer(const Plugin& p, PJRT_Buffer* b);
void destroy_event(const Plugin& p, PJRT_Event* e);
void destroy_loaded_executable(const Plugin& p, PJRT_LoadedExecutable* e);
void destroy_executable(const Plugin& p, PJRT_Executable* e);

using ClientHandle = Handle<PJRT_Client, destroy_client>;
using BufferHandle = Handle<PJRT_Buffer, destroy_buffer>;
using EventHandle = Handle<PJRT_Event, destroy_event>;
using LoadedExecutableHandle = Handle<PJRT_LoadedExecutable, destroy_loaded_executable>;
using ExecutableHandle = Handle<PJRT_Executable, destroy_executable>;

// Blocks until `e` is ready; throws its error (naming `what`). The event is destroyed either way.
void await(const Plugin& p, EventHandle e, const char* what);

// A client with its addressable devices.
class Client {
 public:
  // device_count > 0 asks the plugin for that many devices ("cpu_device_count"; XLA CPU only). Creating the
  // client may take at most start_timeout_s (Plugin::bounded).
  Client(const Plugin& p, int device_count, double start_timeout_s);

  const Plugin& plugin() const { return *p_; }
  PJRT_Client* get() const { return client_.get(); }
  const std::vector<PJRT_Device*>& devices() const { return devices_; }
  std::string platform_name() const;
  std::string platform_version() const;
  std::vector<DeviceInfo> describe_devices() const;

  // Uploads a dense row-major host array to device `device` and waits until the host copy is done.
  BufferHandle upload(const void* data, PJRT_Buffer_Type type, const std::vector<int64_t>& dims,
                      size_t device = 0) const;
  // Compiles StableHLO text with serialized CompileOptionsProto bytes.
  LoadedExecutableHandle compile(const std::string& mlir, const std::string& options) const;
  // Loads bytes made by serialize() (same plugin build only; anything else is an Error from the plugin).
  LoadedExecutableHandle deserialize(const std::string& bytes) const;

 private:
  const Plugin* p_;
  ClientHandle client_;
  std::vector<PJRT_Device*> devices_;  // owned by the client
};

// The plugin's serialization of a compiled executable (PJRT_Executable_Serialize); opaque, not portable
// across plugin versions.
std::string serialize(const Plugin& p, PJRT_LoadedExecutable* exe);

// Copies a device buffer into `dst` (exactly `bytes` bytes) and waits.
void download(const Plugin& p, PJRT_Buffer* buf, void* dst, size_t bytes);

// Serialized xla.CompileOptionsProto for `replicas` x `partitions` (hand-encoded protobuf; see pjrt.md).
// `replica_devices` (one device id per replica, replica order), when given, becomes a static
// DeviceAssignmentProto of one computation: replica r runs on device replica_devices[r].
std::string compile_options_proto(int replicas, int partitions,
                                  const std::vector<int64_t>& replica_devices = {});

// Executes `exe` on `args.size()` devices (argument_lists[d] = args[d]) and returns every result of every
// device ([device][result], owned). Waits for all devices.
std::vector<std::vector<BufferHandle>> execute(const Plugin& p, PJRT_LoadedExecutable* exe,
                                               const std::vector<std::vector<PJRT_Buffer*>>& args,
                                               int num_results);

}  // namespace tessera::pjrt
#endif  // TESSERA_HAVE_PJRT
