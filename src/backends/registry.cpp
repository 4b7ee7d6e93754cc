// The backend table (registry.h): one row per backend kind; make_backend, "auto" and the lists of known and
// present devices all read it.
#include "backends/registry.h"

#include <algorithm>

#include "backends/pjrt/pjrt_backend.h"
#include "tessera/error.h"
#include "tessera/log.h"

namespace tessera::backends {
namespace {

using pjrt::PjrtSettings;

struct Kind {
  const char* name;  // the device name, or a prefix ending in ':' (pjrt:PATH)
  int auto_order;    // > 0: "auto" tries it, lowest first; 0: only when named
  // "" when the device is present here (nothing is started to find out), else why not ("no plugin", ...).
  std::string (*absent)(const std::string& device, const PjrtSettings&);
  std::unique_ptr<Backend> (*make)(const std::string& device, const BackendRequest&, const PjrtSettings&);
};

std::string always_present(const std::string&, const PjrtSettings&) { return ""; }

std::string pjrt_absent(const std::string& device, const PjrtSettings& s) {
  if (!pjrt::built_with_pjrt()) return "this build has no PJRT support";
  std::vector<std::string> looked;
  if (!pjrt::locate_plugin(device, looked, s)) return "no plugin";
  // libtpu without a chip spends minutes retrying a cloud metadata server: it is never started then.
  if (device == "tpu" && pjrt::find_tpu_chips(s.sysroot).count == 0) return "plugin found, no TPU chip";
  return "";
}

std::unique_ptr<Backend> make_cpu(const std::string&, const BackendRequest& r, const PjrtSettings&) {
  return make_cpu_backend(r.comm, r.cpu);
}

std::unique_ptr<Backend> make_pjrt(const std::string& device, const BackendRequest& r,
                                   const PjrtSettings& s) {
  PjrtOptions po;
  po.device_count = std::max(1, r.replicas);
  po.replicas = std::max(1, r.replicas);
  po.comm = r.comm;
  po.settings = s;
  po.kv_dtype = r.pjrt_kv_dtype;
  return make_pjrt_backend(device, po);
}

// Table order is the order devices are listed in; "auto" walks tpu, cuda, cpu.
const Kind kKinds[] = {
    {"cpu", 3, always_present, make_cpu}, {"xla-cpu", 0, pjrt_absent, make_pjrt},
    {"tpu", 1, pjrt_absent, make_pjrt},   {"cuda", 2, pjrt_absent, make_pjrt},
    {"pjrt:", 0, nullptr, make_pjrt},  // pjrt:/path/to/plugin.so
};

const Kind* find_kind(const std::string& device) {
  for (const Kind& k : kKinds) {
    const std::string name = k.name;
    if (name.back() == ':' ? device.size() > name.size() && device.rfind(name, 0) == 0 : device == name)
      return &k;
  }
  return nullptr;
}

std::string known_names() {
  std::string s;
  for (const Kind& k : kKinds)
    s += std::string(k.name) + (std::string(k.name).back() == ':' ? "/path/to/plugin.so" : "") + ", ";
  return s + "auto";
}

std::string joined(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// "auto": the first of the walked kinds that is present and starts, saying what it found.
std::unique_ptr<Backend> make_auto(const BackendRequest& r, const PjrtSettings& s) {
  std::vector<const Kind*> order;
  for (const Kind& k : kKinds)
    if (k.auto_order > 0) order.push_back(&k);
  std::sort(order.begin(), order.end(),
            [](const Kind* a, const Kind* b) { return a->auto_order < b->auto_order; });
  std::vector<std::string> found;
  for (const Kind* k : order) {
    const std::string why = k->absent(k->name, s);
    if (!why.empty()) {
      found.push_back(std::string(k->name) + ": " + why);
      continue;
    }
    if (k->make == make_cpu) {
      log_info("device auto: ", joined(found, "; "), found.empty() ? "" : "; ", "using cpu (native backend)");
      return k->make(k->name, r, s);
    }
    try {
      auto b = k->make(k->name, r, s);
      auto* p = dynamic_cast<const PjrtBackend*>(b.get());
      log_info("device auto: found ", k->name, " (", p ? p->platform().platform_name : b->name(), "); using ",
               k->name);
      return b;
    } catch (const Error& e) {
      found.push_back(std::string(k->name) + ": " + e.what());
    }
  }
  fail("device auto: no backend could be made (", joined(found, "; "), ")");
}

}  // namespace

bool is_known_device(const std::string& device) { return device == "auto" || find_kind(device) != nullptr; }

std::vector<std::string> available_devices(const PjrtSettings& settings) {
  std::vector<std::string> out;
  for (const Kind& k : kKinds)
    if (k.absent && k.absent(k.name, settings).empty()) out.push_back(k.name);
  return out;
}

std::unique_ptr<Backend> make_backend(const BackendRequest& r) {
  const PjrtSettings s = r.pjrt ? *r.pjrt : pjrt::default_pjrt_settings();
  if (r.replicas < 1) fail("backend request: replicas = ", r.replicas, " (expected >= 1)");
  const Kind* kind = find_kind(r.device);
  if (!kind && r.device != "auto") fail("unknown device '", r.device, "' (expected ", known_names(), ")");
  const bool tp = r.comm || r.replicas > 1;
  if (tp && (!kind || (kind->make == make_cpu && r.replicas > 1)))
    fail("tp_size ", r.comm ? r.comm->size() : r.replicas, " with device_map '", r.device,
         "': tensor parallelism runs on cpu, xla-cpu, tpu, cuda or pjrt:PATH devices (name one)");
  if (!kind) return make_auto(r, s);
  if (kind->make == make_cpu) return kind->make(r.device, r, s);
  try {
    return kind->make(r.device, r, s);
  } catch (const Error& e) {
    fail(e.what(), " (devices with a backend here: ", joined(available_devices(s), ", "), ")");
  }
}

}  // namespace tessera::backends
