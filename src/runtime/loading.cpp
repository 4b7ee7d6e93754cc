// AutoModelForCausalLM::from_pretrained: the checkpoint opened and matched against its config, the
// architecture found, tensor parallelism resolved, a backend chosen, the weights loaded and bound.
// Everything comes from the path and the LoadOptions; the library reads no environment variable.
#include <malloc.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "backends/backend.h"
#include "backends/pjrt/pjrt_backend.h"
#include "backends/pjrt/pjrt_info.h"
#include "backends/registry.h"
#include "distributed/mpi_communicator.h"
#include "distributed/tp_plan.h"
#include "io/weight_source.h"
#include "kernels/package.h"
#include "models/architecture.h"
#include "runtime/model_core.h"
#include "runtime/weight_loader.h"
#include "tessera/error.h"
#include "tessera/log.h"
#include "tessera/model.h"

namespace tessera {

namespace {

constexpr int kMinPow2Bucket = 16;

// "auto" | "pow2" | "exact" | "16,32,64" -> ascending bucket list (empty = exact). `prefers_buckets`: the
// backend's compiles are costly (Capabilities::prefers_buckets), so "auto" is "pow2".
std::vector<int> parse_buckets(const std::string& spec, bool prefers_buckets, int max_positions) {
  std::string s = spec.empty() ? "auto" : spec;
  if (s == "auto") s = prefers_buckets ? "pow2" : "exact";
  std::vector<int> out;
  if (s == "exact") return out;
  if (s == "pow2") {
    for (int64_t b = kMinPow2Bucket; b < max_positions; b *= 2) out.push_back(static_cast<int>(b));
    out.push_back(max_positions);  // the last bucket is the model's limit
    return out;
  }
  std::string item;
  std::istringstream is(s);
  while (std::getline(is, item, ',')) {
    size_t used = 0;
    long v = 0;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v <= 0 || v > max_positions)
      fail("buckets: '", item, "' is not a prompt length in 1..", max_positions,
           " (expected auto, pow2, exact or a list like 16,32,64)");
    if (!out.empty() && v <= out.back()) fail("buckets: '", s, "' must be strictly increasing");
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) fail("buckets: empty list (expected auto, pow2, exact or a list like 16,32,64)");
  return out;
}

// Tensor parallelism in one process (one program over tp_size devices) is what PJRT devices do; the native
// cpu backend runs one process per rank.
bool tp_in_one_process(const std::string& device) { return backends::is_pjrt_device(device); }

// LoadOptions::plugins as the PJRT code takes them; unset: the process default (what the program set with
// pjrt::set_default_pjrt_settings; the tessera command sets it from its environment).
std::optional<pjrt::PjrtSettings> pjrt_settings(const std::optional<PluginSettings>& p) {
  if (!p) return std::nullopt;
  pjrt::PjrtSettings s;
  s.xla_cpu_plugin = {p->xla_cpu_plugin, "LoadOptions::plugins.xla_cpu_plugin"};
  s.tpu_plugin = {p->tpu_plugin, "LoadOptions::plugins.tpu_plugin"};
  s.cuda_plugin = {p->cuda_plugin, "LoadOptions::plugins.cuda_plugin"};
  s.site_packages = p->site_packages;
  s.dump_dir = p->dump_dir;
  if (!(p->start_timeout_s > 0))
    fail("plugins.start_timeout_s: ", p->start_timeout_s, " is not a number of seconds > 0");
  s.start_timeout_s = p->start_timeout_s;
  s.plugin_log = p->plugin_log;
  return s;
}

}  // namespace

CausalLM AutoModelForCausalLM::from_pretrained(const std::string& path, const LoadOptions& opt) {
  const std::optional<DType> kv_dtype = parse_kv_cache_dtype(opt.kv_cache_dtype);  // before any work
  auto src = io::open_checkpoint(path);
  const std::string origin = src->origin();
  auto impl = std::make_unique<CausalLM::Impl>();
  // The file for a checkpoint directory; a GGUF's config is derived from its metadata.
  const std::string cfg_origin = src->gguf() ? src->origin() + " (config)" : src->origin() + "/config.json";
  const nlohmann::json cj = models::parse_config_json(src->config_json(), cfg_origin);  // depth-bounded
  impl->arch = &models::find_architecture(models::architecture_name(cj, cfg_origin), cfg_origin);
  impl->config = impl->arch->parse_config(cj, cfg_origin);
  impl->config.linear_tiled_value_heads = src->linear_tiled_value_heads();
  impl->config.linear_split_qkvz = src->linear_split_qkvz();
  // Before anything sized by the config (weight list, graphs, tables): does the checkpoint match it?
  runtime::check_checkpoint_matches_config(*src, impl->config);
  const bool is_gguf = src->gguf() != nullptr;  // by format (magic), not by file name
  DType dtype = opt.dtype.value_or(is_gguf ? DType::BF16 : impl->config.torch_dtype.value_or(DType::F32));

  // As Transformers: generation_config.json over the global defaults; without one, the generation fields of
  // config.json (GenerationConfig.from_model_config). Nothing else from config.json is merged in.
  impl->gen_defaults = src->generation_config_json().empty()
                           ? GenerationConfig::from_json(src->config_json(), cfg_origin)
                           : GenerationConfig::from_json(src->generation_config_json(),
                                                         src->origin() + " (generation config)");

  // Tensor parallelism: the plan is checked (with rank 0's view) before MPI starts or any weight is read.
  // Native cpu: one process per rank (MPI). A PJRT device: one process driving tp_size devices (one program
  // with cross-device collectives), unless this process is one of several MPI ranks (one device each).
  const DistributedConfig& dist_cfg = opt.distributed;
  std::vector<std::string> notes;
  impl->config.tp =
      distributed::resolve_tp_plan(*impl->arch, impl->config, dist_cfg, 0, src->origin(), &notes);
  std::shared_ptr<backends::Communicator> comm;
  int replicas = 1;
  if (dist_cfg.tp_size > 1) {
    const bool one_process = tp_in_one_process(opt.device_map);
    if (!backends::is_known_device(opt.device_map) || opt.device_map == "auto")
      fail("tp_size ", dist_cfg.tp_size, " with device_map '", opt.device_map,
           "': tensor parallelism runs on cpu, xla-cpu, tpu, cuda or pjrt:PATH devices (name one)");
    if (dist_cfg.mpi || !one_process) {
      // One process per rank (the native cpu backend always; a PJRT device per rank under MPI). Not under
      // MPI: mpi_world says how to start the ranks.
      const double timeout =
          opt.collective_timeout_s >= 0 ? opt.collective_timeout_s : distributed::kDefaultCollectiveTimeoutS;
      comm = distributed::mpi_world(dist_cfg.tp_size, timeout, dist_cfg.mpi, dist_cfg.rank);
      impl->config.tp = distributed::resolve_tp_plan(*impl->arch, impl->config, dist_cfg, comm->rank(),
                                                     src->origin(), nullptr);
      if (comm->rank() == 0)
        for (const auto& n : notes) log_note(n);
    } else {
      if (dist_cfg.world_size > 1)
        fail("tp_size ", dist_cfg.tp_size, " with device_map '", opt.device_map, "': this process is one of ",
             dist_cfg.world_size,
             " ranks started without MPI (tessera launch --no-mpi), so each would run the whole ",
             dist_cfg.tp_size,
             "-device job; drop --no-mpi (one device per rank) or run one process without tessera launch");
      replicas = dist_cfg.tp_size;  // one process driving tp_size devices
      for (const auto& n : notes) log_note(n);
    }
  }
  // auto: bf16 models keep a bf16 KV cache on the native backend (as Transformers' bf16 does; half the bytes
  // each decode step reads), except with exact_bf16_matmul, whose activations all stay float32.
  backends::CpuBackendOptions cpu_options;
  cpu_options.exact_bf16_matmul = opt.exact_bf16_matmul;
  cpu_options.kv_dtype =
      kv_dtype.value_or(dtype == DType::BF16 && !opt.exact_bf16_matmul ? DType::BF16 : DType::F32);
  impl->backend = backends::make_backend({.device = opt.device_map,
                                          .comm = comm,
                                          .replicas = replicas,
                                          .cpu = cpu_options,
                                          .pjrt = pjrt_settings(opt.plugins),
                                          .pjrt_kv_dtype = kv_dtype.value_or(DType::F32)});
  impl->caps = impl->backend->capabilities();
  if (kv_dtype && *kv_dtype != impl->backend->cache_dtype())
    fail("kv_cache_dtype '", opt.kv_cache_dtype, "': the '", impl->backend->name(), "' backend keeps ",
         dtype_name(impl->backend->cache_dtype()), " KV caches");
  impl->comm = comm;
  if (impl->config.has_recurrent_state() && !impl->backend->supports_op(graph::Op::GatedDeltaNet))
    fail(src->origin(), ": ", impl->config.architecture,
         "'s linear-attention layers (a recurrent state per sequence) run on the cpu device only so far; the "
         "'",
         impl->backend->name(), "' backend has no lowering of them (use --device cpu)");
  // Quantised at load (--dtype q8_0 / q4_0 / q4_k): the native cpu backend computes from the blocks, PJRT
  // devices take their integers and scales and dequantise in the program; a backend with neither refuses.
  if (is_quantized(dtype) && !impl->caps.block_quantized_weights)
    fail("dtype ", dtype_name(dtype), " (quantised at load) needs block-quantised weights, which the '",
         impl->backend->name(), "' backend does not take: use float32, bfloat16 or float16 there");
  // A GGUF on a backend with block kernels keeps its Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K and MXFP4
  // matrices as stored (the native cpu backend computes from the blocks; PJRT devices take their integers and
  // scales and dequantise in the program) unless a dtype was asked for: then everything is dequantised to it.
  // Other GGML types are dequantised to `dtype`. A safetensors gpt-oss likewise keeps its MXFP4 experts (io's
  // expert layout presents them stored as "MXFP4") unless a dtype was asked for: then they are dequantised
  // to it, as Transformers does on a CPU (the rest loads as the config's dtype either way).
  if (impl->caps.block_quantized_weights) {
    for (const auto& m : src->tensors()) {
      const DType q = block_dtype_of_ggml(m.stored_type);
      const bool keep = !opt.dtype && (is_gguf || q == DType::MXFP4);
      // Matrices, and stacked experts [E, N, K] (rows of blocks alike).
      if (keep && (m.shape.size() == 2 || m.shape.size() == 3) && is_quantized(q))
        impl->config.quantized_weights[m.name] = q;
    }
  }
  // Kernel packages, checked against this backend and the model's graph (its ops' attributes and dtypes do
  // not depend on the shape key) before anything is compiled.
  std::vector<KernelInUse> kernels_used;
  if (!opt.kernels.empty()) {
    const graph::ShapeKey ref{
        .phase = graph::Phase::Decode, .batch = 1, .seq = 1, .cache_len = 1, .dtype = dtype};
    auto set = std::make_shared<kernels::KernelSet>(
        kernels::select_kernels(opt.kernels, impl->backend->kernel_target(), impl->build(ref), kernels_used));
    if (!set->empty()) impl->backend->use_kernels(std::move(set));
  }
  runtime::CompileCacheOptions cache_opt;
  cache_opt.disk_dir = opt.compile_cache_dir;
  cache_opt.max_recompiles = opt.max_recompiles;  // < 0: no limit
  cache_opt.verbose = opt.verbose_compiles;
  impl->cache = std::make_unique<runtime::CompileCache>(*impl->backend, cache_opt);
  impl->buckets =
      parse_buckets(opt.buckets, impl->caps.prefers_buckets, static_cast<int>(impl->config.context_limit()));
  if (opt.prefill_chunk > 0 && impl->caps.prefers_buckets)
    fail("prefill_chunk ", opt.prefill_chunk, ": the '", impl->backend->name(),
         "' backend prefills whole prompts (each chunk length would be another compiled program); use 0 or "
         "the default");
  impl->prefill_chunk = opt.prefill_chunk >= 0 ? opt.prefill_chunk : impl->caps.prefers_buckets ? 0 : 2048;
  // The step samples by default where the backend can and logits would otherwise cross to the host every
  // step.
  impl->device_sampling = impl->caps.in_step_sampling && impl->caps.prefers_buckets;
  size_t bytes = 0;
  if (replicas > 1) {
    // One process, tp_size devices: each rank's share loaded (its own layout) and uploaded to its device in
    // turn, so the host holds one rank's copies at a time. The graphs are rank 0's: the same program on every
    // device.
    TS_ASSERT(impl->caps.replicas >= replicas, "the backend drives ", impl->caps.replicas, " devices, not ",
              replicas);
    for (int r = replicas - 1; r >= 0; --r) {
      models::DecoderConfig rank_config = impl->config;
      rank_config.tp =
          distributed::resolve_tp_plan(*impl->arch, impl->config, dist_cfg, r, src->origin(), nullptr);
      size_t rank_bytes = 0;
      impl->backend->bind_replica_weights(
          r, runtime::load_weights(*src, *impl->arch, rank_config, dtype, opt.progress, rank_bytes));
      if (r == 0) bytes = rank_bytes;
    }
  } else {
    backends::WeightMap weights =
        runtime::load_weights(*src, *impl->arch, impl->config, dtype, opt.progress, bytes);
    // The checkpoint is closed before binding: a GGUF's weights are all owned copies, so its mapping can go
    // before the cpu backend packs them into its arena (peak memory: two copies at most, not three).
    src.reset();
    impl->backend->bind_weights(std::move(weights));
  }
  malloc_trim(0);  // give back the heap that converted / dequantised full tensors used before being sliced
  impl->info = ModelInfo{impl->arch->name,
                         origin,
                         impl->backend->name(),
                         dtype,
                         impl->config.num_layers,
                         impl->config.hidden_size,
                         impl->config.vocab_size,
                         impl->config.max_position_embeddings,
                         bytes,
                         impl->config.tp.rank,
                         impl->config.tp.size,
                         {},
                         {}};
  for (const auto& [name, q] : impl->config.quantized_weights) ++impl->info.quantized_matrices[dtype_name(q)];
  impl->info.kernels = std::move(kernels_used);
  impl->info.kv_cache_dtype = impl->backend->cache_dtype();
  impl->info.recurrent_state = impl->config.has_recurrent_state();
  impl->info.kv_bytes_per_token = impl->backend->cache_position_bytes(runtime::cache_geometry(impl->config));
  impl->info.context_limit = impl->config.context_limit();
  impl->info.longrope_switch = impl->config.longrope_switch();
  return CausalLM(std::move(impl));
}

}  // namespace tessera
