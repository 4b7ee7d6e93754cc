// generate() with prompt lookup (GenerationConfig::prompt_lookup_num_tokens) or a draft model, or a batch
// whose rows cross Phi-3 longrope's switch: the rows run as slots of one SlotBatch, whose decode steps verify
// each row's draft tokens beside its next token (and compute a crossing row again whole, as alone). Every row
// gets what generate() gives it: its prompt without padding, the seed row_seed(seed, row), the padded
// prompt's budget, so the same tokens (the batch's steps compute each row as a one-token step does) and, at
// the end, padding after a finished row up to the longest one.
#include <algorithm>
#include <chrono>

#include "generation/generate.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"
#include "tessera/batch.h"
#include "tessera/error.h"

namespace tessera::generation {

namespace {
bool slots_can_run(const runtime::ModelCore& m, const GenerationConfig& cfg) {
  return !cfg.disable_compile && cfg.cache_implementation != "dynamic" && m.caps.shared_cache_rows &&
         !m.device_sampling && !(m.comm && m.comm->size() > 1);
}
}  // namespace

bool speculative_generate_applies(const runtime::ModelCore& m, const GenerationConfig& cfg) {
  return cfg.prompt_lookup_num_tokens > 0 && slots_can_run(m, cfg);
}

bool longrope_batch_applies(const runtime::ModelCore& m, const std::vector<std::vector<int32_t>>& input_ids,
                            const std::vector<std::vector<int32_t>>& attention_mask,
                            const GenerationConfig& cfg) {
  if (m.config.longrope_switch() <= 0 || !slots_can_run(m, cfg)) return false;
  const Prompts p = check_prompts(m, input_ids, attention_mask, cfg);
  if (input_ids.size() == 1 && p.pads[0] == 0) return false;  // generate() recomputes one sequence itself
  for (int32_t pad : p.pads)
    if (!m.config.rope_crossing_error(p.seq - pad, p.max_new).empty()) return true;
  return false;
}

GenerateOutput generate_speculative(CausalLM& model, runtime::ModelCore& m,
                                    const std::vector<std::vector<int32_t>>& input_ids,
                                    const std::vector<std::vector<int32_t>>& attention_mask,
                                    const GenerationConfig& cfg, const TokenCallback& on_token,
                                    CausalLM* assistant) {
  using clock = std::chrono::steady_clock;
  const Prompts p = check_prompts(m, input_ids, attention_mask, cfg);
  const int batch = static_cast<int>(input_ids.size());
  int cache_len = 0;
  for (int32_t pad : p.pads) cache_len = std::max(cache_len, m.bucket_for(p.seq - pad, true) + p.max_new);
  cache_len = static_cast<int>(std::min<int64_t>(cache_len, m.config.context_limit()));
  // Whole prompts, as generate() prefills them (not the prefix cache's chunks: some families' last bits
  // depend on how a prompt is split).
  SlotBatch slots(model, batch, cache_len,
                  {.host_sampling = true,
                   .decode_rows = SlotBatchOptions::DecodeRows::Running,
                   .prefix_cache = false,
                   .draft_model = assistant,
                   .draft_tokens = cfg.num_assistant_tokens});
  const uint64_t seed = cfg.seed ? *cfg.seed : sampling::fresh_seed();
  const runtime::CompileStats before = m.compile_stats();

  GenerateOutput out;
  out.sequences = input_ids;
  out.prompt_tokens = p.seq;
  out.prefill_len = m.bucket_for(p.seq, true);
  const auto t0 = clock::now();
  for (int b = 0; b < batch; ++b) {
    GenerationConfig row = cfg;
    row.seed = sampling::row_seed(seed, static_cast<uint32_t>(b));
    row.max_new_tokens = p.max_new;  // the padded prompt's budget, as generate() gives every row
    const std::vector<int32_t>& ids = input_ids[static_cast<size_t>(b)];
    slots.prefill(b, std::vector<int32_t>(ids.begin() + p.pads[static_cast<size_t>(b)], ids.end()), row,
                  on_token);
  }
  const auto t1 = clock::now();
  while (slots.running_count() > 0) slots.step();
  const auto t2 = clock::now();

  const int32_t pad_id = cfg.effective_pad_token_id().value_or(0);
  int64_t decoded = 0;
  for (int b = 0; b < batch; ++b) {
    const std::vector<int32_t>& t = slots.tokens(b);
    out.new_tokens = std::max(out.new_tokens, static_cast<int>(t.size()));
    decoded += static_cast<int64_t>(t.size()) - 1;
    out.finish_reasons.push_back(slots.state(b).finish);
  }
  for (int b = 0; b < batch; ++b) {
    std::vector<int32_t>& row = out.sequences[static_cast<size_t>(b)];
    const std::vector<int32_t>& t = slots.tokens(b);
    row.insert(row.end(), t.begin(), t.end());
    row.resize(static_cast<size_t>(p.seq + out.new_tokens), pad_id);
  }
  out.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  out.decode_seconds = std::chrono::duration<double>(t2 - t1).count();
  out.decode_steps = slots.steps();
  if (out.prefill_seconds > 0) out.prefill_tokens_per_s = batch * p.seq / out.prefill_seconds;
  if (decoded > 0 && out.decode_seconds > 0)
    out.decode_tokens_per_s = static_cast<double>(decoded) / out.decode_seconds;
  const SpeculationStats spec = slots.speculation();
  out.draft_tokens = spec.draft_tokens;
  out.accepted_tokens = spec.accepted_tokens;
  out.compiles = runtime::compile_report(before, m.compile_stats());
  return out;
}

}  // namespace tessera::generation
