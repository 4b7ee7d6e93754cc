// Plugin loading, error conversion, RAII destroyers, client, buffers and compile (see pjrt_api.h).
#include "backends/pjrt/pjrt_api.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "backends/pjrt/pjrt_info.h"
#include "tessera/error.h"
#include "tessera/log.h"

#if TESSERA_HAVE_PJRT
namespace tessera::pjrt {
namespace {

const char* error_code_name(PJRT_Error_Code c) {
  static const char* kNames[] = {
      "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  const int i = static_cast<int>(c);
  return i >= 0 && i < static_cast<int>(sizeof kNames / sizeof kNames[0]) ? kNames[i] : "UNKNOWN_CODE";
}

std::string named_value_text(const PJRT_NamedValue& v) {
  switch (v.type) {
    case PJRT_NamedValue_kString:
      return std::string(v.string_value, v.value_size);
    case PJRT_NamedValue_kInt64:
      return std::to_string(v.int64_value);
    case PJRT_NamedValue_kInt64List: {
      std::string s = "[";
      for (size_t i = 0; i < v.value_size; ++i) s += (i ? ", " : "") + std::to_string(v.int64_array_value[i]);
      return s + "]";
    }
    case PJRT_NamedValue_kFloat:
      return std::to_string(v.float_value);
    case PJRT_NamedValue_kBool:
      return v.bool_value ? "true" : "false";
  }
  return "?";
}

// Protobuf wire format: just enough for CompileOptionsProto's varint and sub-message fields.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_varint_field(std::string& out, int field, uint64_t v) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | 0);  // wire type 0: varint
  put_varint(out, v);
}
void put_message_field(std::string& out, int field, const std::string& msg) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | 2);  // wire type 2: length-delimited
  put_varint(out, msg.size());
  out += msg;
}

// Plugins whose start-up call did not return in time: path -> the error that said so.
std::mutex& stuck_mutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::map<std::string, std::string>& stuck_plugins() {
  static auto* m = new std::map<std::string, std::string>;
  return *m;
}

// Exit without running what was registered before this (a stuck plugin's exit handlers may wait for the
// thread stuck inside it).
void exit_now(int status, void*) {
  std::fflush(nullptr);
  ::_exit(status);
}

std::string seconds_text(double s) {
  std::string t = std::to_string(s);
  t.erase(t.find_last_not_of('0') + 1);
  if (!t.empty() && t.back() == '.') t.pop_back();
  return t;
}

}  // namespace

PJRT_Error* Plugin::bounded(const char* what, std::function<PJRT_Error*()> call, double limit) const {
  struct Pending {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    PJRT_Error* err = nullptr;
  };
  if (!(limit > 0) || limit > 1e6)
    fail("PJRT settings: start_timeout_s = ", limit, " is not a number of seconds > 0 (at most 1e6)");
  auto pending = std::make_shared<Pending>();
  std::thread([pending, call = std::move(call)] {
    PJRT_Error* err = call();
    std::lock_guard<std::mutex> lock(pending->mu);
    pending->err = err;
    pending->done = true;
    pending->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(pending->mu);
  if (pending->cv.wait_for(lock, std::chrono::duration<double>(limit), [&] { return pending->done; }))
    return pending->err;
  const std::string msg = "PJRT plugin " + path_ + ": " + what + " did not return within " +
                          seconds_text(limit) +
                          " s (the plugin start-up timeout, start_timeout_s); the plugin is stuck and "
                          "cannot be used in this process";
  {
    std::lock_guard<std::mutex> g(stuck_mutex());
    if (stuck_plugins().empty()) ::on_exit(exit_now, nullptr);
    stuck_plugins().emplace(path_, msg);
  }
  fail(msg);
}

Plugin& Plugin::load(const std::string& path, const PjrtSettings& settings) {
  {
    std::lock_guard<std::mutex> g(stuck_mutex());
    auto stuck = stuck_plugins().find(path);
    if (stuck != stuck_plugins().end()) fail(stuck->second);
  }
  // Never unloaded (plugins own threads) and never destroyed: a backend or buffer that outlives main()
  // (a static in a test, say) still needs its plugin while static destructors run.
  static auto* mu = new std::mutex;
  static auto* loaded = new std::map<std::string, std::unique_ptr<Plugin>>;
  std::lock_guard<std::mutex> lock(*mu);
  auto it = loaded->find(path);
  if (it != loaded->end()) return *it->second;
  std::unique_ptr<Plugin> p(new Plugin(path, settings));
  return *loaded->emplace(path, std::move(p)).first->second;
}

namespace {
// Set once the process is exiting (an atexit handler registered when the first plugin loads, so it runs
// before the destructors of statics that came earlier, such as a cache of loaded models).
std::atomic<bool> g_exiting{false};
}  // namespace

Plugin::Plugin(std::string path, const PjrtSettings& settings) : path_(std::move(path)) {
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit([] { g_exiting.store(true); }); });
  // XLA plugins log INFO lines (e.g. "cpu_device_count set via create_options") to stderr; keep the CLI's
  // stderr for our own messages unless the caller asked for plugin logs or the level is set already (XLA
  // reads TF_CPP_MIN_LOG_LEVEL; it is set, never read, here).
  if (!settings.plugin_log) ::setenv("TF_CPP_MIN_LOG_LEVEL", "1", /*overwrite=*/0);
  handle_ = ::dlopen(path_.c_str(), RTLD_LOCAL | RTLD_NOW);
  if (!handle_) fail("cannot load PJRT plugin ", path_, ": ", ::dlerror());
  using GetApi = const PJRT_Api* (*)();
  auto get = reinterpret_cast<GetApi>(::dlsym(handle_, "GetPjrtApi"));
  if (!get) fail("PJRT plugin ", path_, " has no GetPjrtApi symbol (not a PJRT plugin?)");
  api_ = get();
  if (!api_) fail("PJRT plugin ", path_, ": GetPjrtApi returned null");
  // The version struct itself must be inside the table before we read it.
  if (offsetof(PJRT_Api, pjrt_api_version) + sizeof(PJRT_Api_Version) > api_->struct_size)
    fail("PJRT plugin ", path_, ": function table of ", api_->struct_size,
         " bytes is too small to hold a version");
  major_ = api_->pjrt_api_version.major_version;
  minor_ = api_->pjrt_api_version.minor_version;
  if (major_ != PJRT_API_MAJOR)
    fail("PJRT plugin ", path_, " implements PJRT API ", api_version(), ", this build speaks major version ",
         PJRT_API_MAJOR, " (", PJRT_API_MAJOR, ".", PJRT_API_MINOR, "); they are incompatible");
  // Minor skew is accepted both ways: an older plugin lacks newer functions (fn() checks each one against
  // struct_size) and reads only the args fields it knows; a newer plugin accepts our smaller struct_size.
  if (minor_ != PJRT_API_MINOR && settings.plugin_log)
    log_note("PJRT plugin ", path_, " is API ", api_version(), ", header is ", PJRT_API_MAJOR, ".",
             PJRT_API_MINOR, " (minor skew accepted)");

  if (PJRT_HAS(*this, Plugin_Initialize)) {
    auto init = std::make_shared<PJRT_Plugin_Initialize_Args>(make_args<PJRT_Plugin_Initialize_Args>());
    auto* fn = api_->PJRT_Plugin_Initialize;
    check(bounded(
              "PJRT_Plugin_Initialize", [init, fn] { return fn(init.get()); }, settings.start_timeout_s),
          "PJRT_Plugin_Initialize");
  }
  if (PJRT_HAS(*this, Plugin_Attributes)) {
    auto attrs = make_args<PJRT_Plugin_Attributes_Args>();
    PJRT_CALL(*this, Plugin_Attributes, attrs);
    for (size_t i = 0; i < attrs.num_attributes; ++i) {
      const PJRT_NamedValue& v = attrs.attributes[i];
      attributes_.emplace_back(std::string(v.name, v.name_size), named_value_text(v));
    }
  }
  if (settings.plugin_log) {
    std::string attrs;
    for (const auto& [k, v] : attributes_) attrs += (attrs.empty() ? "" : ", ") + k + " = " + v;
    log_note("loaded PJRT plugin ", path_, " (API ", api_version(), ")", attrs.empty() ? "" : ": ", attrs);
  }
}

const PJRT_Extension_Base* Plugin::extension(PJRT_Extension_Type type) const {
  if (offsetof(PJRT_Api, extension_start) + sizeof(void*) > api_->struct_size) return nullptr;
  int hops = 0;  // a chain is a handful of entries; a cycle in a broken plugin must not hang the load
  for (const PJRT_Extension_Base* e = api_->extension_start; e != nullptr && hops < 64; e = e->next, ++hops)
    if (e->type == type) return e;
  return nullptr;
}

std::string ffi_platform_name(const std::string& platform) {
  if (platform == "cpu") return "Host";
  if (platform == "cuda" || platform == "gpu") return "CUDA";
  if (platform == "rocm") return "ROCM";
  return platform;
}

void Plugin::register_ffi_handler(const std::string& target, void* handler, const std::string& platform,
                                  const std::string& what, const std::function<void()>& verify) {
  // Process-wide: the plugin's handler registry is a global of the plugin library.
  static std::mutex mu;
  static std::map<std::string, void*> registered;  // plugin file, platform, target -> handler
  std::lock_guard<std::mutex> lock(mu);
  // The file, not the name it was opened by: dlopen gives a library reached through a link or another
  // relative path the same handle, so the same registry.
  std::error_code ec;
  const std::filesystem::path file = std::filesystem::weakly_canonical(path_, ec);
  const std::string key = (ec ? path_ : file.string()) + "\n" + platform + "\n" + target;
  if (auto it = registered.find(key); it != registered.end()) {
    if (it->second == handler) return;
    fail(what, ": FFI target ", target, " is already registered for ", platform,
         " with another handler (another package's library)");
  }
  const auto* ext = reinterpret_cast<const FfiExtension*>(extension(PJRT_Extension_Type_FFI));
  if (!ext)
    fail(what, ": plugin ", path_, " (PJRT API ", api_version(),
         ") has no PJRT_FFI_Extension to register FFI handlers with");
  if (ext->base.struct_size < sizeof(FfiExtension) || ext->register_handler == nullptr)
    fail(what, ": plugin ", path_, "'s PJRT_FFI_Extension has struct_size ", ext->base.struct_size,
         " (expected at least ", sizeof(FfiExtension), " with register_handler set)");
  FfiRegisterHandlerArgs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = kFfiRegisterHandlerArgsSize;
  a.target_name = target.data();
  a.target_name_size = target.size();
  a.handler = handler;
  a.platform_name = platform.data();
  a.platform_name_size = platform.size();
  PJRT_Error* err = ext->register_handler(&a);
  if (err) {
    try {
      check(err, "PJRT_FFI_Extension.register_handler");
    } catch (const Error& e) {
      fail(what, ": registering FFI target ", target, " for ", platform, ": ", e.what());
    }
  }
  if (verify) verify();
  registered.emplace(key, handler);
}

void Plugin::destroy_error(PJRT_Error* err) const {
  if (!has(offsetof(PJRT_Api, PJRT_Error_Destroy))) return;
  auto d = make_args<PJRT_Error_Destroy_Args>();
  d.error = err;
  api_->PJRT_Error_Destroy(&d);
}

void Plugin::check(PJRT_Error* err, const char* what) const {
  if (!err) return;
  std::string message = "(no message)";
  const char* code = "UNKNOWN";
  if (has(offsetof(PJRT_Api, PJRT_Error_Message))) {
    auto m = make_args<PJRT_Error_Message_Args>();
    m.error = err;
    api_->PJRT_Error_Message(&m);
    message.assign(m.message, m.message_size);
  }
  if (has(offsetof(PJRT_Api, PJRT_Error_GetCode))) {
    auto c = make_args<PJRT_Error_GetCode_Args>();
    c.error = err;
    PJRT_Error* e2 = api_->PJRT_Error_GetCode(&c);
    if (e2 == nullptr)
      code = error_code_name(c.code);
    else
      destroy_error(e2);
  }
  destroy_error(err);
  fail(what, " failed (", code, "): ", message);
}

// Destroyers run from destructors: an error is logged as a warning, never thrown.
#define TESSERA_PJRT_DESTROYER(func, Type, name, field) \
  void func(const Plugin& p, Type* h) {                 \
    try {                                               \
      auto a = make_args<PJRT_##name##_Args>();         \
      a.field = h;                                      \
      PJRT_CALL(p, name, a);                            \
    } catch (const Error& e) {                          \
      log_warning(e.what());                            \
    }                                                   \
  }
TESSERA_PJRT_DESTROYER(destroy_client, PJRT_Client, Client_Destroy, client)
TESSERA_PJRT_DESTROYER(destroy_buffer, PJRT_Buffer, Buffer_Destroy, buffer)
TESSERA_PJRT_DESTROYER(destroy_event, PJRT_Event, Event_Destroy, event)
// Executables still alive when the process exits are left to the OS: the XLA CPU plugin's executable teardown
// (LLVM's JIT unregistering its code from the GDB JIT interface) was seen to stall for over ten minutes at
// exit under load (a CI run: two test processes that had passed never ended), and nothing needs it then.
void destroy_loaded_executable(const Plugin& p, PJRT_LoadedExecutable* h) {
  if (g_exiting.load()) return;
  try {
    auto a = make_args<PJRT_LoadedExecutable_Destroy_Args>();
    a.executable = h;
    PJRT_CALL(p, LoadedExecutable_Destroy, a);
  } catch (const Error& e) {
    log_warning(e.what());
  }
}
TESSERA_PJRT_DESTROYER(destroy_executable, PJRT_Executable, Executable_Destroy, executable)
#undef TESSERA_PJRT_DESTROYER

void await(const Plugin& p, EventHandle e, const char* what) {
  if (!e) return;
  auto a = make_args<PJRT_Event_Await_Args>();
  a.event = e.get();
  try {
    PJRT_CALL(p, Event_Await, a);
  } catch (const Error& err) {
    fail(what, ": ", err.what());
  }
}

Client::Client(const Plugin& p, int device_count, double start_timeout_s) : p_(&p) {
  // Owned with the thread that makes the call: it may outlive this constructor (see Plugin::bounded).
  struct Create {
    PJRT_Client_Create_Args a = make_args<PJRT_Client_Create_Args>();
    PJRT_NamedValue opt{};
  };
  auto c = std::make_shared<Create>();
  c->opt = make_int64_option("cpu_device_count", device_count);
  if (device_count > 0) {
    c->a.create_options = &c->opt;
    c->a.num_options = 1;
  }
  auto* create = p.fn<PJRT_Client_Create>(offsetof(PJRT_Api, PJRT_Client_Create), "PJRT_Client_Create");
  p.check(p.bounded(
              "PJRT_Client_Create", [c, create] { return create(&c->a); }, start_timeout_s),
          "PJRT_Client_Create");
  client_ = ClientHandle(&p, c->a.client);
  auto d = make_args<PJRT_Client_AddressableDevices_Args>();
  d.client = c->a.client;
  PJRT_CALL(p, Client_AddressableDevices, d);
  devices_.assign(d.addressable_devices, d.addressable_devices + d.num_addressable_devices);
  if (devices_.empty()) fail("PJRT plugin ", p.path(), ": the client has no addressable devices");
}

std::string Client::platform_name() const {
  auto a = make_args<PJRT_Client_PlatformName_Args>();
  a.client = get();
  PJRT_CALL(*p_, Client_PlatformName, a);
  return std::string(a.platform_name, a.platform_name_size);
}

std::string Client::platform_version() const {
  auto a = make_args<PJRT_Client_PlatformVersion_Args>();
  a.client = get();
  PJRT_CALL(*p_, Client_PlatformVersion, a);
  return std::string(a.platform_version, a.platform_version_size);
}

std::vector<DeviceInfo> Client::describe_devices() const {
  std::vector<DeviceInfo> out;
  for (PJRT_Device* dev : devices_) {
    auto g = make_args<PJRT_Device_GetDescription_Args>();
    g.device = dev;
    PJRT_CALL(*p_, Device_GetDescription, g);
    DeviceInfo info;
    auto id = make_args<PJRT_DeviceDescription_Id_Args>();
    id.device_description = g.device_description;
    PJRT_CALL(*p_, DeviceDescription_Id, id);
    info.id = id.id;
    auto kind = make_args<PJRT_DeviceDescription_Kind_Args>();
    kind.device_description = g.device_description;
    PJRT_CALL(*p_, DeviceDescription_Kind, kind);
    info.kind.assign(kind.device_kind, kind.device_kind_size);
    auto str = make_args<PJRT_DeviceDescription_ToString_Args>();
    str.device_description = g.device_description;
    PJRT_CALL(*p_, DeviceDescription_ToString, str);
    info.description.assign(str.to_string, str.to_string_size);
    out.push_back(std::move(info));
  }
  return out;
}

BufferHandle Client::upload(const void* data, PJRT_Buffer_Type type, const std::vector<int64_t>& dims,
                            size_t device) const {
  TS_ASSERT(device < devices_.size(), "device ", device, " of ", devices_.size());
  auto a = make_args<PJRT_Client_BufferFromHostBuffer_Args>();
  a.client = get();
  a.data = data;
  a.type = type;
  a.dims = dims.data();
  a.num_dims = dims.size();
  a.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
  a.device = devices_[device];
  PJRT_CALL(*p_, Client_BufferFromHostBuffer, a);
  BufferHandle buf(p_, a.buffer);
  await(*p_, EventHandle(p_, a.done_with_host_buffer), "host-to-device transfer");
  return buf;
}

LoadedExecutableHandle Client::compile(const std::string& mlir, const std::string& options) const {
  PJRT_Program prog = make_program();
  std::string code = mlir;  // PJRT_Program.code is a non-const char*
  prog.code = code.data();
  prog.code_size = code.size();
  static const char kFormat[] = "mlir";
  prog.format = kFormat;
  prog.format_size = sizeof kFormat - 1;
  auto a = make_args<PJRT_Client_Compile_Args>();
  a.client = get();
  a.program = &prog;
  a.compile_options = options.data();
  a.compile_options_size = options.size();
  PJRT_CALL(*p_, Client_Compile, a);
  return LoadedExecutableHandle(p_, a.executable);
}

LoadedExecutableHandle Client::deserialize(const std::string& bytes) const {
  auto a = make_args<PJRT_Executable_DeserializeAndLoad_Args>();
  a.client = get();
  a.serialized_executable = bytes.data();
  a.serialized_executable_size = bytes.size();
  PJRT_CALL(*p_, Executable_DeserializeAndLoad, a);
  return LoadedExecutableHandle(p_, a.loaded_executable);
}

std::string serialize(const Plugin& p, PJRT_LoadedExecutable* exe) {
  auto ge = make_args<PJRT_LoadedExecutable_GetExecutable_Args>();
  ge.loaded_executable = exe;
  PJRT_CALL(p, LoadedExecutable_GetExecutable, ge);
  ExecutableHandle owned(&p, ge.executable);
  auto a = make_args<PJRT_Executable_Serialize_Args>();
  a.executable = owned.get();
  PJRT_CALL(p, Executable_Serialize, a);
  std::string out(a.serialized_bytes, a.serialized_bytes_size);
  if (a.serialized_executable_deleter) a.serialized_executable_deleter(a.serialized_executable);
  return out;
}

void download(const Plugin& p, PJRT_Buffer* buf, void* dst, size_t bytes) {
  auto a = make_args<PJRT_Buffer_ToHostBuffer_Args>();
  a.src = buf;
  a.dst = nullptr;  // first call: ask for the size
  PJRT_CALL(p, Buffer_ToHostBuffer, a);
  if (a.dst_size != bytes) fail("device-to-host copy: buffer holds ", a.dst_size, " bytes, expected ", bytes);
  a = make_args<PJRT_Buffer_ToHostBuffer_Args>();
  a.src = buf;
  a.dst = dst;
  a.dst_size = bytes;
  PJRT_CALL(p, Buffer_ToHostBuffer, a);
  await(p, EventHandle(&p, a.event), "device-to-host transfer");
}

std::string compile_options_proto(int replicas, int partitions, const std::vector<int64_t>& replica_devices) {
  // ExecutableBuildOptionsProto: num_replicas = 4, num_partitions = 5, device_assignment = 9.
  std::string build;
  put_varint_field(build, 4, static_cast<uint64_t>(replicas));
  put_varint_field(build, 5, static_cast<uint64_t>(partitions));
  if (!replica_devices.empty()) {
    TS_ASSERT(static_cast<int>(replica_devices.size()) == replicas && partitions == 1,
              "device assignment of ", replica_devices.size(), " for ", replicas, "x", partitions);
    // DeviceAssignmentProto: replica_count = 1, computation_count = 2, computation_devices = 3
    // (ComputationDevice: replica_device_ids = 1, repeated int64, packed).
    std::string ids;
    for (int64_t d : replica_devices) put_varint(ids, static_cast<uint64_t>(d));
    std::string computation;
    put_message_field(computation, 1, ids);
    std::string assignment;
    put_varint_field(assignment, 1, static_cast<uint64_t>(replicas));
    put_varint_field(assignment, 2, 1);
    put_message_field(assignment, 3, computation);
    put_message_field(build, 9, assignment);
  }
  // CompileOptionsProto: executable_build_options = 3.
  std::string options;
  put_message_field(options, 3, build);
  return options;
}

std::vector<std::vector<BufferHandle>> execute(const Plugin& p, PJRT_LoadedExecutable* exe,
                                               const std::vector<std::vector<PJRT_Buffer*>>& args,
                                               int num_results) {
  const size_t devices = args.size();
  TS_ASSERT(devices > 0, "execute on no device");
  std::vector<std::vector<PJRT_Buffer*>> outs(devices,
                                              std::vector<PJRT_Buffer*>(static_cast<size_t>(num_results)));
  std::vector<PJRT_Buffer**> out_lists(devices);
  std::vector<PJRT_Buffer* const*> arg_lists(devices);
  for (size_t d = 0; d < devices; ++d) {
    TS_ASSERT(args[d].size() == args[0].size(), "device ", d, ": ", args[d].size(),
              " arguments, device 0 has ", args[0].size());
    out_lists[d] = outs[d].data();
    arg_lists[d] = args[d].data();
  }
  std::vector<PJRT_Event*> done(devices, nullptr);
  PJRT_ExecuteOptions opts = make_execute_options();
  auto ex = make_args<PJRT_LoadedExecutable_Execute_Args>();
  ex.executable = exe;
  ex.options = &opts;
  ex.argument_lists = arg_lists.data();
  ex.num_devices = devices;
  ex.num_args = args[0].size();
  ex.output_lists = out_lists.data();
  ex.device_complete_events = done.data();
  PJRT_CALL(p, LoadedExecutable_Execute, ex);
  // Take ownership of every output and event at once, then wait for every device.
  std::vector<std::vector<BufferHandle>> results(devices);
  std::vector<EventHandle> events;
  for (size_t d = 0; d < devices; ++d) {
    for (PJRT_Buffer* b : outs[d]) results[d].emplace_back(&p, b);
    events.emplace_back(&p, done[d]);
  }
  for (auto& e : events) await(p, std::move(e), "PJRT execute");
  return results;
}

PlatformInfo describe_platform(const std::string& device, int device_count, const PjrtSettings& settings) {
  const std::string path = find_plugin(device, settings);
  Plugin& plugin = Plugin::load(path, settings);
  // Only XLA's CPU plugin understands "cpu_device_count"; other plugins may reject unknown options.
  Client client(plugin, device == "xla-cpu" ? device_count : 0, settings.start_timeout_s);
  PlatformInfo info;
  info.device = device;
  info.plugin_path = path;
  info.api_version = plugin.api_version();
  info.header_api_version = std::to_string(PJRT_API_MAJOR) + "." + std::to_string(PJRT_API_MINOR);
  info.platform_name = client.platform_name();
  info.platform_version = client.platform_version();
  info.attributes = plugin.attributes();
  info.devices = client.describe_devices();
  return info;
}

}  // namespace tessera::pjrt

#else  // !TESSERA_HAVE_PJRT

namespace tessera::pjrt {
PlatformInfo describe_platform(const std::string& device, int, const PjrtSettings&) {
  fail("device '", device,
       "': this build has no PJRT support: run scripts/setup.sh (installs xla-cpu-pjrt) and rebuild");
}
}  // namespace tessera::pjrt

#endif
