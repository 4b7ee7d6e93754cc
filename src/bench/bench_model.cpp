// `tessera bench` measurements: see bench_model.h.
#include "bench/bench_model.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "backends/cpu/kernels.h"
#include "backends/cpu/thread_pool.h"
#include "bench/bench_machine.h"
#include "io/json_util.h"
#include "io/weight_source.h"
#include "models/architecture.h"
#include "tessera/error.h"
#include "tessera/model.h"

namespace tessera::bench {
namespace {

using clock = std::chrono::steady_clock;

double seconds_since(clock::time_point t0) {
  return std::chrono::duration<double>(clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux reports kilobytes
}

// Parameter counts from the architecture's own weight list (so they match what the graph reads).
ModelCounts count_params(const std::string& path) {
  auto src = io::open_checkpoint(path);
  const std::string origin = src->origin() + " (config)";
  const nlohmann::json cj = io::parse_json(src->config_json(), origin);
  const auto archs = cj.find("architectures");
  if (archs == cj.end() || !archs->is_array() || archs->empty() || !(*archs)[0].is_string())
    fail(origin, ": field 'architectures' is missing or not a list of names");
  const models::Architecture& arch = models::find_architecture((*archs)[0].get<std::string>(), origin);
  const models::DecoderConfig c = arch.parse_config(cj, origin);
  ModelCounts n;
  n.num_layers = c.num_layers;
  n.num_heads = c.num_heads;
  n.num_kv_heads = c.num_kv_heads;
  n.head_dim = c.head_dim;
  n.hidden = c.hidden_size;
  n.tied = true;
  int64_t embedding_qbytes = -1;  // the embedding's block bytes (the LM head when tied), -1: not quantised
  for (const models::WeightSpec& w : arch.weights(c)) {
    const bool bias =
        w.name.size() > 5 && w.name.compare(w.name.size() - 5, 5, "_bias") == 0;  // experts' [E, N]
    if (w.is_vector || bias || (w.shape.size() != 2 && w.shape.size() != 3)) continue;
    // Stacked experts [E, N, K]: a token reads num_experts_per_tok of the E (its active parameters).
    const int64_t stack = w.shape.size() == 3 ? w.shape[0] : 1, used = stack > 1 ? c.num_experts_per_tok : 1;
    const int64_t per_matrix = w.shape[w.shape.size() - 2] * w.shape.back(), numel = per_matrix * used;
    const io::TensorMeta* m = src->find(w.name);
    const std::string stored = m ? m->stored_type : "";
    const DType q = block_dtype_of_ggml(stored);
    const int64_t qbytes = is_quantized(q) ? static_cast<int64_t>(dtype_bytes(q, per_matrix)) * used : -1;
    const bool read_per_token = w.name.rfind("model.layers.", 0) == 0 || w.name == "lm_head.weight";
    if (read_per_token)
      (qbytes >= 0 ? n.quantized_bytes : n.unquantized_params) += qbytes >= 0 ? qbytes : numel;
    if (w.name.rfind("model.layers.", 0) == 0) {
      n.layer_matrix_params += numel;
    } else if (w.name == "model.embed_tokens.weight") {
      n.embedding_params = numel;
      embedding_qbytes = qbytes;
    } else if (w.name == "lm_head.weight") {
      n.lm_head_params = numel;
      n.tied = false;
    }
  }
  if (n.tied) {
    n.lm_head_params = n.embedding_params;
    (embedding_qbytes >= 0 ? n.quantized_bytes : n.unquantized_params) +=
        embedding_qbytes >= 0 ? embedding_qbytes : n.embedding_params;
  }
  return n;
}

// One repeat: load, then one greedy generation of exactly `new_tokens` tokens.
RunTimes run_once(const std::string& path, const BenchOptions& o, ModelInfo* info_out) {
  RunTimes t;
  LoadOptions lo;
  lo.dtype = o.dtype;
  lo.exact_bf16_matmul = o.exact_bf16_matmul;
  lo.kv_cache_dtype = o.kv_cache_dtype;
  lo.prefill_chunk = o.prefill_chunk;
  lo.kernels = o.kernels;
  const auto t_load = clock::now();
  CausalLM model = AutoModelForCausalLM::from_pretrained(path, lo);
  t.load_s = seconds_since(t_load);
  *info_out = model.info();

  GenerationConfig g = model.generation_config();
  g.do_sample = false;
  g.max_new_tokens = o.new_tokens;
  g.eos_token_id.clear();  // decode exactly new_tokens steps
  g.pad_token_id = 0;
  g.repetition_penalty = 1.0f;
  const std::vector<int32_t> prompt = bench_prompt(o.prompt_tokens, model.info().vocab_size);

  bool first = true;
  const auto t_gen = clock::now();
  GenerateOutput out = model.generate({prompt}, {}, g, [&](int, int32_t) {
    if (first) t.ttft_s = seconds_since(t_gen);  // prefill + choosing the first token
    first = false;
  });
  if (out.new_tokens != o.new_tokens || out.prompt_tokens != o.prompt_tokens)
    fail("bench: generated ", out.new_tokens, " tokens from a ", out.prompt_tokens,
         "-token prompt, expected ", o.new_tokens, " from ", o.prompt_tokens);
  t.prefill_s = out.prefill_seconds;
  t.prefill_tokens_per_s = out.prefill_tokens_per_s;
  t.decode_s = out.decode_seconds;
  t.decode_tokens_per_s = out.decode_tokens_per_s;
  return t;
}

// What the matmuls multiply: bf16 models on avx512bf16 round their inputs unless exact_bf16_matmul.
const char* matmul_inputs(const BenchReport& r) {
  const bool rounded = r.dtype == "bfloat16" && r.isa == "avx512bf16" && !r.options.exact_bf16_matmul;
  return rounded ? "bfloat16" : "float32";
}

void check_options(const BenchOptions& o) {
  if (o.prompt_tokens < 1) fail("bench: --prompt-tokens must be >= 1 (got ", o.prompt_tokens, ")");
  if (o.new_tokens < 2)
    fail("bench: --new-tokens must be >= 2 so at least one decode step runs (got ", o.new_tokens, ")");
  if (o.repeats < 1) fail("bench: --repeats must be >= 1 (got ", o.repeats, ")");
  if (o.model.empty()) fail("bench: no model given (BenchOptions::model is empty)");
}

}  // namespace

std::vector<int32_t> bench_prompt(int n, int64_t vocab) {
  if (vocab <= 10)
    fail("bench: vocabulary of ", vocab, " tokens is too small for a prompt of ids in [10, vocab)");
  std::vector<int32_t> ids(static_cast<size_t>(std::max(n, 0)));
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int32_t& id : ids) {  // splitmix64: deterministic, no library dependence
    s += 0x9e3779b97f4a7c15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    id = static_cast<int32_t>(10 + z % static_cast<uint64_t>(vocab - 10));
  }
  return ids;
}

BenchReport run_bench(const BenchOptions& o) {
  check_options(o);
  if (o.threads > 0) cpu::ThreadPool::instance().set_num_threads(o.threads);
  BenchReport r;
  r.options = o;
  r.model_path = o.model;
  r.counts = count_params(r.model_path);
  for (int i = 0; i < o.repeats; ++i) {
    ModelInfo info;
    r.runs.push_back(run_once(r.model_path, o, &info));
    r.architecture = info.architecture;
    r.dtype = dtype_name(info.dtype);
    r.kv_bytes_per_token = info.kv_bytes_per_token;
    r.kv_cache_dtype = dtype_name(info.kv_cache_dtype);
    r.weight_bytes = info.weight_bytes;
    r.quantized = !info.quantized_matrices.empty();
    r.kernels = info.kernels;
  }
  r.peak_rss_mb = peak_rss_mb();
  auto med = [&](double RunTimes::*field) {
    std::vector<double> v;
    for (const RunTimes& t : r.runs) v.push_back(t.*field);
    return median(v);
  };
  r.median = RunTimes{med(&RunTimes::load_s),    med(&RunTimes::ttft_s),
                      med(&RunTimes::prefill_s), med(&RunTimes::prefill_tokens_per_s),
                      med(&RunTimes::decode_s),  med(&RunTimes::decode_tokens_per_s)};
  r.threads = cpu::ThreadPool::instance().num_threads();
  r.isa = cpu::isa_name(cpu::active_isa());
  r.int8_dot = cpu::int8_dot_in_use();
  r.amx = cpu::amx_in_use();
  r.cpu = cpu_model_name();
  if (o.probe_machine) {
    r.read_bandwidth_gbs = read_bandwidth_gbs(o.bandwidth_bytes, 5);
    r.peak_f32_gflops = peak_f32_gflops(o.peak_seconds);
    r.peak_bf16_gflops = peak_bf16_gflops(o.peak_seconds);
    r.peak_f32_isa = peak_f32_isa();
  }
  return r;
}

double decode_weight_bytes_per_token(const BenchReport& r) {
  const ModelCounts& c = r.counts;
  const DType dt = parse_load_dtype(r.dtype);
  if (is_quantized(dt))  // quantised at load (rows that are not whole blocks, if any, are not counted apart)
    return static_cast<double>(dtype_bytes(dt, c.layer_matrix_params + c.lm_head_params));
  const double elem = static_cast<double>(dtype_size(dt));
  if (r.quantized)
    return static_cast<double>(c.quantized_bytes) + elem * static_cast<double>(c.unquantized_params);
  return elem * static_cast<double>(c.layer_matrix_params + c.lm_head_params);
}

double decode_kv_bytes_per_token(const BenchReport& r) {
  // The cache (K and V) up to the current position, the average context over the decode steps, in the
  // cache's dtype (ModelInfo::kv_bytes_per_token).
  const double avg_ctx = r.options.prompt_tokens + 0.5 * r.options.new_tokens;
  return static_cast<double>(r.kv_bytes_per_token) * avg_ctx;
}

double prefill_flops(const BenchReport& r) {
  const ModelCounts& c = r.counts;
  const double n = r.options.prompt_tokens;
  const double matmul = 2.0 * static_cast<double>(c.layer_matrix_params) * n;
  const double head = 2.0 * static_cast<double>(c.lm_head_params);  // last position only
  // Per layer and head: QKᵀ and PV over the causal triangle, n(n+1)/2 pairs × head_dim × 2 FLOPs each.
  const double attn =
      2.0 * 2.0 * static_cast<double>(c.num_layers * c.num_heads * c.head_dim) * n * (n + 1) / 2;
  return matmul + head + attn;
}

nlohmann::ordered_json to_json(const BenchReport& r) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["model"] = r.model_path;
  j["architecture"] = r.architecture;
  j["dtype"] = r.dtype;
  j["kv_cache_dtype"] = r.kv_cache_dtype;
  j["kv_bytes_per_token"] = r.kv_bytes_per_token;
  j["quantized"] = r.quantized;  // block-quantised matrices kept as stored (decode bytes count their blocks)
  j["threads"] = r.threads;
  j["isa"] = r.isa;
  j["int8_dot"] = r.int8_dot;  // the quantised decode kernels' integer dot products
  j["matmul_inputs"] = matmul_inputs(r);
  j["amx"] = r.amx;  // the bf16 prefill gemm on AMX tiles (cpu::amx_in_use)
  // Loaded kernel packages in use, as `tessera forward/generate --json` list them.
  ordered_json kernels = ordered_json::array();
  for (const KernelInUse& k : r.kernels)
    kernels.push_back({{"package", k.package},
                       {"op", k.op},
                       {"backend", k.backend},
                       {"implementation", k.implementation},
                       {"nodes", k.nodes}});
  j["kernels"] = kernels;
  j["prompt_tokens"] = r.options.prompt_tokens;
  j["new_tokens"] = r.options.new_tokens;
  j["repeats"] = r.options.repeats;
  j["load_s"] = r.median.load_s;
  j["ttft_s"] = r.median.ttft_s;
  j["prefill_s"] = r.median.prefill_s;
  j["prefill_tokens_per_s"] = r.median.prefill_tokens_per_s;
  j["decode_s"] = r.median.decode_s;
  j["decode_tokens_per_s"] = r.median.decode_tokens_per_s;
  j["peak_rss_mb"] = r.peak_rss_mb;
  ordered_json runs = ordered_json::array();
  for (const RunTimes& t : r.runs)
    runs.push_back({{"load_s", t.load_s},
                    {"ttft_s", t.ttft_s},
                    {"prefill_s", t.prefill_s},
                    {"prefill_tokens_per_s", t.prefill_tokens_per_s},
                    {"decode_s", t.decode_s},
                    {"decode_tokens_per_s", t.decode_tokens_per_s}});
  j["runs"] = runs;
  const ModelCounts& c = r.counts;
  j["params"] = {{"layer_matrices", c.layer_matrix_params},
                 {"embedding", c.embedding_params},
                 {"lm_head", c.lm_head_params},
                 {"tied", c.tied}};
  j["weight_bytes"] = r.weight_bytes;
  const double wbytes = decode_weight_bytes_per_token(r), kvbytes = decode_kv_bytes_per_token(r);
  j["decode_weight_bytes_per_token"] = wbytes;
  j["decode_kv_bytes_per_token"] = kvbytes;
  j["prefill_flops"] = prefill_flops(r);
  if (!r.options.probe_machine) return j;
  ordered_json m;
  m["cpu"] = r.cpu;
  m["read_bandwidth_gbs"] = r.read_bandwidth_gbs;
  m["peak_f32_gflops"] = r.peak_f32_gflops;
  m["peak_f32_isa"] = r.peak_f32_isa;
  m["peak_bf16_gflops"] = r.peak_bf16_gflops ? ordered_json(*r.peak_bf16_gflops) : ordered_json(nullptr);
  j["machine"] = m;
  const double bw = r.read_bandwidth_gbs * 1e9;
  // Fractions of the ceilings: decode counts the weight matrices (layers + lm_head) read per token.
  j["decode_bandwidth_fraction"] = r.median.decode_tokens_per_s * wbytes / bw;
  j["decode_bandwidth_fraction_with_kv"] = r.median.decode_tokens_per_s * (wbytes + kvbytes) / bw;
  const double prefill_flop_s = prefill_flops(r) / std::max(r.median.prefill_s, 1e-12);
  j["prefill_gflops"] = prefill_flop_s / 1e9;
  j["prefill_f32_peak_fraction"] = prefill_flop_s / (r.peak_f32_gflops * 1e9);
  j["prefill_bf16_peak_fraction"] =
      r.peak_bf16_gflops ? ordered_json(prefill_flop_s / (*r.peak_bf16_gflops * 1e9)) : ordered_json(nullptr);
  return j;
}

std::string to_text(const BenchReport& r) {
  std::ostringstream os;
  char buf[256];
  auto line = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof buf, fmt, args...);
    os << buf << "\n";
  };
  line("model        %s (%s, %s)", r.model_path.c_str(), r.architecture.c_str(), r.dtype.c_str());
  for (const KernelInUse& k : r.kernels)
    line("kernels      %s (%s on %d nodes, %s)", k.package.c_str(), k.op.c_str(), k.nodes, k.backend.c_str());
  const bool amx = r.amx && std::string(matmul_inputs(r)) == "bfloat16";
  line("threads      %d (%s, matmul inputs %s%s%s%s); prompt %d tokens, %d new tokens, median of %d",
       r.threads, r.isa.c_str(), matmul_inputs(r), amx ? ", prefill on AMX tiles" : "",
       r.quantized ? ", int8 dot " : "", r.quantized ? r.int8_dot.c_str() : "", r.options.prompt_tokens,
       r.options.new_tokens, r.options.repeats);
  line("load         %.3f s", r.median.load_s);
  line("first token  %.3f s", r.median.ttft_s);
  line("prefill      %.1f tokens/s", r.median.prefill_tokens_per_s);
  line("decode       %.2f tokens/s", r.median.decode_tokens_per_s);
  line("peak RSS     %.0f MB", r.peak_rss_mb);
  if (!r.options.probe_machine) return os.str();
  const nlohmann::ordered_json j = to_json(r);
  line("machine      %s: read %.1f GB/s, f32 peak %.0f GFLOP/s (%s), bf16 peak %s", r.cpu.c_str(),
       r.read_bandwidth_gbs, r.peak_f32_gflops, r.peak_f32_isa.c_str(),
       r.peak_bf16_gflops ? (std::to_string(static_cast<int>(*r.peak_bf16_gflops)) + " GFLOP/s").c_str()
                          : "n/a");
  line(
      "decode       %.1f%% of the bandwidth limit (%.0f MB of weight matrices per token; %.1f%% with the KV "
      "cache)",
      100 * j["decode_bandwidth_fraction"].get<double>(), decode_weight_bytes_per_token(r) / 1e6,
      100 * j["decode_bandwidth_fraction_with_kv"].get<double>());
  line("prefill      %.1f GFLOP/s = %.1f%% of f32 peak%s", j["prefill_gflops"].get<double>(),
       100 * j["prefill_f32_peak_fraction"].get<double>(),
       r.peak_bf16_gflops
           ? (", " + std::to_string(100 * j["prefill_bf16_peak_fraction"].get<double>()).substr(0, 4) +
              "% of bf16 peak")
                 .c_str()
           : "");
  return os.str();
}

}  // namespace tessera::bench
