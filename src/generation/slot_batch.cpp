// SlotBatch (include/tessera/batch.h): one KV cache of N rows, a row-mapped prefill per joining sequence and
// one decode program for all rows. Per-row choice of the next token and the stop rules are generation::RowState
// (rows.h), shared with generate().
#include "tessera/batch.h"

#include <algorithm>
#include <string>
#include <utility>

#include "generation/rows.h"
#include "generation/sampling_params.h"
#include "runtime/model_core.h"
#include "tessera/error.h"

namespace tessera {

namespace {

using backends::StepInputs;
using graph::Phase;
using graph::ShapeKey;

constexpr int kMaxSlots = 4096;

struct Slot {
  bool busy = false;
  generation::RowState row;
  TokenCallback on_token;
  std::vector<int32_t> out;  // new tokens
  int prompt_tokens = 0, prefill_len = 0;
  int kv_begin = 0;     // first cache position the row attends to (its bucket padding before it)
  int32_t last = 0;     // the last token (the next step's input)
  std::vector<float> logits;  // keep_logits: those of the last token
  // The next step writes `last` at cache position prefill_len + produced - 1, position prompt + produced - 1.
  int next_slot() const { return prefill_len + row.produced - 1; }
  int next_position() const { return prompt_tokens + row.produced - 1; }
};

}  // namespace

struct SlotBatch::Impl {
  runtime::ModelCore* m = nullptr;
  int n = 0, cache_len = 0;
  SlotBatchOptions options;
  bool on_device = false;  // the steps sample (Sampling::Sample: per-row kDoSample, so one program for all)
  graph::Sampling sampling = graph::Sampling::Off;
  std::unique_ptr<backends::DeviceCache> cache;
  std::vector<Slot> slots;
  int steps = 0;
  // Reused step buffers.
  StepInputs in;
  std::vector<float> logits;
  std::vector<int32_t> tokens;

  const Slot& at(int slot, const char* what) const {
    if (slot < 0 || slot >= n)
      fail("SlotBatch::", what, ": slot ", slot, " is out of range (the batch has ", n, " slots: 0..", n - 1, ")");
    return slots[static_cast<size_t>(slot)];
  }
  Slot& at(int slot, const char* what) { return const_cast<Slot&>(std::as_const(*this).at(slot, what)); }

  // The token chosen for step row `b` (host: from logits row `b`), or -1 with `why`.
  int32_t choose(Slot& s, int b, int slot, std::string& why) {
    const int64_t vocab = m->config.vocab_size;
    if (on_device) {
      const int32_t tok = tokens[static_cast<size_t>(b)];
      return generation::device_token_ok(tok, vocab, why) ? tok : -1;
    }
    float* row = logits.data() + static_cast<int64_t>(b) * vocab;
    if (options.keep_logits) s.logits.assign(row, row + vocab);
    return generation::host_token(s.row, row, vocab, static_cast<uint32_t>(slot), why);
  }

  void run(const ShapeKey& key) {
    std::unique_ptr<backends::Executable> scratch;
    const backends::Executable& exe = m->executable(key, false, scratch);
    if (on_device)
      exe.run_tokens(in, *cache, tokens);
    else
      exe.run(in, *cache, logits);
  }
};

SlotBatch::SlotBatch(CausalLM& model, int slots, int cache_len, const SlotBatchOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& b = *impl_;
  b.m = model.impl_.get();
  if (!b.m) fail("SlotBatch: the model was moved from");
  const int64_t max_pos = b.m->config.max_position_embeddings;
  if (slots < 1 || slots > kMaxSlots) fail("SlotBatch: slots must be in 1..", kMaxSlots, ", got ", slots);
  if (cache_len < 1 || cache_len > max_pos)
    fail("SlotBatch: cache_len must be in 1..", max_pos, " (max_position_embeddings), got ", cache_len);
  b.n = slots;
  b.cache_len = cache_len;
  b.options = options;
  b.on_device = b.m->device_sampling && !options.host_sampling;
  b.sampling = b.on_device ? graph::Sampling::Sample : graph::Sampling::Off;
  b.slots.resize(static_cast<size_t>(slots));
  b.cache = b.m->make_cache(slots, cache_len);
}

SlotBatch::SlotBatch(SlotBatch&&) noexcept = default;
SlotBatch& SlotBatch::operator=(SlotBatch&&) noexcept = default;
SlotBatch::~SlotBatch() = default;

int SlotBatch::slots() const { return impl_->n; }
int SlotBatch::cache_len() const { return impl_->cache_len; }
bool SlotBatch::device_sampling() const { return impl_->on_device; }
int SlotBatch::steps() const { return impl_->steps; }

int32_t SlotBatch::prefill(int slot, const std::vector<int32_t>& prompt, const GenerationConfig& cfg,
                           const TokenCallback& on_token) {
  Impl& b = *impl_;
  runtime::ModelCore& m = *b.m;
  Slot& s = b.at(slot, "prefill");
  if (s.busy)
    fail("SlotBatch::prefill: slot ", slot, " is busy (", s.row.running() ? "running" : "finished",
         "; release(", slot, ") frees it)");
  cfg.validate();
  if (cfg.disable_compile)
    fail("SlotBatch::prefill: disable_compile is not supported (the batch runs compiled programs only)");
  if (prompt.empty()) fail("SlotBatch::prefill: slot ", slot, ": empty prompt");
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= m.config.vocab_size)
      fail("SlotBatch::prefill: slot ", slot, ": prompt id ", prompt[i], " (index ", i,
           ") is out of range for vocab size ", m.config.vocab_size);
  const int len = static_cast<int>(prompt.size());
  const int64_t max_pos = m.config.max_position_embeddings;
  if (len > max_pos)
    fail("SlotBatch::prefill: slot ", slot, ": prompt of ", len, " tokens exceeds max_position_embeddings (",
         max_pos, ")");
  const int budget = cfg.new_token_budget(len, max_pos);
  if (len + budget > max_pos)
    fail("SlotBatch::prefill: slot ", slot, ": prompt (", len, " tokens) + max_new_tokens (", budget,
         ") exceeds max_position_embeddings (", max_pos, ")");
  const int bucket = m.bucket_for(len, true);
  if (static_cast<int64_t>(bucket) + budget - 1 > b.cache_len)
    fail("SlotBatch::prefill: slot ", slot, ": a prompt of ", len, " tokens (prefill bucket ", bucket, ") and ",
         budget, " new tokens need ", static_cast<int64_t>(bucket) + budget - 1,
         " cache positions; the batch has cache_len ", b.cache_len);
  const int extra = bucket - len;

  auto lock = m.step_lock();
  Slot fresh;
  fresh.row.start(cfg, cfg.seed ? *cfg.seed : generation::fresh_seed(), prompt, 0, budget);
  fresh.on_token = on_token;
  fresh.prompt_tokens = len;
  fresh.prefill_len = bucket;
  fresh.kv_begin = extra;

  // The prompt alone, left-padded to its bucket, into cache row `slot` (positions 0..bucket-1).
  const int32_t filler = cfg.effective_pad_token_id().value_or(0);
  StepInputs& in = b.in;
  in = StepInputs{};
  for (int i = 0; i < bucket; ++i) {
    in.ids.push_back(i < extra ? (filler >= 0 && filler < m.config.vocab_size ? filler : 0)
                               : prompt[static_cast<size_t>(i - extra)]);
    in.positions.push_back(i < extra ? 1 : i - extra);  // padding: masked, position 1 as in Transformers
    in.slots.push_back(i);
  }
  in.kv_begin = {extra};
  if (b.on_device) {
    in.seen_from = {extra};
    fresh.row.params.append_encoded(0, in.sample_params);
  }
  const bool mapped = b.n > 1;
  if (mapped) in.cache_rows = {slot};
  const ShapeKey key{.phase = Phase::Prefill, .batch = 1, .seq = bucket, .cache_len = b.cache_len,
                     .dtype = m.info.dtype, .sampling = b.sampling, .cache_rows = mapped ? b.n : 0};
  b.run(key);

  std::string why;
  int32_t tok = b.choose(fresh, 0, slot, why);
  if (tok < 0)
    fail("SlotBatch::prefill: slot ", slot, ", step 0: the model produced a non-finite logit (", why, ")");
  if (m.comm) m.comm->broadcast(&tok, sizeof tok, 0);
  int32_t keep = fresh.on_token(slot, tok);
  if (m.comm && fresh.on_token) m.comm->broadcast(&keep, sizeof keep, 0);
  generation::accept(fresh.row, tok, keep != 0);
  fresh.out.push_back(tok);
  fresh.last = tok;
  fresh.busy = true;
  s = std::move(fresh);
  return tok;
}

std::vector<SlotToken> SlotBatch::step() {
  Impl& b = *impl_;
  runtime::ModelCore& m = *b.m;
  std::vector<SlotToken> out;
  if (running_count() == 0) return out;
  auto lock = m.step_lock();
  // Every row of the cache: running slots at their own positions; the others harmless (token 0 at position 0
  // into their own row's first position, default sampling) and ignored.
  StepInputs& in = b.in;
  in = StepInputs{};
  const generation::SamplingParams idle;
  for (int r = 0; r < b.n; ++r) {
    const Slot& s = b.slots[static_cast<size_t>(r)];
    const bool run = s.busy && s.row.running();
    in.ids.push_back(run ? s.last : 0);
    in.positions.push_back(run ? s.next_position() : 0);
    in.slots.push_back(run ? s.next_slot() : 0);
    in.kv_begin.push_back(run ? s.kv_begin : 0);
    if (b.on_device) (run ? s.row.params : idle).append_encoded(run ? s.row.produced : 0, in.sample_params);
  }
  const ShapeKey key{.phase = Phase::Decode, .batch = b.n, .seq = 1, .cache_len = b.cache_len,
                     .dtype = m.info.dtype, .sampling = b.sampling};
  b.run(key);
  const int step = b.steps++;

  std::vector<int32_t> next(static_cast<size_t>(b.n), 0), keep(static_cast<size_t>(b.n), 1);
  int bad_slot = -1, bad_count = 0, bad_token = 0;
  std::string bad_why;
  for (int r = 0; r < b.n; ++r) {
    Slot& s = b.slots[static_cast<size_t>(r)];
    if (!s.busy || !s.row.running()) continue;
    std::string why;
    const int32_t tok = b.choose(s, r, r, why);
    if (tok < 0 && bad_count++ == 0) {
      bad_slot = r;
      bad_token = s.row.produced;
      bad_why = why;
    }
    next[static_cast<size_t>(r)] = tok;
  }
  if (m.comm) m.comm->broadcast(next.data(), next.size() * sizeof(int32_t), 0);
  bool callbacks = false;
  for (int r = 0; r < b.n; ++r) {
    Slot& s = b.slots[static_cast<size_t>(r)];
    if (!s.busy || !s.row.running() || next[static_cast<size_t>(r)] < 0) continue;
    callbacks = callbacks || static_cast<bool>(s.on_token);
    keep[static_cast<size_t>(r)] = s.on_token(r, next[static_cast<size_t>(r)]);
  }
  if (m.comm && callbacks) m.comm->broadcast(keep.data(), keep.size() * sizeof(int32_t), 0);
  for (int r = 0; r < b.n; ++r) {
    Slot& s = b.slots[static_cast<size_t>(r)];
    if (!s.busy || !s.row.running()) continue;
    const int32_t tok = next[static_cast<size_t>(r)];
    if (tok < 0) {  // no token: the slot ends here
      s.row.finish = FinishReason::Error;
      continue;
    }
    generation::accept(s.row, tok, keep[static_cast<size_t>(r)] != 0);
    s.out.push_back(tok);
    s.last = tok;
    out.push_back({r, tok, s.row.finish});
  }
  if (bad_slot >= 0)
    fail("SlotBatch::step: step ", step, ", slot ", bad_slot, " (its token ", bad_token,
         "): the model produced a non-finite logit (", bad_why, ")",
         bad_count > 1 ? detail::concat("; ", bad_count - 1, " more slot(s) likewise") : std::string(),
         "; the slot has ended (FinishReason::Error), the other slots' tokens are taken");
  m.generation_done();  // the recompile guard counts from here (a prefill and the decode program are compiled)
  return out;
}

void SlotBatch::release(int slot) {
  Slot& s = impl_->at(slot, "release");
  if (!s.busy) fail("SlotBatch::release: slot ", slot, " is not busy (it is free already)");
  s = Slot{};
}

bool SlotBatch::busy(int slot) const { return impl_->at(slot, "busy").busy; }

bool SlotBatch::running(int slot) const {
  const Slot& s = impl_->at(slot, "running");
  return s.busy && s.row.running();
}

int SlotBatch::free_slot() const {
  for (int r = 0; r < impl_->n; ++r)
    if (!impl_->slots[static_cast<size_t>(r)].busy) return r;
  return -1;
}

int SlotBatch::running_count() const {
  int c = 0;
  for (const Slot& s : impl_->slots) c += s.busy && s.row.running();
  return c;
}

SlotState SlotBatch::state(int slot) const {
  const Slot& s = impl_->at(slot, "state");
  SlotState st;
  st.busy = s.busy;
  if (!s.busy) return st;
  st.running = s.row.running();
  st.finish = s.row.finish;
  st.prompt_tokens = s.prompt_tokens;
  st.prefill_len = s.prefill_len;
  st.new_tokens = s.row.produced;
  st.budget = s.row.budget;
  st.next_slot = s.next_slot();
  return st;
}

const std::vector<int32_t>& SlotBatch::tokens(int slot) const {
  return impl_->at(slot, "tokens").out;
}

const std::vector<float>& SlotBatch::last_logits(int slot) const {
  const Slot& s = impl_->at(slot, "last_logits");
  if (!impl_->options.keep_logits || impl_->on_device)
    fail("SlotBatch::last_logits: logits are kept only with SlotBatchOptions::keep_logits and host sampling");
  return s.logits;
}

}  // namespace tessera
