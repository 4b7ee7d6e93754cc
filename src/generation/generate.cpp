// The generate loop. The host owns input ids, the growing output, the attention mask and the stopping state
// (one generation::RowState per row); each step hands the backend only (ids, positions, slots, kv_begin, and
// where the step samples, the sampling parameters) and gets back logits (the host samples) or only the
// chosen token ids (in-step sampling). Prompts are left-padded to their bucket.
#include "generation/generate.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "generation/rows.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"
#include "tessera/error.h"
#include "tessera/log.h"

namespace tessera::generation {

using backends::StepInputs;
using graph::Phase;
using graph::ShapeKey;

std::vector<int32_t> left_padding(const std::vector<std::vector<int32_t>>& mask, size_t len) {
  std::vector<int32_t> pads;
  for (size_t b = 0; b < mask.size(); ++b) {
    const auto& m = mask[b];
    if (m.size() != len)
      fail("attention_mask row ", b, " has length ", m.size(), ", input_ids rows have ", len);
    size_t p = 0;
    while (p < m.size() && m[p] == 0) ++p;
    for (size_t i = p; i < m.size(); ++i)
      if (m[i] != 1) fail("attention_mask row ", b, ": only left padding (0s then 1s) is supported");
    if (p == m.size()) fail("attention_mask row ", b, " masks every token (empty prompt)");
    pads.push_back(static_cast<int32_t>(p));
  }
  return pads;
}

Prompts check_prompts(const runtime::ModelCore& m, const std::vector<std::vector<int32_t>>& input_ids,
                      const std::vector<std::vector<int32_t>>& attention_mask, const GenerationConfig& cfg) {
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
  Prompts p;
  p.pads = left_padding(mask, len);
  p.seq = static_cast<int>(len);
  int max_real = 0;
  for (int32_t pad : p.pads) max_real = std::max(max_real, p.seq - pad);
  // Transformers' max_length rules: max_new_tokens, else max_length (which counts the prompt, padding
  // included).
  p.max_new = cfg.new_token_budget(p.seq, m.config.max_position_embeddings);  // Transformers' cap
  if (max_real + p.max_new > m.config.context_limit())
    fail("generate: prompt (", max_real, " tokens) + max_new_tokens (", p.max_new, ") exceeds ",
         m.config.context_limit_str());
  return p;
}

GenerateOutput generate(runtime::ModelCore& m, const std::vector<std::vector<int32_t>>& input_ids,
                        const std::vector<std::vector<int32_t>>& attention_mask, const GenerationConfig& cfg,
                        const TokenCallback& on_token) {
  using clock = std::chrono::steady_clock;
  const Prompts p = check_prompts(m, input_ids, attention_mask, cfg);
  const std::vector<int32_t>& pads = p.pads;
  const int batch = static_cast<int>(input_ids.size());
  const int seq = p.seq;
  const int64_t vocab = m.config.vocab_size;
  const int max_new = p.max_new;
  // Phi-3 longrope: one unpadded sequence decoding across the switch is recomputed whole at that step, as
  // Transformers' Phi3ForCausalLM does (prepare_inputs_for_generation drops its cache). A batch, or a row
  // with left padding, runs over a SlotBatch (CausalLM::generate: longrope_batch_applies), each row as alone
  // (Transformers decides on the padded batch); where it cannot, it is refused here.
  const int64_t switch_at = m.config.longrope_switch();
  if (switch_at > 0 && (batch > 1 || pads[0] > 0))
    for (int b = 0; b < batch; ++b)
      if (const std::string why = m.config.rope_crossing_error(seq - pads[static_cast<size_t>(b)], max_new);
          !why.empty())
        fail("generate: row ", b, " (a batch of ", batch, ", ", pads[static_cast<size_t>(b)],
             " tokens of left padding): ", why);

  auto lock = m.step_lock();
  const bool dynamic = cfg.cache_implementation == "dynamic";
  // Bucketed prefill: `extra` more left padding up to the bucket; slots stay contiguous from 0.
  const int prefill_len = m.bucket_for(seq, true);
  const int extra = prefill_len - seq;
  auto cache_len_for = [&](int needed) {
    return dynamic ? (needed + kDynamicChunk - 1) / kDynamicChunk * kDynamicChunk : prefill_len + max_new;
  };
  int cache_len = cache_len_for(prefill_len + 1);
  auto cache = m.make_cache(batch, cache_len);

  const int32_t pad_id = cfg.effective_pad_token_id().value_or(0);
  const uint64_t seed = cfg.seed ? *cfg.seed : fresh_seed();
  const runtime::CompileStats before = m.compile_stats();
  // The step samples where the backend does (only token ids come back), except when the cache grows (the
  // sampler state is not carried over) or ops run one by one.
  if (cfg.constraint && cfg.constraint->vocab_size() != vocab)
    fail("generate: the constraint was compiled for a vocabulary of ", cfg.constraint->vocab_size(),
         " ids, the model has ", vocab);
  // Constrained rows' masks are computed on the host: an input of the compiled step where it samples.
  const bool on_device = m.device_sampling && !dynamic && !cfg.disable_compile;
  const graph::Sampling sampling = m.sampling_for(on_device, cfg.do_sample);

  GenerateOutput out;
  out.sequences = input_ids;
  out.prompt_tokens = seq;
  out.prefill_len = prefill_len;
  out.device_sampling = on_device;
  std::vector<RowState> rows(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b)
    rows[static_cast<size_t>(b)].start(cfg, row_seed(seed, static_cast<uint32_t>(b)),
                                       input_ids[static_cast<size_t>(b)],
                                       static_cast<size_t>(pads[static_cast<size_t>(b)]), max_new);

  // Prefill: the whole prompt left-padded to the bucket; slots 0..prefill_len-1.
  const int32_t filler = pad_id >= 0 && pad_id < m.config.vocab_size ? pad_id : 0;  // masked; any valid id
  std::vector<int32_t> kv_begin(static_cast<size_t>(batch));                        // [batch]
  for (int b = 0; b < batch; ++b) kv_begin[static_cast<size_t>(b)] = pads[static_cast<size_t>(b)] + extra;
  StepInputs in;
  in.ids.reserve(static_cast<size_t>(batch * prefill_len));
  for (int b = 0; b < batch; ++b) {
    for (int s = 0; s < prefill_len; ++s) {
      in.ids.push_back(s < extra ? filler
                                 : input_ids[static_cast<size_t>(b)][static_cast<size_t>(s - extra)]);
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
  // Programs made before the clocks started (below), each used once in place of its first lookup, so the
  // compile counters read as if the step had compiled it.
  const backends::Executable* made[2] = {nullptr, nullptr};
  ShapeKey made_key[2];
  auto run_step = [&](const ShapeKey& key, int step) {
    const backends::Executable* ready = nullptr;
    for (int i = 0; i < 2; ++i)
      if (made[i] && made_key[i] == key) {
        ready = made[i];
        made[i] = nullptr;
        break;
      }
    const backends::Executable& exe = ready ? *ready : m.executable(key, cfg.disable_compile, scratch);
    if (on_device) {
      in.sample_params.clear();
      for (const RowState& r : rows) r.params.append_encoded(step, in.sample_params);
      std::vector<const RowState*> row_ptrs;
      for (const RowState& r : rows) row_ptrs.push_back(&r);
      in.token_mask = step_token_masks(row_ptrs, vocab);
      exe.run_tokens(in, *cache, device_tokens);
    } else {
      exe.run(in, *cache, logits);
    }
  };
  ShapeKey prefill_key{.phase = Phase::Prefill,
                       .batch = batch,
                       .seq = prefill_len,
                       .cache_len = cache_len,
                       .dtype = m.info.dtype,
                       .sampling = sampling};
  // The programs are made (compiled, or loaded from the disk cache) before the clocks start, so prefill and
  // decode tokens/s time the steps, not the compiler: in a process that compiled its decode program inside
  // the decode clock, SmolLM2 on xla-cpu read ~10 tok/s against ~45 in one that loaded it from disk. Compile
  // time is reported in GenerateOutput::compiles. (The dynamic cache's later shapes still compile when it
  // grows.)
  if (!cfg.disable_compile && !(m.prefill_chunk > 0 && prefill_len > m.prefill_chunk)) {
    made_key[0] = prefill_key;
    made[0] = &m.executable(prefill_key, false, scratch);
  }
  if (!cfg.disable_compile) {
    if (!dynamic && max_new > 1) {
      made_key[1] = ShapeKey{.phase = Phase::Decode,
                             .batch = batch,
                             .seq = 1,
                             .cache_len = cache_len,
                             .dtype = m.info.dtype,
                             .sampling = sampling};
      made[1] = &m.executable(made_key[1], false, scratch);
    }
  }
  auto t0 = clock::now();
  // A long prompt in chunks (ModelCore::prefill_chunk): columns [c0, c1) of every row per step, over the
  // keys and values (and recurrent state) the earlier chunks wrote; the last chunk's logits are the prompt's.
  const int chunk = m.prefill_chunk;
  if (chunk > 0 && prefill_len > chunk && !on_device && prefill_len <= m.config.rope_split_limit()) {
    const StepInputs whole = std::move(in);
    for (int c0 = 0; c0 < prefill_len; c0 += chunk) {
      const int c1 = std::min(prefill_len, c0 + chunk);
      in = StepInputs{};
      for (int b = 0; b < batch; ++b)
        for (int s = c0; s < c1; ++s) {
          in.ids.push_back(whole.ids[static_cast<size_t>(b * prefill_len + s)]);
          in.positions.push_back(whole.positions[static_cast<size_t>(b * prefill_len + s)]);
        }
      for (int s = c0; s < c1; ++s) in.slots.push_back(s);
      in.kv_begin = whole.kv_begin;
      ShapeKey key = prefill_key;
      key.seq = c1 - c0;
      run_step(key, 0);
    }
    in = StepInputs{};
    in.kv_begin = whole.kv_begin;
  } else {
    run_step(prefill_key, 0);
  }
  in.seen_from.clear();
  auto t1 = clock::now();
  out.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

  const backends::TransferStats transfers_before = m.backend->transfer_stats();
  std::optional<ShapeKey> last_decode;
  int decode_runs = 0;
  std::vector<int32_t> next(static_cast<size_t>(batch)), keep(static_cast<size_t>(batch));
  for (int step = 0; step < max_new; ++step) {
    // The next token of every row: chosen by the step itself, or here from `logits` [batch, vocab].
    for (int b = 0; b < batch; ++b) {
      RowState& r = rows[static_cast<size_t>(b)];
      int32_t tok = pad_id;  // a finished row gets padding
      if (r.running()) {
        std::string why;
        tok = on_device ? device_tokens[static_cast<size_t>(b)]
                        : host_token(r, logits.data() + static_cast<int64_t>(b) * vocab, vocab, why);
        // A NaN or infinite logit is an error naming where it appeared, never a token.
        if ((on_device && !device_token_ok(tok, vocab, why)) || (!on_device && tok < 0))
          fail("generate: step ", step, ", row ", b, ": the model produced a non-finite logit (", why, ")");
      }
      next[static_cast<size_t>(b)] = tok;
    }
    if (m.comm) m.comm->broadcast(next.data(), next.size() * sizeof(int32_t), 0);
    // The callback sees each running row's token (and may stop the row); rank 0 decides for every rank.
    // A constrained row that is complete ends after this token the same way.
    for (int b = 0; b < batch; ++b) {
      RowState& r = rows[static_cast<size_t>(b)];
      if (!r.running()) {
        keep[static_cast<size_t>(b)] = 1;
        continue;
      }
      const bool goes_on = constraint_step(r, next[static_cast<size_t>(b)]);
      keep[static_cast<size_t>(b)] = on_token(b, next[static_cast<size_t>(b)]) && goes_on;
    }
    if (m.comm && (on_token || cfg.constraint))
      m.comm->broadcast(keep.data(), keep.size() * sizeof(int32_t), 0);
    bool all_done = true;
    for (int b = 0; b < batch; ++b) {
      RowState& r = rows[static_cast<size_t>(b)];
      out.sequences[static_cast<size_t>(b)].push_back(next[static_cast<size_t>(b)]);
      if (r.running()) accept(r, next[static_cast<size_t>(b)], keep[static_cast<size_t>(b)] != 0);
      all_done = all_done && !r.running();
    }
    out.new_tokens = step + 1;
    if (all_done || step + 1 == max_new) break;

    // Decode: one token per row at slot prefill_len + step.
    const int slot = prefill_len + step;
    if (slot >= cache_len) {  // dynamic cache: grow by a chunk (the decode shape changes: expected)
      int grown = cache_len_for(slot + 1);
      auto bigger = m.make_cache(batch, grown);
      m.backend->copy_cache(*cache, *bigger);
      cache = std::move(bigger);
      cache_len = grown;
    }
    ShapeKey key{.phase = Phase::Decode,
                 .batch = batch,
                 .seq = 1,
                 .cache_len = cache_len,
                 .dtype = m.info.dtype,
                 .sampling = sampling};
    if (!cfg.disable_compile && !dynamic && last_decode && !(*last_decode == key) && !m.cache->contains(key))
      log_warning("recompiling during decode at step ", step, ": ", key.str(),
                  " (changed: ", last_decode->diff(key), ")");
    last_decode = key;
    in.ids = next;
    in.positions.clear();
    for (int b = 0; b < batch; ++b) in.positions.push_back(seq - pads[static_cast<size_t>(b)] + step);
    in.slots = {slot};  // every row writes the same slot (the [seq] form of StepInputs::slots)
    std::vector<ConstraintMatcher*> masks;  // computed while the step runs (host sampling: after it)
    for (RowState& r : rows)
      if (!on_device && r.running() && r.constraint) masks.push_back(r.constraint.get());
    if (batch == 1 && pads[0] == 0 && switch_at > 0 && seq <= switch_at && in.positions[0] == switch_at) {
      // The first token past longrope's switch: the whole sequence again, one forward over slots 0..slot
      // (every key rotated with the long factors), its last logits giving the next token.
      in.ids.clear();
      in.positions.clear();
      in.slots.clear();
      for (int s = 0; s <= slot; ++s) {
        in.ids.push_back(s < extra ? filler : out.sequences[0][static_cast<size_t>(s - extra)]);
        const int pos = s - kv_begin[0];
        in.positions.push_back(pos < 0 ? 1 : pos);
        in.slots.push_back(s);
      }
      if (on_device) in.seen_from = kv_begin;
      const ShapeKey whole{.phase = Phase::Prefill,
                           .batch = 1,
                           .seq = slot + 1,
                           .cache_len = cache_len,
                           .dtype = m.info.dtype,
                           .sampling = sampling};
      overlap_masks(masks, [&] { run_step(whole, step + 1); });
      in.seen_from.clear();
      ++decode_runs;
      continue;
    }
    overlap_masks(masks, [&] { run_step(key, step + 1); });
    ++decode_runs;
  }
  auto t2 = clock::now();
  out.decode_seconds = std::chrono::duration<double>(t2 - t1).count();
  out.decode_steps = decode_runs;
  if (m.caps.counts_transfers) {
    const backends::TransferStats now = m.backend->transfer_stats();
    out.decode_h2d_bytes = now.h2d_bytes - transfers_before.h2d_bytes;
    out.decode_d2h_bytes = now.d2h_bytes - transfers_before.d2h_bytes;
  }
  for (const RowState& r : rows) out.finish_reasons.push_back(r.finish);
  if (out.prefill_seconds > 0) out.prefill_tokens_per_s = batch * seq / out.prefill_seconds;
  if (decode_runs > 0 && out.decode_seconds > 0)
    out.decode_tokens_per_s = batch * decode_runs / out.decode_seconds;
  out.compiles = runtime::compile_report(before, m.compile_stats());
  if (cfg.disable_compile) out.compiles.compiles = 1 + decode_runs;  // every step planned afresh
  m.generation_done();
  return out;
}

}  // namespace tessera::generation
