// The model API, shaped like Transformers':
//   auto model = tessera::AutoModelForCausalLM::from_pretrained("HuggingFaceTB/SmolLM2-135M", {.dtype =
//   DType::BF16}); auto out = model.generate({ids}, {}, cfg);
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/generation.h"
#include "tessera/tensor.h"

namespace tessera {

// One rule of a tensor-parallel plan, as in Transformers' tp_plan: module pattern
// ("layers.*.self_attn.q_proj") and style ("colwise", "rowwise", "colwise_gather_output",
// "rowwise_split_input", "replicated_with_grad_allreduce", "replicated"). `origin` names where it came from,
// for error messages.
struct TpPlanRule {
  std::string pattern, style, origin = "tp_plan";
};

// Tensor parallelism, as Transformers' DistributedConfig(tp_size, tp_plan). Each rank holds its share of
// every split weight. Native cpu: one process per rank (started by `tessera launch`, collectives over MPI).
// PJRT devices: one process drives tp_size devices.
struct DistributedConfig {
  int tp_size = 1;
  std::vector<TpPlanRule> tp_plan;  // over the architecture's default plan; later rules win
  bool tp_plan_auto = false;  // replicate what tp_size cannot split (e.g. 2 KV heads on 4 ranks) and say so
  // The job this process is one rank of, as its launcher describes it (the library reads no environment: the
  // tessera command fills these from what `tessera launch` and mpirun set, WORLD_SIZE, RANK and
  // OMPI_COMM_WORLD_SIZE / _RANK; a program embedding the library sets them itself).
  int world_size = 1;  // processes in the job
  int rank = 0;        // this process's rank in it
  bool mpi = false;    // the processes are MPI ranks (mpirun started them): the cpu backend's collectives
};

// Where PJRT plugins are found and how they start (LoadOptions::plugins). The tessera command sets the
// process-wide equivalent from its environment ($TESSERA_XLA_CPU_PLUGIN, $TPU_LIBRARY_PATH,
// $TESSERA_XLA_CUDA_PLUGIN, the .venv beside the program, $VIRTUAL_ENV, ~/.local, $TESSERA_PJRT_DUMP,
// $TESSERA_PJRT_START_TIMEOUT, $TESSERA_PJRT_LOG); the library reads none of them and bakes in no path.
struct PluginSettings {
  // A plugin library per device, tried before the search ("" = search only).
  std::string xla_cpu_plugin, tpu_plugin, cuda_plugin;
  // Python site-packages directories (glob patterns allowed) searched in order for pip-installed plugins,
  // before the system's dist-packages.
  std::vector<std::string> site_packages;
  std::string dump_dir;          // each compiled StableHLO module is written to <dir>/<key>.mlir; "" = off
  double start_timeout_s = 120;  // seconds a plugin may take to initialise and create its client
  bool plugin_log = false;       // the plugins' own INFO logs on stderr
};

struct LoadOptions {
  std::optional<DType> dtype;      // unset: the checkpoint's torch_dtype (GGUF: bfloat16; on the cpu device
                                   // its block-quantised matrices stay as stored, see ModelInfo). Q8_0, Q4_0
                                   // or Q4_K: matrices quantised at load (parse_load_dtype; PJRT devices
                                   // take them as int8 and scales)
  std::string device_map = "cpu";  // cpu, xla-cpu, tpu, cuda, pjrt:/path/plugin.so or auto
  // Prompt-length buckets for generate()'s prefill (the prompt is left-padded up to its bucket, so mixed
  // prompt lengths share compiled shapes): "auto" = "pow2" on PJRT devices and "exact" on the native cpu
  // backend (padding costs real FLOPs there and its "compile" is a cheap plan); "pow2" = 16, 32, 64, ... up
  // to max_position_embeddings; "exact" = the prompt's own length; or a list such as "16,32,64,128". A prompt
  // longer than the largest listed bucket runs at its exact length, with a warning on stderr.
  std::string buckets = "auto";
  // On-disk compile cache directory (backends whose programs serialise: PJRT devices). Empty: off. (The
  // tessera command: --compile-cache-dir, else $TESSERA_COMPILE_CACHE.)
  std::string compile_cache_dir;
  // More than this many newly compiled shapes after warmup() (or after the first generate()) is an Error
  // naming the key that changed. -1: no limit. (The tessera command: --max-recompiles, else
  // $TESSERA_MAX_RECOMPILES.)
  int max_recompiles = -1;
  // Say every compile-cache miss and why (a note through the log callback; the tessera command:
  // $TESSERA_VERBOSE=1).
  bool verbose_compiles = false;
  DistributedConfig distributed;
  // Native cpu backend, bfloat16 weights, CPUs with AVX512-BF16: matmuls round their float32 inputs to
  // bfloat16 and multiply with vdpbf16ps (products exact, sums in float32), as llama.cpp does and as
  // Transformers' bf16 (which rounds every activation) implies. true keeps the inputs float32 and widens the
  // weights instead: about half the prompt-processing speed, decode about the same (it is bound by memory).
  // Block-quantised weights kept as stored (a GGUF on the cpu device): decode steps quantise their inputs to
  // int8 per block of 32 for integer dot products; true keeps them float32 (dequantised weight chunks, the
  // float32 kernels: what the float32 checkpoint gives, bit for bit). Also keeps the KV cache float32. No
  // effect on devices.
  bool exact_bf16_matmul = false;
  // The KV cache's dtype: "auto" (bfloat16 for a bfloat16 model on the native cpu backend unless
  // exact_bf16_matmul, else float32), "bfloat16", "float32", "q8_0" (blocks of 32 values of a head's row: an
  // f16 scale and 32 int8, 34 bytes; a last partial block padded with zeros) or "fp8" (float8 e4m3fn, scale
  // 1, saturating at +-448). The quantised ones halve (q8_0: 0.53x) the bytes of a bfloat16 cache, keys and
  // values rounded once when written; attention dequantises them inside its kernel. PJRT devices: auto
  // (float32), float32, bfloat16 and fp8 (the compiled step rounds what it writes, attends in float32);
  // q8_0 is an Error there. (The tessera command: --kv-cache-dtype.)
  std::string kv_cache_dtype = "auto";
  // generate(): a prompt longer than this many tokens is prefilled in chunks of it, one step each over the
  // keys and values the earlier chunks wrote, so the step's activations stay that size whatever the prompt's
  // length (the same bits as one step: the native kernels give a row the same result in any company). < 0:
  // the default, 2048 on the native cpu backend and whole prompts on PJRT devices (each chunk length would
  // be a compiled shape); 0: whole prompts. A rope whose frequencies follow the sequence's length (longrope,
  // dynamic) prefills a prompt past its switch whole. (The tessera command: --prefill-chunk.)
  int prefill_chunk = -1;
  // Tensor parallelism over MPI: seconds a rank waits in one collective for the others before it stops the
  // job with an error naming the ranks that did not answer. 0: no deadline; < 0: the default, 60. (The
  // tessera command: --collective-timeout, else $TESSERA_COLLECTIVE_TIMEOUT.)
  double collective_timeout_s = -1;
  // Kernel packages loaded at run time (folders with a kernel.json; README "Kernels loaded at run time"), in
  // order: the first that accepts a node of the graph replaces the built-in kernel (native cpu: a .so's C
  // kernels) or lowering (PJRT: a StableHLO function) for it. A package that does not apply here (another
  // backend or platform, no node with its dtypes and shapes) is skipped with a note; a broken one is an
  // Error.
  std::vector<std::string> kernels;
  // PJRT plugin search and start-up. Unset: the process-wide settings (pjrt::set_default_pjrt_settings; the
  // tessera command sets them from its environment). A program that sets neither gets PluginSettings{} plus
  // the site-packages of a .venv beside the running program (its directory or up to two above).
  std::optional<PluginSettings> plugins;
  // Called after each tensor is loaded: (tensors done, tensors total).
  std::function<void(size_t, size_t)> progress;
};

// The Hugging Face hub directories (<hub>/models--org--name/snapshots/...) in which from_pretrained and
// AutoTokenizer::from_pretrained look up a repo id "org/name", offline, in order. Process-wide and
// thread-safe; none until a program sets them, and with none only local paths resolve. (The library reads no
// environment; the tessera command sets $HF_HUB_CACHE, $HF_HOME/hub and ~/.cache/huggingface/hub, each where
// set.)
void set_hf_hub_dirs(std::vector<std::string> dirs);

// A kernel package in use (LoadOptions::kernels): the op it took and how many nodes of the model's graph.
struct KernelInUse {
  std::string package, op, backend;  // backend: the implementation used, "cpu" or "pjrt"
  std::string implementation;        // its file (library or StableHLO text)
  int nodes = 0;                     // nodes of one step's graph it replaces
};

struct ModelInfo {
  std::string architecture, origin, device;
  DType dtype = DType::F32;
  int64_t num_layers = 0, hidden_size = 0, vocab_size = 0, max_position_embeddings = 0;
  size_t weight_bytes = 0;  // bytes of weights as held by the backend (this rank's share)
  int tp_rank = 0, tp_size = 1;
  // Matrices kept block-quantised as stored (a GGUF on the cpu backend without an explicit dtype), by format:
  // e.g. {"q4_1": 210, "q8_0": 1}; empty when every matrix is in `dtype`.
  std::map<std::string, int> quantized_matrices;
  std::vector<KernelInUse> kernels;  // packages of LoadOptions::kernels in use (skipped ones are not listed)
  // Bytes one cache position takes: every layer's keys and values of this rank's kv heads, in the KV cache's
  // dtype (LoadOptions::kv_cache_dtype; auto: bfloat16 for a bfloat16 model on the cpu device, else float32).
  size_t kv_bytes_per_token = 0;
  DType kv_cache_dtype = DType::F32;
  // The positions a sequence may reach: max_position_embeddings, or more where the rope scaling serves more
  // (yarn: original_max_position_embeddings x factor; dynamic: any length).
  int64_t context_limit = 0;
  // Phi-3 with longrope: original_max_position_embeddings, where a sequence decoding from a shorter prompt
  // is computed again whole with the long factors, as Transformers does (0: no such switch).
  int64_t longrope_switch = 0;
  // Some layers keep a recurrent state per sequence (Qwen3.5's linear attention) besides keys and values,
  // which cannot be rewound to an arbitrary position: prefix caching hits only a row's whole cached prompt
  // (its state after it is kept), and there is no prefix reuse or speculative decoding.
  bool recurrent_state = false;
};

class SlotBatch;

// A loaded model. Every method is safe to call from several threads at once on one CausalLM: compiled
// programs are shared and immutable, and each generate(), forward() or SlotBatch owns its own KV cache and
// scratch. (A tensor-parallel model over MPI runs one call at a time: its ranks must step together.) Moving
// or destroying the model while another thread uses it, or while a SlotBatch made from it lives, is not
// allowed.
class CausalLM {
 public:
  CausalLM(CausalLM&&) noexcept;
  CausalLM& operator=(CausalLM&&) noexcept;
  ~CausalLM();

  // input_ids: rows of equal length (left-padded); attention_mask: same shape with 0 for padding, or empty
  // for all ones. Returns prompt + new tokens per row.
  GenerateOutput generate(const std::vector<std::vector<int32_t>>& input_ids,
                          const std::vector<std::vector<int32_t>>& attention_mask,
                          const GenerationConfig& config);
  // Streaming variant: `on_token(row, token)` is called as each new token is chosen; a callback that returns
  // bool stops the row by returning false (see TokenCallback; a callback returning void never stops one).
  GenerateOutput generate(const std::vector<std::vector<int32_t>>& input_ids,
                          const std::vector<std::vector<int32_t>>& attention_mask,
                          const GenerationConfig& config, const TokenCallback& on_token);
  // Speculative decoding with an assistant model (Transformers' generate(assistant_model=...)): `assistant`,
  // a smaller model with the same vocabulary on the cpu device, drafts up to config.num_assistant_tokens
  // tokens a step for each row, greedily, and the step verifies them beside the row's next token, so the
  // output is exactly that of generate() without it (greedy and seeded sampled). The rows run as slots of a
  // SlotBatch. Errors: a different vocabulary size, a backend that cannot verify drafts in one step (PJRT
  // devices, tensor parallelism over MPI), disable_compile or the dynamic cache.
  GenerateOutput generate(const std::vector<std::vector<int32_t>>& input_ids,
                          const std::vector<std::vector<int32_t>>& attention_mask,
                          const GenerationConfig& config, const TokenCallback& on_token, CausalLM& assistant);
  // Logits for every position of one sequence: [ids.size(), vocab] row-major.
  std::vector<float> forward(const std::vector<int32_t>& ids);
  // Logits for every position of rows of equal length in one step: [rows, len, vocab] row-major. Each
  // attention_mask row is 0s, 1s, 0s (left and/or right padding; empty mask: all ones); a row's real tokens
  // are computed as if alone (positions from 0, attending from its first real token on, the kv_begin of
  // generate()'s left padding). The logits at padding positions are 0.
  std::vector<float> forward(const std::vector<std::vector<int32_t>>& input_ids,
                             const std::vector<std::vector<int32_t>>& attention_mask);

  // Compiles (or loads from the disk cache) every prompt bucket's prefill and its decode step for `batch`
  // rows and `max_new_tokens`, with the sampling mode generate() will use for `do_sample`; then arms the
  // recompile guard. Buckets above `max_prompt` (when > 0) are skipped. Returns the number of shapes compiled
  // or loaded.
  int warmup(int batch, int max_new_tokens, bool do_sample = false, int max_prompt = 0);
  // The prefill length generate() uses for a prompt of `len` tokens.
  int prompt_bucket(int len) const;
  // The bucket list in use (empty for "exact").
  const std::vector<int>& prompt_buckets() const;

  const GenerationConfig& generation_config() const;  // defaults from generation_config.json
  const ModelInfo& info() const;
  CompileReport compile_stats() const;  // totals since load

  struct Impl;
  explicit CausalLM(std::unique_ptr<Impl> impl);

 private:
  friend class SlotBatch;
  std::unique_ptr<Impl> impl_;
};

struct AutoModelForCausalLM {
  // `path`: a model directory, a .gguf file, or a repo id resolved offline in the Hugging Face cache
  // (set_hf_hub_dirs).
  static CausalLM from_pretrained(const std::string& path, const LoadOptions& options = {});
};

}  // namespace tessera
