// Kernel packages: the manifest reader, the cpu library loader and the choice of what applies (package.h).
#include "kernels/package.h"

#include <dlfcn.h>
#include <sys/utsname.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "runtime/compile_cache.h"
#include "io/json_util.h"
#include "tessera/error.h"
#include "tessera/log.h"

namespace tessera::kernels {
namespace {

namespace fs = std::filesystem;
using graph::Op;

constexpr size_t kMaxManifestBytes = size_t{1} << 20;
constexpr size_t kMaxImplementationBytes = size_t{256} << 20;

std::string list(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// An attribute value as JSON writes it (64, 1e-06).
std::string number(double v) {
  return nlohmann::json(v == static_cast<double>(static_cast<int64_t>(v))
                            ? nlohmann::json(static_cast<int64_t>(v))
                            : nlohmann::json(v))
      .dump();
}

std::string values(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + number(v[i]);
  return s + "]";
}

// The manifest's reader: every error names the file and the field.
class Manifest {
 public:
  Manifest(std::string path, nlohmann::json j) : path_(std::move(path)), j_(std::move(j)) {}

  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    fail("kernel package ", path_, ": field '", field, "' ", what);
  }
  const nlohmann::json& required(const char* key) const {
    if (!j_.contains(key)) bad(key, "is missing");
    return j_.at(key);
  }
  std::string string(const nlohmann::json& v, const std::string& field) const {
    if (!v.is_string() || v.get<std::string>().empty()) bad(field, "must be a non-empty string");
    return v.get<std::string>();
  }
  const nlohmann::json& array(const nlohmann::json& v, const std::string& field) const {
    if (!v.is_array()) bad(field, "must be an array");
    return v;
  }
  void only_keys(const nlohmann::json& obj, const std::vector<std::string>& keys,
                 const std::string& where) const {
    for (const auto& [k, v] : obj.items())
      if (std::find(keys.begin(), keys.end(), k) == keys.end())
        bad(where.empty() ? k : where + "." + k,
            "is not a manifest field (expected one of " + list(keys) + ")");
  }
  const nlohmann::json& json() const { return j_; }

 private:
  std::string path_;
  nlohmann::json j_;
};

// A file named by the manifest: a plain relative path inside the package folder.
std::string package_file(const Manifest& m, const std::string& dir, const std::string& name,
                         const std::string& field) {
  const fs::path p(name);
  if (p.is_absolute() || name.find("..") != std::string::npos)
    m.bad(field, "'" + name + "' must be a path inside the package folder");
  const std::string full = (fs::path(dir) / p).string();
  std::error_code ec;
  if (!fs::is_regular_file(full, ec)) m.bad(field, "'" + name + "': no such file in " + dir);
  return full;
}

}  // namespace

const std::vector<OpSpec>& known_ops() {
  static const std::vector<OpSpec> ops = {
      {"rms_norm", Op::RmsNorm, {"dim", "eps"}, 2, 2},  // (x, weight)
      {"matmul", Op::MatMul, {"in", "out"}, 2, 3},      // (x, weight, bias?)
      {"attention",
       Op::Attention,
       {"heads", "kv_heads", "head_dim"},
       5,
       6},  // (q, k, v, slots, kv_begin, rows?)
  };
  return ops;
}

std::map<std::string, double> node_attributes(const graph::Graph& g, const graph::Node& n) {
  auto d = [](int64_t v) { return static_cast<double>(v); };
  switch (n.op) {
    case Op::RmsNorm:
      return {{"dim", d(n.dim)}, {"eps", static_cast<double>(n.eps)}};
    case Op::MatMul: {
      const graph::Node& w = g.at(n.inputs[1]);
      return {{"in", d(w.shape[1])}, {"out", d(w.shape[0])}};
    }
    case Op::Attention:
      return {{"heads", d(n.heads)}, {"kv_heads", d(n.kv_heads)}, {"head_dim", d(n.head_dim)}};
    default:
      return {};
  }
}

DType node_dtype(const graph::Graph& g, const graph::Node& n) {
  if ((n.op == Op::RmsNorm || n.op == Op::MatMul) && n.inputs.size() > 1) return g.at(n.inputs[1]).dtype;
  return g.key.dtype;
}

std::string host_platform() {
  utsname u{};
  if (uname(&u) != 0) return "unknown";
  std::string os = u.sysname;
  std::transform(os.begin(), os.end(), os.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return os + "-" + u.machine;
}

bool KernelPackage::accepts(const graph::Graph& g, const graph::Node& n, std::string* why) const {
  if (op == nullptr || n.op != op->op) {
    if (why) *why = std::string("op ") + graph::op_name(n.op);
    return false;
  }
  const DType dt = node_dtype(g, n);
  if (!dtypes.empty() && std::find(dtypes.begin(), dtypes.end(), dt) == dtypes.end()) {
    if (why) {
      std::vector<std::string> names;
      for (DType d : dtypes) names.push_back(dtype_name(d));
      *why = std::string("dtype ") + dtype_name(dt) + " not in [" + list(names) + "]";
    }
    return false;
  }
  const auto attrs = node_attributes(g, n);
  for (const auto& [attr, accepted] : shapes) {
    const double v = attrs.at(attr);
    // eps is a float32 attribute: the manifest's value is compared after rounding to float32.
    const bool as_float = attr == "eps";  // (clang 14 cannot capture a structured binding)
    auto same = [&](double a) { return as_float ? static_cast<float>(a) == static_cast<float>(v) : a == v; };
    if (std::none_of(accepted.begin(), accepted.end(), same)) {
      if (why) *why = attr + " " + number(v) + " not in " + values(accepted);
      return false;
    }
  }
  return true;
}

const Implementation* KernelPackage::implementation(const std::string& backend,
                                                    const std::string& platform) const {
  for (const auto& i : implementations)
    if (i.backend == backend && i.platform == platform) return &i;
  return nullptr;
}

KernelPackage read_package(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("--kernels ", dir, ": not a directory (expected a kernel package folder)");
  KernelPackage p;
  p.dir = dir;
  p.manifest = (fs::path(dir) / "kernel.json").string();
  if (!fs::exists(p.manifest, ec)) fail("kernel package ", dir, ": no kernel.json (the package manifest)");
  const std::string text = io::read_regular_file(p.manifest, kMaxManifestBytes);
  nlohmann::json j = io::parse_json(text, p.manifest);
  if (!j.is_object()) fail("kernel package ", p.manifest, ": not a JSON object");
  const Manifest m(p.manifest, std::move(j));
  m.only_keys(m.json(), {"name", "abi_version", "op", "dtypes", "shapes", "implementations", "description"},
              "");

  p.name = m.string(m.required("name"), "name");
  const nlohmann::json& abi = m.required("abi_version");
  if (!abi.is_number_unsigned() || abi.get<uint64_t>() < kMinAbiVersion || abi.get<uint64_t>() > kAbiVersion)
    m.bad("abi_version", abi.dump() + " is not a version this build reads (" +
                             std::to_string(kMinAbiVersion) + " to " + std::to_string(kAbiVersion) + ")");

  const std::string op = m.string(m.required("op"), "op");
  std::vector<std::string> op_names;
  for (const OpSpec& s : known_ops()) {
    op_names.push_back(s.name);
    if (op == s.name) p.op = &s;
  }
  if (!p.op) m.bad("op", "'" + op + "' is not an op a kernel can replace (known: " + list(op_names) + ")");

  if (m.json().contains("dtypes")) {
    const auto& d = m.array(m.json()["dtypes"], "dtypes");
    for (size_t i = 0; i < d.size(); ++i) {
      const std::string field = "dtypes[" + std::to_string(i) + "]";
      const std::string name = m.string(d[i], field);
      if (name != "float32" && name != "bfloat16" && name != "float16")
        m.bad(field, "'" + name + "' is not float32, bfloat16 or float16");
      p.dtypes.push_back(parse_dtype(name));
    }
  }
  if (m.json().contains("shapes")) {
    const auto& s = m.json()["shapes"];
    if (!s.is_object()) m.bad("shapes", "must be an object {attribute: [values]}");
    std::vector<std::string> attrs(p.op->attributes.begin(), p.op->attributes.end());
    m.only_keys(s, attrs, "shapes");
    for (const auto& [attr, v] : s.items()) {
      const std::string field = "shapes." + attr;
      m.array(v, field);
      if (v.empty()) m.bad(field, "must list at least one value");
      for (const auto& x : v) {
        if (attr == "eps" ? !x.is_number() || !(x.get<double>() > 0)
                          : !x.is_number_integer() || x.get<int64_t>() <= 0)
          m.bad(field,
                attr == "eps" ? "values must be positive numbers" : "values must be positive integers");
        p.shapes[attr].push_back(x.get<double>());
      }
    }
  }

  const auto& impls = m.array(m.required("implementations"), "implementations");
  if (impls.empty()) m.bad("implementations", "must list at least one implementation");
  std::set<std::string> backends;
  std::string hashed = text;
  for (size_t i = 0; i < impls.size(); ++i) {
    const std::string field = "implementations[" + std::to_string(i) + "]";
    const auto& e = impls[i];
    if (!e.is_object()) m.bad(field, "must be an object");
    Implementation impl;
    impl.field = field;
    impl.backend = m.string(e.contains("backend") ? e["backend"] : nlohmann::json(), field + ".backend");
    impl.platform = m.string(e.contains("platform") ? e["platform"] : nlohmann::json(), field + ".platform");
    const char* file_key = nullptr;
    if (impl.backend == "cpu") {
      file_key = "library";
    } else if (impl.backend == "pjrt") {
      file_key = "stablehlo";
    } else {
      m.bad(field + ".backend", "'" + impl.backend + "' is not cpu or pjrt");
    }
    if (impl.backend == "pjrt")
      m.only_keys(e, {"backend", "platform", file_key, "ffi_library", "ffi_handlers"}, field);
    else
      m.only_keys(e, {"backend", "platform", file_key}, field);
    if (!backends.insert(impl.backend + "/" + impl.platform).second)
      m.bad(field, "repeats backend " + impl.backend + " for platform " + impl.platform);
    const std::string file_field = field + "." + file_key;
    impl.file = package_file(
        m, dir, m.string(e.contains(file_key) ? e[file_key] : nlohmann::json(), file_field), file_field);
    hashed += "\n" + io::read_regular_file(impl.file, kMaxImplementationBytes);
    if (e.contains("ffi_library") || e.contains("ffi_handlers")) {
      // XLA FFI handlers: the library's bytes are hashed too (a rebuilt library is another compile-cache
      // key).
      const std::string lib_field = field + ".ffi_library", handlers_field = field + ".ffi_handlers";
      if (!e.contains("ffi_library")) m.bad(lib_field, "is missing (" + handlers_field + " needs it)");
      if (!e.contains("ffi_handlers")) m.bad(handlers_field, "is missing (" + lib_field + " needs it)");
      impl.ffi_library = package_file(m, dir, m.string(e["ffi_library"], lib_field), lib_field);
      const auto& hs = m.array(e["ffi_handlers"], handlers_field);
      if (hs.empty()) m.bad(handlers_field, "must list at least one handler");
      std::set<std::string> targets;
      for (size_t h = 0; h < hs.size(); ++h) {
        const std::string hf = handlers_field + "[" + std::to_string(h) + "]";
        if (!hs[h].is_object()) m.bad(hf, "must be an object {\"target\": ..., \"symbol\": ...}");
        m.only_keys(hs[h], {"target", "symbol"}, hf);
        Implementation::FfiHandler fh;
        fh.target = m.string(hs[h].contains("target") ? hs[h]["target"] : nlohmann::json(), hf + ".target");
        fh.symbol = m.string(hs[h].contains("symbol") ? hs[h]["symbol"] : nlohmann::json(), hf + ".symbol");
        if (!targets.insert(fh.target).second) m.bad(hf + ".target", "repeats target " + fh.target);
        impl.ffi_handlers.push_back(std::move(fh));
      }
      hashed += "\n" + io::read_regular_file(impl.ffi_library, kMaxImplementationBytes);
    }
    p.implementations.push_back(std::move(impl));
  }
  p.hash = runtime::content_hash(hashed).substr(0, 16);
  return p;
}

namespace {

struct Registration {
  KernelPackage* package;
  std::string error;  // the first refusal
};

int add_kernel(const TesseraKernelHost* host, const TesseraKernel* k) {
  auto* reg = static_cast<Registration*>(host->context);
  auto refuse = [&](const std::string& why) {
    if (reg->error.empty()) reg->error = why;
    return 1;
  };
  if (k == nullptr || k->struct_size < sizeof(TesseraKernel))
    return refuse("a TesseraKernel with a short struct_size");
  if (k->fn == nullptr) return refuse("kernel with a null fn");
  CpuKernel c;
  c.name = k->name ? k->name : "?";
  const uint32_t v = reg->package->library_abi_version;
  if (k->op == TESSERA_KERNEL_OP_RMS_NORM) {
    c.op = Op::RmsNorm;
    if (k->dtype != TESSERA_KERNEL_F32)
      return refuse("kernel '" + c.name + "': rms_norm takes float32 (TESSERA_KERNEL_F32)");
    c.dtype = DType::F32;
  } else if (k->op == TESSERA_KERNEL_OP_MATMUL && v >= 2) {
    c.op = Op::MatMul;
    if (k->dtype != TESSERA_KERNEL_F32 && k->dtype != TESSERA_KERNEL_BF16)
      return refuse("kernel '" + c.name +
                    "': matmul takes float32 or bfloat16 weights (TESSERA_KERNEL_F32, TESSERA_KERNEL_BF16)");
    c.dtype = k->dtype == TESSERA_KERNEL_F32 ? DType::F32 : DType::BF16;
  } else {
    return refuse("kernel '" + c.name + "': op " + std::to_string(k->op) + " has no C signature in ABI " +
                  std::to_string(v) +
                  (v >= 2 ? " (TESSERA_KERNEL_OP_RMS_NORM, TESSERA_KERNEL_OP_MATMUL)"
                          : " (TESSERA_KERNEL_OP_RMS_NORM only; matmul needs ABI 2)"));
  }
  if (k->isa < TESSERA_KERNEL_ISA_SCALAR || k->isa > TESSERA_KERNEL_ISA_AVX512BF16)
    return refuse("kernel '" + c.name + "': isa " + std::to_string(k->isa) + " is not a TesseraKernelIsa");
  c.isa = static_cast<int>(k->isa);
  c.fn = k->fn;
  if (c.op != reg->package->op->op)
    return refuse("kernel '" + c.name + "' is for " + graph::op_name(c.op) + ", the manifest's op is " +
                  reg->package->op->name);
  reg->package->cpu_kernels.push_back(std::move(c));
  return 0;
}

}  // namespace

void load_cpu_library(KernelPackage& p) {
  const Implementation* impl = p.implementation("cpu", host_platform());
  TS_ASSERT(impl != nullptr, p.name, ": no cpu implementation for ", host_platform());
  const std::string& lib = impl->file;
  dlerror();
  void* h = dlopen(fs::absolute(lib).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    fail("kernel package ", p.name, ": ", lib, ": dlopen failed: ", e ? e : "unknown error");
  }
  p.library = std::shared_ptr<void>(h, [](void*) {});  // never closed (see package.h)
  auto symbol = [&](const char* name) {
    void* s = dlsym(h, name);
    if (!s)
      fail("kernel package ", p.name, ": ", lib, ": missing symbol ", name, " (see tessera/kernel_abi.h)");
    return s;
  };
  auto version = reinterpret_cast<TesseraKernelAbiVersionFn>(symbol("tessera_kernel_abi_version"));
  auto reg_fn = reinterpret_cast<TesseraRegisterKernelsFn>(symbol("tessera_register_kernels"));
  const uint32_t v = version();
  if (v < kMinAbiVersion || v > kAbiVersion)
    fail("kernel package ", p.name, ": ", lib, ": tessera_kernel_abi_version() is ", v,
         ", this build loads ABI versions ", kMinAbiVersion, " to ", kAbiVersion);
  p.library_abi_version = v;
  Registration reg{&p, {}};
  TesseraKernelHost host{sizeof(TesseraKernelHost), kAbiVersion, &reg, add_kernel};
  p.cpu_kernels.clear();
  const int rc = reg_fn(&host);
  if (!reg.error.empty()) fail("kernel package ", p.name, ": ", lib, ": ", reg.error);
  if (rc != 0) fail("kernel package ", p.name, ": ", lib, ": tessera_register_kernels returned ", rc);
  if (p.cpu_kernels.empty())
    fail("kernel package ", p.name, ": ", lib, ": tessera_register_kernels added no kernel");
}

void load_ffi_library(KernelPackage& p, const Implementation& impl) {
  TS_ASSERT(!impl.ffi_library.empty(), p.name, ": ", impl.field, " names no ffi_library");
  const std::string& lib = impl.ffi_library;
  dlerror();
  void* h = dlopen(fs::absolute(lib).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    fail("kernel package ", p.name, ": ", lib, ": dlopen failed: ", e ? e : "unknown error");
  }
  p.library = std::shared_ptr<void>(h, [](void*) {});  // never closed: registered handlers point into it
  p.ffi_library = lib;
  p.ffi_handlers.clear();
  for (const auto& fh : impl.ffi_handlers) {
    void* s = dlsym(h, fh.symbol.c_str());
    if (!s)
      fail("kernel package ", p.name, ": ", lib, ": missing symbol ", fh.symbol, " (the XLA FFI handler ",
           impl.field, ".ffi_handlers names for target ", fh.target, ")");
    p.ffi_handlers.push_back({fh.target, fh.symbol, s});
  }
}

StablehloKernelText read_stablehlo_implementation(const KernelPackage& p, const Implementation& impl,
                                                  const std::string& prefix) {
  StablehloKernelText t =
      parse_stablehlo_kernel(io::read_regular_file(impl.file, kMaxImplementationBytes), impl.file, prefix);
  for (const StablehloFunction& f : t.functions)
    if (f.is_public && static_cast<int>(f.arg_types.size()) >= p.op->min_args &&
        static_cast<int>(f.arg_types.size()) <= p.op->max_args && f.result_types.size() == 1)
      return t;
  fail("kernel package ", p.name, ": ", impl.file, ": no public function with the signature of ", p.op->name,
       " (", p.op->min_args,
       p.op->max_args > p.op->min_args ? "-" + std::to_string(p.op->max_args) : std::string(),
       " tensor arguments, one result)");
}

const CpuKernel* best_cpu_kernel(const KernelPackage& p, DType dtype, int isa) {
  const CpuKernel* best = nullptr;
  for (const CpuKernel& k : p.cpu_kernels)
    if (k.dtype == dtype && k.isa <= isa && (!best || k.isa > best->isa)) best = &k;
  return best;
}

const KernelPackage* KernelSet::for_node(const graph::Graph& g, const graph::Node& n) const {
  for (const auto& p : packages)
    if (p->accepts(g, n)) return p.get();
  return nullptr;
}

std::string KernelSet::identity() const {
  std::string s;
  for (const auto& p : packages) s += (s.empty() ? "" : ", ") + p->name + " " + p->hash;
  return s;
}

KernelSet select_kernels(const std::vector<std::string>& dirs, const KernelTarget& target,
                         const graph::Graph& reference, std::vector<KernelUse>& uses) {
  KernelSet set;
  for (const std::string& dir : dirs) {
    auto p = std::make_shared<KernelPackage>(read_package(dir));
    auto skip = [&](const std::string& why) {
      log_note("kernel package ", p->name, " (", dir, ") skipped: ", why);
    };
    if (target.backend.empty()) {
      skip("this backend takes no kernels");
      continue;
    }
    const Implementation* impl = p->implementation(target.backend, target.platform);
    if (!impl) {
      std::vector<std::string> has, platforms;
      for (const auto& i : p->implementations) {
        has.push_back(i.backend + "/" + i.platform);
        if (i.backend == target.backend) platforms.push_back(i.field + ".platform is " + i.platform);
      }
      skip(platforms.empty()
               ? "no " + target.backend + " implementation (it has " + list(has) + ")"
               : list(platforms) + ", this " + target.backend + " backend is " + target.platform);
      continue;
    }
    // Which nodes it would take (the first package given wins a node).
    int nodes = 0, fit = 0;
    std::string why;
    for (const graph::Node& n : reference.nodes) {
      if (n.op != p->op->op) continue;
      std::string w;
      if (!p->accepts(reference, n, &w)) {
        if (why.empty()) why = w;
        continue;
      }
      ++fit;
      if (!set.for_node(reference, n)) ++nodes;
    }
    if (nodes == 0) {
      const std::string op = p->op->name;
      skip(fit > 0       ? "every " + op + " node it fits is taken by a package given before it"
           : why.empty() ? "the model has no " + op + " node"
                         : "no " + op + " node of the model fits (" + why + ")");
      continue;
    }
    if (target.backend == "pjrt" && !impl->ffi_library.empty() && target.ffi_platform.empty()) {
      skip("its XLA FFI handlers (" + impl->field +
           ".ffi_library) need the plugin's PJRT_FFI_Extension, which this plugin lacks");
      continue;
    }
    if (target.backend == "pjrt") {
      const StablehloKernelText t = read_stablehlo_implementation(*p, *impl, "");
      for (const auto& fh : impl->ffi_handlers)
        if (std::none_of(t.functions.begin(), t.functions.end(), [&](const StablehloFunction& f) {
              return f.text.find("@" + fh.target + "(") != std::string::npos ||
                     f.text.find("call_target_name = \"" + fh.target + "\"") != std::string::npos;
            }))
          fail("kernel package ", p->name, ": ", impl->file, " has no custom call to @", fh.target, " (",
               impl->field, ".ffi_handlers names it)");
      if (!impl->ffi_library.empty()) load_ffi_library(*p, *impl);
      if (t.tpu_custom_call && target.platform != "tpu")
        fail("kernel package ", p->name, ": ", impl->file,
             " holds stablehlo.custom_call @tpu_custom_call (a Pallas "
             "TPU kernel), which runs only on a tpu platform, not ",
             target.platform, " (", impl->field, ".platform says ", impl->platform, ")");
    }
    if (target.backend == "cpu") {
      load_cpu_library(*p);
      bool usable = false;
      for (const graph::Node& n : reference.nodes)
        if (n.op == p->op->op && p->accepts(reference, n) &&
            best_cpu_kernel(*p, node_dtype(reference, n), target.cpu_isa))
          usable = true;
      if (!usable) {
        skip("its library registers no kernel for the model's dtype on this CPU's instruction set");
        continue;
      }
    }
    // An FFI package reports its handler library (what runs); its StableHLO only calls it.
    uses.push_back({p->name, p->op->name, target.backend,
                    impl->ffi_library.empty() ? impl->file : impl->ffi_library, nodes});
    set.packages.push_back(std::move(p));
  }
  return set;
}

}  // namespace tessera::kernels
