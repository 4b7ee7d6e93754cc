// Loading a checkpoint into a backend, and the host-side generate loop.
// The host owns input ids, the growing output, the attention mask and the
// stopping state; each step hands the backend only (ids, positions, slots,
// kv_begin, and on PJRT devices the sampling parameters) and gets back logits
// (native cpu: the host samples) or only the chosen token ids (PJRT: the
// compiled step samples). Prompts are left-padded to a length bucket.
#include <malloc.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "backends/backend.h"
#include "backends/pjrt/pjrt_backend.h"
#include "backends/pjrt/pjrt_info.h"
#include "generation/sampler.h"
#include "graph/compile_cache.h"
#include "distributed/mpi_communicator.h"
#include "distributed/tp_plan.h"
#include "io/weight_source.h"
#include "models/architecture.h"
#include "runtime/weight_loader.h"
#include "tessera/error.h"
#include "tessera/model.h"

namespace tessera {

using backends::StepInputs;
using graph::Phase;
using graph::ShapeKey;

struct CausalLM::Impl {
  models::DecoderConfig config;
  const models::Architecture* arch = nullptr;
  std::unique_ptr<backends::Backend> backend;
  std::unique_ptr<graph::CompileCache> cache;
  GenerationConfig gen_defaults;
  ModelInfo info;
  std::vector<int> buckets;  // ascending prefill lengths; empty = exact prompt length
  bool device_sampling = false;  // PJRT devices: the compiled step samples and returns token ids
  bool first_generate_done = false;
  // One of several processes of a tensor-parallel job (MPI): rank 0's chosen tokens are sent to every rank, so the
  // ranks stay in step even if their logits were ever to differ in the last bit.
  std::shared_ptr<backends::Communicator> comm;

  graph::Graph build(const ShapeKey& key) const {
    ShapeKey k = key;  // one model instance is one rank: the layout comes from the config
    k.tp_rank = config.tp.rank;
    k.tp_size = config.tp.size;
    graph::Graph g = arch->build_graph(config, k);
    graph::append_sampling(g, config.vocab_size);
    return g;
  }

  // The prefill length for a prompt of `len` tokens; beyond the largest bucket, the exact length.
  int bucket_for(int len, bool warn) const {
    for (int b : buckets)
      if (b >= len) return b;
    if (warn && !buckets.empty())
      std::fprintf(stderr, "tessera: warning: prompt of %d tokens is longer than the largest bucket (%d); "
                   "compiling its exact length\n", len, buckets.back());
    return len;
  }

  // Compiled executable for `key`; with disable_compile a fresh one each call (native cpu: a fresh plan;
  // PJRT: op by op, each op's program compiled once and cached by the backend).
  backends::Executable& executable(const ShapeKey& key, bool disable_compile,
                                   std::unique_ptr<backends::Executable>& scratch) {
    if (disable_compile) {
      auto* pjrt = dynamic_cast<backends::PjrtBackend*>(backend.get());
      scratch = pjrt ? pjrt->compile_op_by_op(build(key)) : backend->compile(build(key));
      return *scratch;
    }
    return cache->get(key, [this](const ShapeKey& k) { return build(k); });
  }

  void check_ids(const std::vector<int32_t>& ids) const {
    for (int32_t id : ids)
      if (id < 0 || id >= config.vocab_size)
        fail("input id ", id, " is out of range for vocab size ", config.vocab_size);
  }
};

namespace {

// Per-row count of leading padding; the mask must be 0s then 1s (left padding).
std::vector<int32_t> left_padding(const std::vector<std::vector<int32_t>>& mask, size_t len) {
  std::vector<int32_t> pads;
  for (size_t b = 0; b < mask.size(); ++b) {
    const auto& m = mask[b];
    if (m.size() != len) fail("attention_mask row ", b, " has length ", m.size(), ", input_ids rows have ", len);
    size_t p = 0;
    while (p < m.size() && m[p] == 0) ++p;
    for (size_t i = p; i < m.size(); ++i)
      if (m[i] != 1) fail("attention_mask row ", b, ": only left padding (0s then 1s) is supported");
    if (p == m.size()) fail("attention_mask row ", b, " masks every token (empty prompt)");
    pads.push_back(static_cast<int32_t>(p));
  }
  return pads;
}

constexpr int kDynamicChunk = 64;  // dynamic cache grows by this many slots
constexpr int kMinPow2Bucket = 16;

// "auto" | "pow2" | "exact" | "16,32,64" -> ascending bucket list (empty = exact).
std::vector<int> parse_buckets(const std::string& spec, bool pjrt, int max_positions) {
  std::string s = spec.empty() ? "auto" : spec;
  if (s == "auto") s = pjrt ? "pow2" : "exact";
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

// LoadOptions value, else the environment variable, else the default.
int max_recompiles_setting(int option) {
  if (option >= 0) return option;
  const char* env = std::getenv("TESSERA_MAX_RECOMPILES");
  if (!env || !*env) return -1;
  char* end = nullptr;
  long v = std::strtol(env, &end, 10);
  if (*end != '\0' || v < 0 || v > 1000000)
    fail("TESSERA_MAX_RECOMPILES='", env, "' is not a non-negative integer");
  return static_cast<int>(v);
}

// Per-row sampling parameters for the compiled step (graph::SampleParam layout).
std::vector<int32_t> sample_params(const GenerationConfig& cfg, uint64_t seed, int batch, int step) {
  std::vector<int32_t> p(static_cast<size_t>(batch) * graph::kSampleParams);  // [batch * kSampleParams]
  for (int b = 0; b < batch; ++b) {
    int32_t* r = p.data() + static_cast<size_t>(b) * graph::kSampleParams;
    r[graph::kTemperature] = std::bit_cast<int32_t>(cfg.temperature);
    r[graph::kTopP] = std::bit_cast<int32_t>(cfg.top_p);
    r[graph::kMinP] = std::bit_cast<int32_t>(cfg.min_p);
    r[graph::kRepetitionPenalty] = std::bit_cast<int32_t>(cfg.repetition_penalty);
    r[graph::kTopK] = cfg.top_k;
    r[graph::kSeedLo] = static_cast<int32_t>(static_cast<uint32_t>(seed));
    r[graph::kSeedHi] = static_cast<int32_t>(static_cast<uint32_t>(seed >> 32));
    r[graph::kStep] = step;
    r[graph::kDoSample] = cfg.do_sample ? 1 : 0;
  }
  return p;
}

}  // namespace

CausalLM::CausalLM(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CausalLM::CausalLM(CausalLM&&) noexcept = default;
CausalLM& CausalLM::operator=(CausalLM&&) noexcept = default;
CausalLM::~CausalLM() = default;

const GenerationConfig& CausalLM::generation_config() const { return impl_->gen_defaults; }
const ModelInfo& CausalLM::info() const { return impl_->info; }

CompileReport CausalLM::compile_stats() const {
  const auto& s = impl_->cache->stats();
  return CompileReport{s.compiles,          s.hits,         s.disk_hits, s.compile_seconds, s.first_compile_seconds,
                       s.load_seconds,      s.keys,         s.misses};
}

int CausalLM::prompt_bucket(int len) const { return impl_->bucket_for(len, false); }
const std::vector<int>& CausalLM::prompt_buckets() const { return impl_->buckets; }

int CausalLM::warmup(int batch, int max_new_tokens, bool do_sample, int max_prompt) {
  Impl& m = *impl_;
  if (batch < 1) fail("warmup: batch must be >= 1, got ", batch);
  if (max_new_tokens < 0) fail("warmup: max_new_tokens must be >= 0, got ", max_new_tokens);
  const graph::Sampling sampling =
      !m.device_sampling ? graph::Sampling::Off : do_sample ? graph::Sampling::Sample : graph::Sampling::Greedy;
  const int before = m.cache->stats().compiles + m.cache->stats().disk_hits;
  for (int bucket : m.buckets) {
    if (max_prompt > 0 && bucket > m.bucket_for(max_prompt, false)) break;
    const int cache_len = bucket + max_new_tokens;
    auto build = [&m](const ShapeKey& k) { return m.build(k); };
    m.cache->get({.phase = Phase::Prefill, .batch = batch, .seq = bucket, .cache_len = cache_len,
                  .dtype = m.info.dtype, .sampling = sampling},
                 build);
    if (max_new_tokens > 1)
      m.cache->get({.phase = Phase::Decode, .batch = batch, .seq = 1, .cache_len = cache_len, .dtype = m.info.dtype,
                    .sampling = sampling},
                   build);
  }
  m.cache->arm_guard();
  return m.cache->stats().compiles + m.cache->stats().disk_hits - before;
}

namespace {

// The backend for a device name. "auto" picks TPU, then GPU, then the native CPU, and says on stderr what it
// found and what it chose (never a silent CPU fallback).
// Tensor parallelism: `comm` (one process per rank: native cpu, or a PJRT device per process running its
// graphs in segments around host collectives), or `replicas` > 1 (one process driving that many PJRT
// devices).
std::unique_ptr<backends::Backend> make_backend(const std::string& device,
                                                std::shared_ptr<backends::Communicator> comm, int replicas,
                                                const backends::CpuBackendOptions& cpu_options) {
  if (device == "cpu") return backends::make_cpu_backend(std::move(comm), cpu_options);
  if ((comm || replicas > 1) && !backends::is_pjrt_device(device))
    fail("--tp-size ", comm ? comm->size() : replicas, " with --device ", device,
         ": tensor parallelism runs on cpu, xla-cpu, tpu, cuda or pjrt:PATH devices (name one)");
  if (backends::is_pjrt_device(device)) {
    try {
      backends::PjrtOptions po;
      po.device_count = std::max(1, replicas);
      po.replicas = std::max(1, replicas);
      po.comm = std::move(comm);
      return backends::make_pjrt_backend(device, po);
    } catch (const Error& e) {
      std::string found = "cpu";
      for (const char* d : {"xla-cpu", "tpu", "cuda"}) {
        std::vector<std::string> looked;
        if (pjrt::locate_plugin(d, looked) && (std::string(d) != "tpu" || pjrt::find_tpu_chips().count > 0))
          found += std::string(", ") + d;
      }
      fail(e.what(), " (devices with a backend here: ", found, ")");
    }
  }
  if (device != "auto")
    fail("unknown device '", device, "' (expected cpu, xla-cpu, tpu, cuda, pjrt:/path/to/plugin.so or auto)");
  std::string found;
  for (const char* accel : {"tpu", "cuda"}) {
    std::vector<std::string> looked;
    if (!pjrt::locate_plugin(accel, looked)) {
      found += std::string(found.empty() ? "" : "; ") + accel + ": no plugin";
      continue;
    }
    if (std::string(accel) == "tpu" && pjrt::find_tpu_chips().count == 0) {  // libtpu is never started then
      found += std::string(found.empty() ? "" : "; ") + "tpu: plugin found, no TPU chip";
      continue;
    }
    try {
      auto b = backends::make_pjrt_backend(accel);
      std::fprintf(stderr, "tessera: device auto: found %s (%s); using %s\n", accel, b->platform().platform_name.c_str(),
                   accel);
      return b;
    } catch (const Error& e) {
      found += std::string(found.empty() ? "" : "; ") + accel + ": " + e.what();
    }
  }
  std::fprintf(stderr, "tessera: device auto: %s; using cpu (native backend)\n", found.c_str());
  return backends::make_cpu_backend(comm, cpu_options);
}

}  // namespace

CausalLM AutoModelForCausalLM::from_pretrained(const std::string& path, const LoadOptions& opt) {
  auto src = io::open_checkpoint(path);
  const std::string origin = src->origin();
  auto impl = std::make_unique<CausalLM::Impl>();
  // The file for a checkpoint directory; a GGUF's config is derived from its metadata.
  const std::string cfg_origin = src->gguf() ? src->origin() + " (config)" : src->origin() + "/config.json";
  const nlohmann::json cj = models::parse_config_json(src->config_json(), cfg_origin);  // depth-bounded
  impl->arch = &models::find_architecture(models::architecture_name(cj, cfg_origin), cfg_origin);
  impl->config = impl->arch->parse_config(cj, cfg_origin);
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
  impl->config.tp = distributed::resolve_tp_plan(*impl->arch, impl->config, dist_cfg, 0, src->origin(), &notes);
  std::shared_ptr<backends::Communicator> comm;
  int replicas = 1;
  if (dist_cfg.tp_size > 1) {
    const bool pjrt_device = backends::is_pjrt_device(opt.device_map);
    if (opt.device_map != "cpu" && !pjrt_device)
      fail("--tp-size ", dist_cfg.tp_size, " with --device ", opt.device_map,
           ": tensor parallelism runs on cpu, xla-cpu, tpu, cuda or pjrt:PATH devices (name one)");
    const char* world = std::getenv("WORLD_SIZE");
    if (pjrt_device && !distributed::launched_under_mpi() && world && std::atoi(world) > 1)
      fail("--tp-size ", dist_cfg.tp_size, " --device ", opt.device_map, ": this process is one of ", world,
           " ranks started without MPI (tessera launch --no-mpi), so each would run the whole ", dist_cfg.tp_size,
           "-device job; drop --no-mpi (one device per rank) or run one process without tessera launch");
    if (pjrt_device && !distributed::launched_under_mpi()) {
      replicas = dist_cfg.tp_size;
      for (const auto& n : notes) std::fprintf(stderr, "tessera: note: %s\n", n.c_str());
    } else {
      comm = distributed::mpi_world(dist_cfg.tp_size, distributed::collective_timeout_setting(opt.collective_timeout_s));
      impl->config.tp =
          distributed::resolve_tp_plan(*impl->arch, impl->config, dist_cfg, comm->rank(), src->origin(), nullptr);
      if (comm->rank() == 0)
        for (const auto& n : notes) std::fprintf(stderr, "tessera: note: %s\n", n.c_str());
    }
  }
  // bf16 models keep a bf16 KV cache on the native backend (as Transformers' bf16 does; half the bytes each
  // decode step reads), except with exact_bf16_matmul, whose activations all stay float32.
  backends::CpuBackendOptions cpu_options;
  cpu_options.exact_bf16_matmul = opt.exact_bf16_matmul;
  cpu_options.bf16_kv_cache = dtype == DType::BF16 && !opt.exact_bf16_matmul;
  impl->backend = make_backend(opt.device_map, comm, replicas, cpu_options);
  impl->comm = comm;
  graph::CompileCacheOptions cache_opt;
  cache_opt.disk_dir = opt.compile_cache_dir;
  if (cache_opt.disk_dir.empty())
    if (const char* env = std::getenv("TESSERA_COMPILE_CACHE")) cache_opt.disk_dir = env;
  cache_opt.max_recompiles = max_recompiles_setting(opt.max_recompiles);
  const char* verbose = std::getenv("TESSERA_VERBOSE");
  cache_opt.verbose = opt.verbose_compiles || (verbose && std::string(verbose) == "1");
  impl->cache = std::make_unique<graph::CompileCache>(*impl->backend, cache_opt);
  const bool pjrt = impl->backend->name() != "cpu";
  impl->buckets = parse_buckets(opt.buckets, pjrt, static_cast<int>(impl->config.max_position_embeddings));
  impl->device_sampling = pjrt;
  size_t bytes = 0;
  if (replicas > 1) {
    // One process, tp_size devices: each rank's share loaded (its own layout) and uploaded to its device in
    // turn, so the host holds one rank's copies at a time. The graphs are rank 0's: the same program on every
    // device.
    auto* pjrt_backend = dynamic_cast<backends::PjrtBackend*>(impl->backend.get());
    TS_ASSERT(pjrt_backend, "a multi-device backend is a PJRT backend");
    for (int r = replicas - 1; r >= 0; --r) {
      models::DecoderConfig rank_config = impl->config;
      rank_config.tp = distributed::resolve_tp_plan(*impl->arch, impl->config, dist_cfg, r, src->origin(), nullptr);
      size_t rank_bytes = 0;
      pjrt_backend->bind_replica_weights(
          r, runtime::load_weights(*src, *impl->arch, rank_config, dtype, opt.progress, rank_bytes));
      if (r == 0) bytes = rank_bytes;
    }
  } else {
    backends::WeightMap weights = runtime::load_weights(*src, *impl->arch, impl->config, dtype, opt.progress, bytes);
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
                         impl->config.tp.size};
  return CausalLM(std::move(impl));
}

std::vector<float> CausalLM::forward(const std::vector<int32_t>& ids) {
  if (ids.empty()) fail("forward: empty input");
  impl_->check_ids(ids);
  const int n = static_cast<int>(ids.size());
  if (n > impl_->config.max_position_embeddings)
    fail("forward: ", n, " tokens exceed max_position_embeddings ", impl_->config.max_position_embeddings);
  ShapeKey key{.phase = Phase::Prefill, .batch = 1, .seq = n, .cache_len = n, .dtype = impl_->info.dtype,
               .all_logits = true};
  std::unique_ptr<backends::Executable> scratch;
  auto& exe = impl_->executable(key, false, scratch);
  auto cache = impl_->backend->create_cache(impl_->config.num_layers, 1, impl_->config.local_kv_heads(), n,
                                            impl_->config.head_dim);
  StepInputs in;
  in.ids = ids;
  for (int i = 0; i < n; ++i) {
    in.positions.push_back(i);
    in.slots.push_back(i);
  }
  in.kv_begin = {0};
  std::vector<float> logits;
  exe.run(in, *cache, logits);
  const int64_t vocab = impl_->config.vocab_size;
  if (const int64_t i = generation::first_non_finite(logits.data(), static_cast<int64_t>(logits.size())); i >= 0)
    fail("forward: the model produced a non-finite logit (", logits[static_cast<size_t>(i)], ") at position ",
         i / vocab, ", vocabulary index ", i % vocab);
  return logits;
}

GenerateOutput CausalLM::generate(const std::vector<std::vector<int32_t>>& input_ids,
                                  const std::vector<std::vector<int32_t>>& attention_mask,
                                  const GenerationConfig& cfg) {
  return generate(input_ids, attention_mask, cfg, nullptr);
}

GenerateOutput CausalLM::generate(const std::vector<std::vector<int32_t>>& input_ids,
                                  const std::vector<std::vector<int32_t>>& attention_mask,
                                  const GenerationConfig& cfg, const std::function<void(int, int32_t)>& on_token) {
  using clock = std::chrono::steady_clock;
  Impl& m = *impl_;
  cfg.validate();
  if (input_ids.empty() || input_ids[0].empty()) fail("generate: empty prompt");
  const size_t len = input_ids[0].size();
  for (size_t b = 0; b < input_ids.size(); ++b) {
    if (input_ids[b].size() != len)
      fail("generate: input_ids row ", b, " has length ", input_ids[b].size(), ", row 0 has ", len,
           " (pad rows on the left to one length)");
    m.check_ids(input_ids[b]);
  }
  std::vector<std::vector<int32_t>> mask = attention_mask;
  if (mask.empty()) mask.assign(input_ids.size(), std::vector<int32_t>(len, 1));
  if (mask.size() != input_ids.size())
    fail("generate: attention_mask has ", mask.size(), " rows, input_ids has ", input_ids.size());
  const std::vector<int32_t> pads = left_padding(mask, len);

  const int batch = static_cast<int>(input_ids.size());
  const int seq = static_cast<int>(len);
  const int64_t vocab = m.config.vocab_size;
  int max_real = 0;
  for (int b = 0; b < batch; ++b) max_real = std::max(max_real, seq - pads[static_cast<size_t>(b)]);
  // Transformers' max_length rules: max_new_tokens, else max_length (which counts the prompt, padding included).
  const int max_new = cfg.new_token_budget(seq, m.config.max_position_embeddings);
  if (max_real + max_new > m.config.max_position_embeddings)
    fail("generate: prompt (", max_real, " tokens) + max_new_tokens (", max_new,
         ") exceeds max_position_embeddings (", m.config.max_position_embeddings, ")");

  const bool dynamic = cfg.cache_implementation == "dynamic";
  // Bucketed prefill: `extra` more left padding up to the bucket; slots stay contiguous from 0.
  const int prefill_len = m.bucket_for(seq, true);
  const int extra = prefill_len - seq;
  auto cache_len_for = [&](int needed) {
    return dynamic ? (needed + kDynamicChunk - 1) / kDynamicChunk * kDynamicChunk : prefill_len + max_new;
  };
  int cache_len = cache_len_for(prefill_len + 1);
  auto cache = m.backend->create_cache(m.config.num_layers, batch, m.config.local_kv_heads(), cache_len, m.config.head_dim);

  const std::vector<int32_t> eos = cfg.eos_token_id;
  const int32_t pad_id = cfg.pad_token_id.value_or(eos.empty() ? 0 : eos[0]);
  const uint64_t seed = cfg.seed.value_or(std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32));
  const graph::CompileStats before = m.cache->stats();
  // PJRT devices sample inside the compiled step (only token ids come back), except when the cache grows (the
  // sampler state is not carried over) or ops run one by one.
  const bool on_device = m.device_sampling && !dynamic && !cfg.disable_compile;
  const graph::Sampling sampling =
      !on_device ? graph::Sampling::Off : cfg.do_sample ? graph::Sampling::Sample : graph::Sampling::Greedy;

  GenerateOutput out;
  out.sequences = input_ids;
  out.prompt_tokens = seq;
  out.prefill_len = prefill_len;
  out.device_sampling = on_device;
  std::vector<bool> finished(static_cast<size_t>(batch), false);

  // Prefill: the whole prompt left-padded to the bucket; slots 0..prefill_len-1.
  const int32_t filler = pad_id >= 0 && pad_id < m.config.vocab_size ? pad_id : 0;  // masked; any valid id
  std::vector<int32_t> kv_begin(static_cast<size_t>(batch));  // [batch]
  for (int b = 0; b < batch; ++b) kv_begin[static_cast<size_t>(b)] = pads[static_cast<size_t>(b)] + extra;
  StepInputs in;
  in.ids.reserve(static_cast<size_t>(batch * prefill_len));
  for (int b = 0; b < batch; ++b) {
    for (int s = 0; s < prefill_len; ++s) {
      in.ids.push_back(s < extra ? filler : input_ids[static_cast<size_t>(b)][static_cast<size_t>(s - extra)]);
      int pos = s - kv_begin[static_cast<size_t>(b)];
      in.positions.push_back(pos < 0 ? 1 : pos);  // padding positions are masked; 1 as in Transformers
    }
  }
  for (int s = 0; s < prefill_len; ++s) in.slots.push_back(s);
  in.kv_begin = kv_begin;
  // The repetition penalty skips every row's left padding (the caller's and the bucket's), as Transformers 5
  // does (RepetitionPenaltyLogitsProcessor's prompt_ignore_length = the padding length).
  if (on_device) in.seen_from = kv_begin;

  std::vector<float> logits;
  std::vector<int32_t> device_tokens;
  std::unique_ptr<backends::Executable> scratch;
  auto run_step = [&](const ShapeKey& key, int step) {
    backends::Executable& exe = m.executable(key, cfg.disable_compile, scratch);
    if (on_device) {
      in.sample_params = sample_params(cfg, seed, batch, step);
      exe.run_tokens(in, *cache, device_tokens);
    } else {
      exe.run(in, *cache, logits);
    }
  };
  ShapeKey prefill_key{.phase = Phase::Prefill, .batch = batch, .seq = prefill_len, .cache_len = cache_len,
                       .dtype = m.info.dtype, .sampling = sampling};
  auto t0 = clock::now();
  run_step(prefill_key, 0);
  in.seen_from.clear();
  auto t1 = clock::now();
  out.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

  auto* pjrt_backend = dynamic_cast<backends::PjrtBackend*>(m.backend.get());
  const backends::TransferStats transfers_before = pjrt_backend ? pjrt_backend->transfer_stats()
                                                                 : backends::TransferStats{};
  std::optional<ShapeKey> last_decode;
  int decode_runs = 0;
  for (int step = 0; step < max_new; ++step) {
    // The next token of every row: chosen by the step itself, or here from `logits` [batch, vocab].
    std::vector<int32_t> next(static_cast<size_t>(batch));
    for (int b = 0; b < batch; ++b) {
      int32_t tok;
      if (on_device) {
        tok = device_tokens[static_cast<size_t>(b)];
        // The compiled step answers -1 (or anything out of the vocabulary) for a row with a non-finite logit.
        if (!finished[static_cast<size_t>(b)] && (tok < 0 || tok >= vocab))
          fail("generate: step ", step, ", row ", b, ": the model produced a non-finite logit (the compiled "
               "sampling step returned token id ", tok, ")");
      } else {
        float* row = logits.data() + static_cast<int64_t>(b) * vocab;
        // A NaN or infinite logit is an error naming where it appeared, never a token.
        if (const int64_t v = generation::first_non_finite(row, vocab); v >= 0 && !finished[static_cast<size_t>(b)])
          fail("generate: step ", step, ", row ", b, ": the model produced a non-finite logit (", row[v],
               " at vocabulary index ", v, ")");
        const auto& seq_b = out.sequences[static_cast<size_t>(b)];  // the row's left padding is not penalised
        generation::apply_repetition_penalty(
            row, vocab, std::span<const int32_t>(seq_b).subspan(static_cast<size_t>(pads[static_cast<size_t>(b)])),
            cfg.repetition_penalty);
        if (cfg.do_sample) {
          generation::apply_warpers(row, vocab, cfg);
          tok = generation::sample_from_logits(row, vocab, generation::counter_uniform(seed, step, b));
        } else {
          tok = generation::argmax(row, vocab);
        }
      }
      if (finished[static_cast<size_t>(b)]) tok = pad_id;
      next[static_cast<size_t>(b)] = tok;
    }
    if (m.comm) m.comm->broadcast(next.data(), next.size() * sizeof(int32_t), 0);
    bool all_done = true;
    for (int b = 0; b < batch; ++b) {
      out.sequences[static_cast<size_t>(b)].push_back(next[static_cast<size_t>(b)]);
      if (!finished[static_cast<size_t>(b)] && on_token) on_token(b, next[static_cast<size_t>(b)]);
      if (std::find(eos.begin(), eos.end(), next[static_cast<size_t>(b)]) != eos.end()) finished[static_cast<size_t>(b)] = true;
      all_done = all_done && finished[static_cast<size_t>(b)];
    }
    out.new_tokens = step + 1;
    if (all_done || step + 1 == max_new) break;

    // Decode: one token per row at slot prefill_len + step.
    const int slot = prefill_len + step;
    if (slot >= cache_len) {  // dynamic cache: grow by a chunk (the decode shape changes: expected)
      int grown = cache_len_for(slot + 1);
      auto bigger = m.backend->create_cache(m.config.num_layers, batch, m.config.local_kv_heads(), grown, m.config.head_dim);
      m.backend->copy_cache(*cache, *bigger);
      cache = std::move(bigger);
      cache_len = grown;
    }
    ShapeKey key{.phase = Phase::Decode, .batch = batch, .seq = 1, .cache_len = cache_len, .dtype = m.info.dtype,
                 .sampling = sampling};
    if (!cfg.disable_compile && !dynamic && last_decode && !(*last_decode == key) && !m.cache->contains(key))
      std::fprintf(stderr, "tessera: warning: recompiling during decode at step %d: %s (changed: %s)\n", step,
                   key.str().c_str(), last_decode->diff(key).c_str());
    last_decode = key;
    in.ids = next;
    in.positions.clear();
    for (int b = 0; b < batch; ++b) in.positions.push_back(seq - pads[static_cast<size_t>(b)] + step);
    in.slots = {slot};
    run_step(key, step + 1);
    ++decode_runs;
  }
  auto t2 = clock::now();
  out.decode_seconds = std::chrono::duration<double>(t2 - t1).count();
  out.decode_steps = decode_runs;
  if (pjrt_backend) {
    const backends::TransferStats now = pjrt_backend->transfer_stats();
    out.decode_h2d_bytes = now.h2d_bytes - transfers_before.h2d_bytes;
    out.decode_d2h_bytes = now.d2h_bytes - transfers_before.d2h_bytes;
  }
  if (out.prefill_seconds > 0) out.prefill_tokens_per_s = batch * seq / out.prefill_seconds;
  if (decode_runs > 0 && out.decode_seconds > 0) out.decode_tokens_per_s = batch * decode_runs / out.decode_seconds;
  const auto& after = m.cache->stats();
  out.compiles.compiles = after.compiles - before.compiles;
  out.compiles.hits = after.hits - before.hits;
  out.compiles.disk_hits = after.disk_hits - before.disk_hits;
  out.compiles.compile_seconds = after.compile_seconds - before.compile_seconds;
  out.compiles.load_seconds = after.load_seconds - before.load_seconds;
  out.compiles.first_compile_seconds = after.first_compile_seconds;
  out.compiles.keys.assign(after.keys.begin() + static_cast<long>(before.keys.size()), after.keys.end());
  out.compiles.misses.assign(after.misses.begin() + static_cast<long>(before.misses.size()), after.misses.end());
  if (cfg.disable_compile) out.compiles.compiles = 1 + decode_runs;  // every step planned afresh
  // The recompile guard counts from the end of the first generation (unless warmup() armed it already).
  if (!m.first_generate_done) m.cache->arm_guard();
  m.first_generate_done = true;
  return out;
}

}  // namespace tessera
