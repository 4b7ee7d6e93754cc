// SlotBatch (include/tessera/batch.h): one KV cache of N rows, a row-mapped prefill per joining sequence and
// one decode program for all rows. Per-row choice of the next token and the stop rules are
// generation::RowState (rows.h), shared with generate().
#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "generation/drafter.h"
#include "generation/rows.h"
#include "generation/speculation.h"
#include "runtime/model_core.h"
#include "sampling/sampling_params.h"
#include "tessera/batch.h"
#include "tessera/error.h"

namespace tessera {

namespace {

using backends::StepInputs;
using graph::Phase;
using graph::ShapeKey;

constexpr int kMaxSlots = 4096;
constexpr int kReplayRows = 32;  // a resumed sequence's new tokens recomputed this many per decode program

struct Slot {
  bool busy = false;
  generation::RowState row;
  TokenCallback on_token;
  std::vector<int32_t> out;  // new tokens
  int prompt_tokens = 0, prefill_len = 0;
  int kv_begin = 0;  // first cache position the row attends to (its bucket padding before it)
  int32_t last = 0;  // the last token (the next step's input)
  // keep_logits: the logits of the tokens the last prefill or step gave, tokens logits_from.. of `out`: the
  // first `kept_logits` rows (the rows' storage is reused step after step).
  std::vector<std::vector<float>> logits;
  int logits_from = 0, kept_logits = 0;
  void restart_logits() {
    logits_from = static_cast<int>(out.size());
    kept_logits = 0;
  }
  void keep_logits(const float* row, int64_t vocab) {
    if (static_cast<size_t>(kept_logits) == logits.size()) logits.emplace_back();
    logits[static_cast<size_t>(kept_logits++)].assign(row, row + vocab);
  }
  std::vector<int32_t> padded;  // the prompt padded on the left, until its prefill is done
  std::vector<int32_t> prompt;  // prefix_reuse: the prompt, for what the cache row holds once released
  int chunk = 0;                // prefill_chunked: chunk length (0: one prefill)
  int chunks_done = 0;
  // Prompt lookup (GenerationConfig::prompt_lookup_num_tokens, where the batch can verify drafts): the
  // sequence so far (prompt, then new tokens) and how far the row drafts.
  std::vector<int32_t> seq;
  generation::DraftControl draft;
  int ngram = 0;
  // Paged KV memory with a cap (SlotBatchOptions::kv_cache_bytes): when it started (the latest started is
  // preempted first), whether it is preempted now, and its padded prompt once run (what a resume recomputes).
  uint64_t started = 0;
  bool preempted = false;
  std::vector<int32_t> recompute;
  // Phi-3 longrope: the new tokens its whole-sequence run at the switch took in (Impl::cross; 0: not
  // crossed). A resume then recomputes that run (`recompute` holds its padded tokens) and replays the tokens
  // after it.
  int crossed_out = 0;
  bool prefilling() const { return !padded.empty(); }
  // Runs in the next step (a prompt chunk or a token): busy, not finished, not preempted.
  bool active() const { return busy && row.running() && !preempted; }
  // The next step writes `last` at cache position prefill_len + produced - 1, position prompt + produced - 1.
  int next_slot() const { return prefill_len + row.produced - 1; }
  int next_position() const { return prompt_tokens + row.produced - 1; }
};

// What rank 0 sends its followers before each operation (SlotBatchOptions::lead_followers); `bytes` of
// payload follow it: the prompt's ids, then the encoded GenerationConfig.
enum class Op : int32_t { Prefill = 1, PrefillChunked, Step, Release, Warmup, Stop };
struct Command {
  Op op = Op::Stop;
  int32_t slot = 0, arg = 0;  // arg: the chunk (PrefillChunked) or max_prompt (Warmup)
  int32_t callback = 0;       // rank 0's sequence has a token callback (so its keep flags are broadcast)
  int32_t prompt_len = 0, config_bytes = 0;
};

// GenerationConfig as bytes for the followers (every field; they run the same RowState from it).
class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    const char* p = reinterpret_cast<const char*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof v);
  }
  template <typename T>
  void put_opt(const std::optional<T>& v) {
    put<int32_t>(v.has_value());
    put(v.value_or(T{}));
  }
  std::vector<char> bytes;
};
class Reader {
 public:
  Reader(const char* p, size_t n) : p_(p), end_(p + n) {}
  template <typename T>
  T get() {
    if (static_cast<size_t>(end_ - p_) < sizeof(T))
      fail("SlotBatch::follow: a truncated command from rank 0");
    T v;
    std::memcpy(&v, p_, sizeof v);
    p_ += sizeof v;
    return v;
  }
  template <typename T>
  std::optional<T> get_opt() {
    const bool has = get<int32_t>() != 0;
    const T v = get<T>();
    return has ? std::optional<T>(v) : std::nullopt;
  }

 private:
  const char* p_;
  const char* end_;
};

std::vector<char> encode_config(const GenerationConfig& c) {
  Writer w;
  w.put_opt(c.max_new_tokens);
  w.put<int32_t>(c.max_length);
  w.put<int32_t>(c.max_length_is_default);
  w.put<int32_t>(c.do_sample);
  w.put(c.temperature);
  w.put<int32_t>(c.top_k);
  w.put(c.top_p);
  w.put(c.min_p);
  w.put(c.repetition_penalty);
  w.put_opt(c.seed);
  w.put<int32_t>(static_cast<int32_t>(c.eos_token_id.size()));
  for (int32_t e : c.eos_token_id) w.put(e);
  w.put_opt(c.pad_token_id);
  w.put_opt(c.bos_token_id);
  w.put<int32_t>(static_cast<int32_t>(c.cache_implementation.size()));
  w.bytes.insert(w.bytes.end(), c.cache_implementation.begin(), c.cache_implementation.end());
  w.put<int32_t>(c.disable_compile);
  w.put<int32_t>(c.prompt_lookup_num_tokens);
  w.put<int32_t>(c.max_matching_ngram_size);
  w.put<int32_t>(c.num_assistant_tokens);
  return std::move(w.bytes);
}

GenerationConfig decode_config(const char* p, size_t n) {
  Reader r(p, n);
  GenerationConfig c;
  c.max_new_tokens = r.get_opt<int>();
  c.max_length = r.get<int32_t>();
  c.max_length_is_default = r.get<int32_t>() != 0;
  c.do_sample = r.get<int32_t>() != 0;
  c.temperature = r.get<float>();
  c.top_k = r.get<int32_t>();
  c.top_p = r.get<float>();
  c.min_p = r.get<float>();
  c.repetition_penalty = r.get<float>();
  c.seed = r.get_opt<uint64_t>();
  c.eos_token_id.resize(static_cast<size_t>(std::max(0, r.get<int32_t>())));
  for (int32_t& e : c.eos_token_id) e = r.get<int32_t>();
  c.pad_token_id = r.get_opt<int32_t>();
  c.bos_token_id = r.get_opt<int32_t>();
  c.cache_implementation.resize(static_cast<size_t>(std::max(0, r.get<int32_t>())));
  for (char& ch : c.cache_implementation) ch = r.get<char>();
  c.disable_compile = r.get<int32_t>() != 0;
  c.prompt_lookup_num_tokens = r.get<int32_t>();
  c.max_matching_ngram_size = r.get<int32_t>();
  c.num_assistant_tokens = r.get<int32_t>();
  return c;
}

}  // namespace

// What a released slot's cache row still holds (prefix_reuse): `tokens[i]` at cache position kv_begin + i.
struct Kept {
  int kv_begin = 0;
  std::vector<int32_t> tokens;
};

struct SlotBatch::Impl {
  runtime::ModelCore* m = nullptr;
  int n = 0, cache_len = 0;
  SlotBatchOptions options;
  bool on_device = false;  // the steps sample (Sampling::Sample: per-row kDoSample, so one program for all)
  bool running_rows_only = false;  // decode steps run the running slots only (DecodeRows::Running)
  // Draft tokens can be verified in a decode step (rows of one slot sharing its cache row): running rows
  // only, host sampling, a backend with Capabilities::shared_cache_rows, one process.
  bool can_speculate = false;
  SpeculationStats spec;
  graph::Sampling sampling = graph::Sampling::Off;
  std::unique_ptr<backends::DeviceCache> cache;
  std::vector<Slot> slots;
  std::vector<Kept> kept;  // per slot (prefix_reuse)
  // prefix_cache (where it applies: caching): per cache row, the prompt tokens whose keys and values the row
  // holds as the canonical chunks computed them (whole chunks from position 0), and when they were last used.
  bool caching = false;
  // The model keeps a recurrent state (linear attention): a row's cached chunks are usable only all together,
  // from the state snapshot taken after its last whole chunk (Backend::snapshot_state).
  bool recurrent = false;
  struct RowChunks {
    std::vector<int32_t> tokens;
    uint64_t used = 0;
  };
  std::vector<RowChunks> chunks;
  uint64_t clock = 0;
  struct Hit {
    int row = -1, tokens = 0;
  };
  // A prompt of `len` tokens past a length-dependent rope's switch (DecoderConfig::rope_split_limit):
  // computed whole, never in chunks, from a cached or reused prefix, or cached for others.
  bool runs_whole(int64_t len) const { return len > m->config.rope_split_limit(); }
  // Phi-3 longrope (DecoderConfig::longrope_switch): a sequence whose prompt ran with the short factors and
  // whose next input sits at the switch position is computed again whole, as Transformers' Phi3ForCausalLM
  // does there (its cache dropped): one prompt run of every token so far into its cache row, every key
  // rotated with the long factors, whose last logits give the next token. Per sequence, as it would run
  // alone: its neighbours' positions never decide it.
  bool crosses_now(const Slot& s) const { return before_switch(s) == 0; }
  // The positions a step of `s` may still feed with the short factors (its next token and drafts): up to the
  // switch, exclusive (0: its next input sits at the switch); unlimited when it crossed or never will.
  int before_switch(const Slot& s) const {
    const int64_t at = m->config.longrope_switch();
    if (at <= 0 || s.crossed_out > 0 || s.prompt_tokens > at || s.next_position() > at)
      return std::numeric_limits<int>::max();
    return static_cast<int>(at - s.next_position());
  }
  int32_t cross(Slot& s, int slot);
  // Per cache row: the tokens of the whole chunks `prompt` shares with it (never its last token).
  std::vector<int> row_hits(const std::vector<int32_t>& prompt) const {
    std::vector<int> hits(static_cast<size_t>(n), 0);
    if (!caching || prompt.empty() || runs_whole(static_cast<int64_t>(prompt.size()))) return hits;
    const size_t block = static_cast<size_t>(options.prefix_block);
    const size_t cap = (prompt.size() - 1) / block * block;
    for (int r = 0; r < n; ++r) {
      const std::vector<int32_t>& t = chunks[static_cast<size_t>(r)].tokens;
      const size_t limit = std::min(cap, t.size());
      size_t common = 0;
      while (common < limit && t[common] == prompt[common]) ++common;
      const size_t hit = common / block * block;
      hits[static_cast<size_t>(r)] = recurrent && hit != t.size() ? 0 : static_cast<int>(hit);
    }
    return hits;
  }
  // The longest of them; ties: `prefer`'s row, else the lowest.
  Hit find_cached(const std::vector<int32_t>& prompt, int prefer) const {
    const std::vector<int> hits = row_hits(prompt);
    Hit best;
    for (int r = 0; r < n; ++r) {
      const int h = hits[static_cast<size_t>(r)];
      if (h > best.tokens || (h > 0 && h == best.tokens && r == prefer)) best = {r, h};
    }
    return best;
  }
  int64_t reused = 0;
  int steps = 0;

  // Paged KV memory (SlotBatchOptions::kv_cache_bytes): `held` blocks per cache row, `pool` in all (capped:
  // fewer than every row's cache_len, so sequences may be preempted).
  bool paging = false, capped = false;
  backends::CachePaging page;  // one layer's keys of one kv head
  int64_t block_bytes = 0;     // every layer's keys and values
  int64_t pool = 0, preemptions = 0;
  uint64_t starts = 0;
  std::vector<int64_t> held;
  int64_t blocks(int64_t slots) const {
    return paging ? (slots + page.block_tokens - 1) / page.block_tokens : 0;
  }
  int64_t used_blocks() const { return std::accumulate(held.begin(), held.end(), int64_t{0}); }
  int64_t free_blocks() const { return pool - used_blocks(); }
  int64_t cached_blocks() const {
    int64_t c = 0;
    for (int r = 0; r < n; ++r) c += slots[static_cast<size_t>(r)].busy ? 0 : held[static_cast<size_t>(r)];
    return c;
  }
  // Row `row`'s slots [0, written) hold what was written there.
  void grow(int row, int64_t written) {
    if (paging) held[static_cast<size_t>(row)] = std::max(held[static_cast<size_t>(row)], blocks(written));
  }
  // Gives back the memory of row `row` past the whole blocks that hold its first `keep` slots.
  void shrink(int row, int64_t keep) {
    if (!paging) return;
    int64_t& h = held[static_cast<size_t>(row)];
    const int64_t kb = blocks(keep);
    if (h <= kb) return;
    m->backend->release_cache_slots(*cache, row,
                                    static_cast<int>(std::min<int64_t>(cache_len, kb * page.block_tokens)));
    h = kb;
  }
  // Evicts free rows' cached prefixes (least recently used first; never rows `keep_a`, `keep_b`) until `need`
  // blocks are free. Whether they are.
  bool make_room(int64_t need, int keep_a = -1, int keep_b = -1) {
    while (free_blocks() < need) {
      int victim = -1;
      for (int r = 0; r < n; ++r) {
        if (slots[static_cast<size_t>(r)].busy || held[static_cast<size_t>(r)] == 0 || r == keep_a ||
            r == keep_b)
          continue;
        if (victim < 0 || chunks[static_cast<size_t>(r)].used < chunks[static_cast<size_t>(victim)].used)
          victim = r;
      }
      if (victim < 0) return false;
      chunks[static_cast<size_t>(victim)].tokens.clear();
      shrink(victim, 0);
    }
    return true;
  }
  // Running sequences that are not preempted.
  int active_count() const {
    int c = 0;
    for (const Slot& s : slots) c += s.active();
    return c;
  }
  // Cache slots a running sequence's next operation writes up to: its next prompt chunk, or its next token.
  static int64_t next_extent(const Slot& s) {
    return s.prefilling() ? std::min(s.prefill_len, (s.chunks_done + 1) * s.chunk) : s.next_slot() + 1;
  }
  int64_t step_need(int r) const {
    const Slot& s = slots[static_cast<size_t>(r)];
    return std::max<int64_t>(0, blocks(next_extent(s)) - held[static_cast<size_t>(r)]);
  }
  void preempt(int r) {
    Slot& s = slots[static_cast<size_t>(r)];
    s.preempted = true;
    if (s.prefilling()) s.chunks_done = 0;
    if (drafter) drafter->reset(r);  // its draft cache is recomputed as it drafts again
    chunks[static_cast<size_t>(r)].tokens.clear();
    shrink(r, 0);
    ++preemptions;
  }
  void resume(int r);
  // Before a step (capped pools): resumes preempted sequences whose blocks are free (the earliest started
  // first, and none past one that waits), then frees the blocks this step writes: cached prefixes first,
  // then preempting the latest started sequences.
  void plan_memory();
  // The prompt runs of `s` into cache row `slot` (a prefill, or a resume recomputing it): as prefill() runs
  // them, with the blocks they take made free first.
  void compute_prompt(Slot& s, int slot, int reuse_tokens, int reuse_from);

  bool leading = false;  // rank 0 of an MPI group with lead_followers: operations are announced
  bool followers_stopped = false;
  // Rank 0 (leading): sends the followers the operation about to run.
  void announce(Op op, int slot = 0, int arg = 0, const std::vector<int32_t>* prompt = nullptr,
                const GenerationConfig* cfg = nullptr, bool callback = false) {
    if (!leading || followers_stopped) return;
    Command c;
    c.op = op;
    c.slot = slot;
    c.arg = arg;
    c.callback = callback;
    std::vector<char> payload;
    if (prompt) {
      c.prompt_len = static_cast<int32_t>(prompt->size());
      const char* p = reinterpret_cast<const char*>(prompt->data());
      payload.assign(p, p + prompt->size() * sizeof(int32_t));
    }
    if (cfg) {
      const std::vector<char> bytes = encode_config(*cfg);
      c.config_bytes = static_cast<int32_t>(bytes.size());
      payload.insert(payload.end(), bytes.begin(), bytes.end());
    }
    m->comm->broadcast(&c, sizeof c, 0);
    if (!payload.empty()) m->comm->broadcast(payload.data(), payload.size(), 0);
    if (op == Op::Stop) followers_stopped = true;
  }
  // Reused step buffers.
  StepInputs in;
  std::vector<float> logits;
  std::vector<int32_t> tokens;

  const Slot& at(int slot, const char* what) const {
    if (slot < 0 || slot >= n)
      fail("SlotBatch::", what, ": slot ", slot, " is out of range (the batch has ", n, " slots: 0..", n - 1,
           ")");
    return slots[static_cast<size_t>(slot)];
  }
  Slot& at(int slot, const char* what) { return const_cast<Slot&>(std::as_const(*this).at(slot, what)); }

  // The token chosen for step row `b` (host: from logits row `b`), or -1 with `why`. Its draw is keyed by the
  // sequence's seed and token index only (not by `b` or the slot), as in the compiled step.
  int32_t choose(Slot& s, int b, std::string& why) {
    const int64_t vocab = m->config.vocab_size;
    if (on_device) {
      const int32_t tok = tokens[static_cast<size_t>(b)];
      return generation::device_token_ok(tok, vocab, why) ? tok : -1;
    }
    float* row = logits.data() + static_cast<int64_t>(b) * vocab;
    if (options.keep_logits) s.keep_logits(row, vocab);
    return generation::host_token(s.row, row, vocab, why);
  }

  // A new sequence for `slot` checked and set up (not yet run); chunk 0: one prefill at the prompt's bucket.
  // `reuse` (chunk 0 only): prompt tokens taken from kept[slot].
  Slot start(int slot, const std::vector<int32_t>& prompt, const GenerationConfig& cfg,
             const TokenCallback& on_token, int chunk, const char* what, int reuse = 0);
  // The run of a prefill that reuses: [from, len) of the prompt, len - from a prompt bucket (or exact).
  struct Reuse {
    int tokens = 0;  // prompt tokens not recomputed
    int from = 0;    // first prompt token run
  };
  Reuse plan_reuse(int slot, const std::vector<int32_t>& prompt, const GenerationConfig& cfg) const {
    Reuse r;
    if (!options.prefix_reuse || slot < 0 || slot >= n) return r;
    const Slot& s = slots[static_cast<size_t>(slot)];
    const Kept& k = kept[static_cast<size_t>(slot)];
    if (s.busy || k.tokens.empty()) return r;
    // Neither the kept sequence nor the prompt may reach past a length-dependent rope's switch.
    if (runs_whole(static_cast<int64_t>(prompt.size())) || runs_whole(static_cast<int64_t>(k.tokens.size())))
      return r;
    // In-step sampling starts its repetition mask at each prefill program: only the run's tokens would count.
    if (on_device && cfg.repetition_penalty != 1.0f) return r;
    const size_t len = prompt.size();
    size_t common = 0;
    while (common < k.tokens.size() && common + 1 < len && k.tokens[common] == prompt[common]) ++common;
    if (common == 0) return r;
    const int rest = static_cast<int>(len - common);
    const int run = m->bucket_for(rest, false);
    const int from = static_cast<int>(len) - run;
    if (from < 0) return r;  // the bucket reaches before the prompt: a plain prefill
    // The cache row must still fit the prompt and its budget from kv_begin on (a config that cannot say its
    // budget gets a plain prefill, which names what is wrong with it).
    int budget = 0;
    try {
      budget = cfg.new_token_budget(static_cast<int>(len), m->config.max_position_embeddings);
    } catch (const Error&) {
      return r;
    }
    if (k.kv_begin + static_cast<int64_t>(len) + budget - 1 > cache_len) return r;
    r.tokens = from;
    r.from = from;
    return r;
  }
  // Runs positions [from, from + count) of the slot's padded prompt (one row-mapped prefill program); with
  // in-step sampling its last run samples the sequence's token number `token` (0: the prompt's).
  void run_prompt(const Slot& s, int slot, int from, int count, int token = 0);
  // The first token, from the last prompt run: chosen, checked, broadcast, streamed and accepted.
  int32_t first_token(Slot& s, int slot, const char* what);

  // The decode program for `batch` step rows (row-mapped into the cache when not one per cache row, or when
  // `shared`: some slot has several step rows).
  ShapeKey decode_key(int batch, bool shared = false) const {
    return {.phase = Phase::Decode,
            .batch = batch,
            .seq = 1,
            .cache_len = cache_len,
            .dtype = m->info.dtype,
            .sampling = sampling,
            .cache_rows = batch != n || shared ? n : 0};
  }
  // A decoding slot's draft tokens for this step (none when it does not speculate, is paused, or has no
  // budget for more than its next token).
  // Draft tokens slot `r` may propose this step (0: none): its draft length (counting a paused step), its
  // budget, and with a capped pool the blocks it holds or that are free.
  int draft_room(const Slot& s, int r) const {
    int room = s.row.budget - s.row.produced - 1;  // a step gives at most drafts + 1 tokens
    room = std::min(room, before_switch(s) - 1);   // longrope: no draft at or past the switch
    const int64_t next = s.next_slot() + 1;        // slots its next token fills
    if (capped)
      room = static_cast<int>(
          std::min<int64_t>(room, (held[static_cast<size_t>(r)] + free_blocks()) * page.block_tokens - next));
    return room;
  }
  int draft_want(Slot& s, int r) {
    if (!s.draft.enabled()) return 0;
    const int room = draft_room(s, r);
    return room <= 0 ? 0 : std::min(s.draft.length(), room);
  }
  // A draft cut to the room left, its blocks taken.
  void fit_draft(Slot& s, int r, std::vector<int32_t>& d) {
    const int room = std::max(0, draft_room(s, r));
    if (static_cast<int>(d.size()) > room) d.resize(static_cast<size_t>(room));
    grow(r, s.next_slot() + 1 + static_cast<int64_t>(d.size()));
  }
  // Prompt lookup's draft for slot `r`.
  std::vector<int32_t> draft(Slot& s, int r) {
    const int want = draft_want(s, r);
    if (want <= 0) return {};
    std::vector<int32_t> d = generation::ngram_draft(s.seq, s.ngram, want);
    fit_draft(s, r, d);
    return d;
  }
  // With a draft model: every decoding slot's draft, proposed together (one draft-model program per draft
  // position over the slots drafting), and the sequence length each was proposed at.
  std::unique_ptr<generation::Drafter> drafter;
  void propose(const std::vector<bool>& decode, std::vector<std::vector<int32_t>>& drafts,
               std::vector<int>& at_len) {
    std::vector<generation::Drafter::Ask> asks;
    for (int r = 0; r < n; ++r) {
      Slot& s = slots[static_cast<size_t>(r)];
      if (!decode[static_cast<size_t>(r)]) continue;
      const int want = draft_want(s, r);
      if (want > 0) asks.push_back({r, &s.seq, want});
    }
    if (asks.empty()) return;
    std::vector<std::vector<int32_t>> got = drafter->propose(asks);
    for (size_t i = 0; i < asks.size(); ++i) {
      const int r = asks[i].row;
      fit_draft(slots[static_cast<size_t>(r)], r, got[i]);
      at_len[static_cast<size_t>(r)] = static_cast<int>(asks[i].seq->size());
      drafts[static_cast<size_t>(r)] = std::move(got[i]);
    }
  }
  // Takes the slot's new token (callback, constraint, stop rules) and records it.
  void take(Slot& s, int slot, int32_t tok, std::vector<SlotToken>* out) {
    const bool goes_on = generation::constraint_step(s.row, tok);
    generation::accept(s.row, tok, s.on_token(slot, tok) && goes_on);
    s.out.push_back(tok);
    s.last = tok;
    if (s.draft.enabled()) s.seq.push_back(tok);
    if (out) out->push_back({slot, tok, s.row.finish});
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
  const int64_t max_pos = b.m->config.context_limit();
  if (slots < 1 || slots > kMaxSlots) fail("SlotBatch: slots must be in 1..", kMaxSlots, ", got ", slots);
  if (cache_len < 1 || cache_len > max_pos)
    fail("SlotBatch: cache_len must be in 1..", max_pos, " (", b.m->config.context_limit_str(), "), got ",
         cache_len);
  b.n = slots;
  b.cache_len = cache_len;
  b.options = options;
  b.on_device = b.m->device_sampling && !options.host_sampling;
  using Rows = SlotBatchOptions::DecodeRows;
  b.running_rows_only = options.decode_rows == Rows::Running ||
                        (options.decode_rows == Rows::Auto && !b.m->caps.prefers_buckets);
  b.sampling = b.on_device ? graph::Sampling::Sample : graph::Sampling::Off;
  // A recurrent state (linear attention) cannot be rewound to an arbitrary position: no prefix reuse, no
  // drafts to verify; prefix caching only from the snapshots a backend keeps of it (whole cached prompts).
  const bool recurrent = b.m->config.has_recurrent_state();
  if (options.prefix_reuse && recurrent)
    fail("SlotBatch: prefix_reuse: ", b.m->config.architecture,
         " keeps a recurrent state per sequence (linear attention), which a reused prefix cannot restore");
  b.recurrent = recurrent;
  // Under MPI tensor parallelism every rank's batch makes the same lookups (the same operations in the same
  // order: lead_followers replays them) and copies its own shard of the rows.
  b.caching = options.prefix_cache && !options.prefix_reuse && !b.on_device && !b.m->caps.prefers_buckets &&
              b.m->caps.copies_cache_rows && (!recurrent || b.m->caps.state_snapshots);
  if (options.prefix_cache && options.prefix_block < 1)
    fail("SlotBatch: prefix_block must be >= 1, got ", options.prefix_block);
  b.chunks.resize(static_cast<size_t>(slots));
  b.can_speculate = b.running_rows_only && !b.on_device && b.m->caps.shared_cache_rows &&
                    !(b.m->comm && b.m->comm->size() > 1) && !recurrent;
  b.slots.resize(static_cast<size_t>(slots));
  b.kept.resize(static_cast<size_t>(slots));
  b.cache = b.m->make_cache(slots, cache_len);
  // Blocks sized for the narrowest heads (wider heads' blocks are whole multiples of them in every real
  // model; a block that is not whole pages shares its edge pages with its neighbours).
  const backends::CacheGeometry geometry = runtime::cache_geometry(b.m->config);
  int64_t narrowest = 0;
  for (const backends::CacheLayer& l : geometry)
    if (l.kv_heads > 0 && (narrowest == 0 || l.head_dim < narrowest)) narrowest = l.head_dim;
  b.page = b.m->backend->cache_paging(narrowest > 0 ? narrowest : b.m->config.head_dim);
  b.paging = b.page.block_tokens > 0 && b.running_rows_only && !b.on_device && !options.prefix_reuse;
  b.held.assign(static_cast<size_t>(slots), 0);
  if (b.paging) {
    b.block_bytes = static_cast<int64_t>(b.page.block_tokens) *
                    static_cast<int64_t>(b.m->backend->cache_position_bytes(geometry));
    b.pool = static_cast<int64_t>(slots) * b.blocks(cache_len);
  }
  if (options.kv_cache_bytes < 0)
    fail("SlotBatch: kv_cache_bytes must be >= 0, got ", options.kv_cache_bytes);
  if (options.kv_cache_bytes > 0) {
    if (!b.paging || !b.m->caps.shared_cache_rows)
      fail(
          "SlotBatch: kv_cache_bytes needs paged KV memory: the native cpu backend, decode steps of the "
          "running slots only (DecodeRows::Running or Auto), sampling on the host and no prefix_reuse");
    if (b.m->comm && b.m->comm->size() > 1)
      fail("SlotBatch: kv_cache_bytes is not supported with tensor parallelism over MPI yet");
    const int64_t blocks = options.kv_cache_bytes / b.block_bytes;
    if (blocks < 1)
      fail("SlotBatch: kv_cache_bytes ", options.kv_cache_bytes, " is less than one KV block (",
           b.block_bytes, " bytes: ", b.page.block_tokens, " cache slots of every layer's keys and values)");
    if (blocks < b.pool) {
      b.pool = blocks;
      b.capped = true;
    }
  }
  b.leading = options.lead_followers && b.m->comm && b.m->comm->size() > 1 && b.m->comm->rank() == 0;
  if (options.draft_model) {
    runtime::ModelCore* d = options.draft_model->impl_.get();
    if (!d) fail("SlotBatch: the draft model was moved from");
    if (d->config.vocab_size != b.m->config.vocab_size)
      fail("SlotBatch: the draft model's vocabulary has ", d->config.vocab_size, " ids, the model's ",
           b.m->config.vocab_size, " (a draft model must share the tokenizer)");
    if (recurrent || d->config.has_recurrent_state())
      fail("SlotBatch: a draft model: ", (recurrent ? b.m : d)->config.architecture,
           " keeps a recurrent state per sequence (linear attention), which rejected drafts cannot rewind");
    if (!b.can_speculate)
      fail(
          "SlotBatch: a draft model needs a batch that verifies drafts: the cpu device, decode steps of the "
          "running slots only, sampling on the host, one process");
    if (options.draft_tokens < 1 || options.draft_tokens > kMaxDraftTokens)
      fail("SlotBatch: draft_tokens must be in 1..", kMaxDraftTokens, ", got ", options.draft_tokens);
    b.drafter = std::make_unique<generation::Drafter>(*d, slots, cache_len);
  }
}

SlotBatch::SlotBatch(SlotBatch&&) noexcept = default;
SlotBatch& SlotBatch::operator=(SlotBatch&& other) noexcept {
  if (this != &other) {
    stop_followers_quietly();
    impl_ = std::move(other.impl_);
  }
  return *this;
}
SlotBatch::~SlotBatch() { stop_followers_quietly(); }

void SlotBatch::stop_followers_quietly() noexcept {
  try {
    if (impl_) stop_followers();
  } catch (...) {  // a follower gone: the job is ending anyway (the launcher stops the ranks)
  }
}

int SlotBatch::slots() const { return impl_->n; }
int SlotBatch::cache_len() const { return impl_->cache_len; }
bool SlotBatch::device_sampling() const { return impl_->on_device; }
int SlotBatch::steps() const { return impl_->steps; }

Slot SlotBatch::Impl::start(int slot, const std::vector<int32_t>& prompt, const GenerationConfig& cfg,
                            const TokenCallback& on_token, int chunk, const char* what, int reuse) {
  const Slot& s = at(slot, what);
  if (s.busy)
    fail("SlotBatch::", what, ": slot ", slot, " is busy (", s.row.running() ? "running" : "finished",
         "; release(", slot, ") frees it)");
  cfg.validate();
  if (cfg.disable_compile)
    fail("SlotBatch::", what, ": disable_compile is not supported (the batch runs compiled programs only)");
  if (prompt.empty()) fail("SlotBatch::", what, ": slot ", slot, ": empty prompt");
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= m->config.vocab_size)
      fail("SlotBatch::", what, ": slot ", slot, ": prompt id ", prompt[i], " (index ", i,
           ") is out of range for vocab size ", m->config.vocab_size);
  const int len = static_cast<int>(prompt.size());
  const int64_t max_pos = m->config.context_limit();
  if (len > max_pos)
    fail("SlotBatch::", what, ": slot ", slot, ": prompt of ", len, " tokens exceeds ",
         m->config.context_limit_str());
  const int budget = cfg.new_token_budget(len, m->config.max_position_embeddings);  // Transformers' cap
  if (len + budget > max_pos)
    fail("SlotBatch::", what, ": slot ", slot, ": prompt (", len, " tokens) + max_new_tokens (", budget,
         ") exceeds ", m->config.context_limit_str());
  if (chunk > 0 && runs_whole(len)) chunk = len;  // one chunk: the whole prompt
  // The prompt is padded on the left to its bucket (one prefill) or to whole chunks; reusing, it sits where
  // the slot's kept sequence sits (that padding before it).
  const int64_t padded = reuse > 0   ? kept[static_cast<size_t>(slot)].kv_begin + static_cast<int64_t>(len)
                         : chunk > 0 ? (static_cast<int64_t>(len) + chunk - 1) / chunk * chunk
                                     : m->bucket_for(len, true);
  if (padded + budget - 1 > cache_len)
    fail("SlotBatch::", what, ": slot ", slot, ": a prompt of ", len, " tokens (",
         chunk > 0 ? "in chunks of " : "prefill bucket ", chunk > 0 ? chunk : padded,
         chunk > 0 ? detail::concat(", padded to ", padded) : std::string(), ") and ", budget,
         " new tokens need ", padded + budget - 1, " cache positions; the batch has cache_len ", cache_len);
  if (capped && blocks(padded + budget - 1) > pool)
    fail("SlotBatch::", what, ": slot ", slot, ": a prompt of ", len, " tokens (", padded,
         " cache slots) and ", budget, " new tokens need ", blocks(padded + budget - 1), " KV blocks of ",
         page.block_tokens, " slots; the pool holds ", pool, " (kv_cache_bytes)");
  if (cfg.constraint && cfg.constraint->vocab_size() != m->config.vocab_size)
    fail("SlotBatch::", what, ": slot ", slot, ": the constraint was compiled for a vocabulary of ",
         cfg.constraint->vocab_size(), " ids, the model has ", m->config.vocab_size);
  if (chunk > 0 && on_device && cfg.repetition_penalty != 1.0f)
    fail("SlotBatch::", what, ": slot ", slot,
         ": with in-step sampling a chunked prompt cannot carry the "
         "repetition penalty (",
         cfg.repetition_penalty,
         "): the step's seen mask starts at each prefill; use "
         "prefill(), or SlotBatchOptions::host_sampling");
  Slot fresh;
  fresh.row.start(cfg, cfg.seed ? *cfg.seed : generation::fresh_seed(), prompt, 0, budget);
  fresh.on_token = on_token;
  fresh.prompt_tokens = len;
  // Kept for prefix_reuse, and where a longrope sequence may cross its switch (cross() runs it again).
  const int64_t at = m->config.longrope_switch();
  if (options.prefix_reuse || (at > 0 && len <= at)) fresh.prompt = prompt;
  fresh.prefill_len = static_cast<int>(padded);
  fresh.kv_begin = static_cast<int>(padded) - len;
  fresh.chunk = chunk;
  if (drafter) {
    fresh.draft = generation::DraftControl(options.draft_tokens);
    fresh.seq = prompt;
    drafter->reset(slot);
  } else if (cfg.prompt_lookup_num_tokens > 0 && can_speculate) {
    fresh.draft = generation::DraftControl(cfg.prompt_lookup_num_tokens);
    fresh.ngram = cfg.max_matching_ngram_size > 0 ? cfg.max_matching_ngram_size : 2;
    fresh.seq = prompt;
  }
  const int32_t pad = cfg.effective_pad_token_id().value_or(0);
  const int32_t filler = pad >= 0 && pad < m->config.vocab_size ? pad : 0;  // masked; any valid id
  fresh.padded.assign(static_cast<size_t>(fresh.kv_begin), filler);
  fresh.padded.insert(fresh.padded.end(), prompt.begin(), prompt.end());
  return fresh;
}

void SlotBatch::Impl::run_prompt(const Slot& s, int slot, int from, int count, int token) {
  // Positions from..from+count-1 of the padded prompt into cache row `slot`.
  in = StepInputs{};
  for (int i = from; i < from + count; ++i) {
    in.ids.push_back(s.padded[static_cast<size_t>(i)]);
    in.positions.push_back(i < s.kv_begin ? 1
                                          : i - s.kv_begin);  // padding: masked, position 1 as Transformers
    in.slots.push_back(i);
  }
  in.kv_begin = {s.kv_begin};
  if (on_device) {
    in.seen_from = {std::max(0, s.kv_begin - from)};  // a prefill starts the row's seen mask
    s.row.params.append_encoded(token, in.sample_params);
    // The mask goes with the program that samples the first token (the last chunk's).
    if (from + count >= static_cast<int>(s.padded.size()))
      in.token_mask = generation::step_token_masks({&s.row}, m->config.vocab_size);
  }
  const bool mapped = n > 1;
  if (mapped) in.cache_rows = {slot};
  grow(slot, from + count);
  run({.phase = Phase::Prefill,
       .batch = 1,
       .seq = count,
       .cache_len = cache_len,
       .dtype = m->info.dtype,
       .sampling = sampling,
       .cache_rows = mapped ? n : 0});
}

int32_t SlotBatch::Impl::first_token(Slot& s, int slot, const char* what) {
  s.restart_logits();
  std::string why;
  int32_t tok = choose(s, 0, why);
  if (tok < 0)
    fail("SlotBatch::", what, ": slot ", slot, ", step 0: the model produced a non-finite logit (", why, ")");
  if (m->comm) m->comm->broadcast(&tok, sizeof tok, 0);
  const bool goes_on = generation::constraint_step(s.row, tok);
  int32_t keep = s.on_token(slot, tok) && goes_on;
  if (m->comm && (s.on_token || s.row.constraint)) m->comm->broadcast(&keep, sizeof keep, 0);
  generation::accept(s.row, tok, keep != 0);
  s.out.push_back(tok);
  s.last = tok;
  if (s.draft.enabled()) s.seq.push_back(tok);
  if (capped) s.recompute = std::move(s.padded);
  s.padded.clear();
  s.padded.shrink_to_fit();
  return tok;
}

void SlotBatch::Impl::compute_prompt(Slot& s, int slot, int reuse_tokens, int reuse_from) {
  RowChunks& row = chunks[static_cast<size_t>(slot)];
  // Blocks for the whole prompt, the row's old contents given back first (all of them, or all but the
  // cached prefix this prompt takes in place).
  auto room = [&](int keep_tokens, int source_row) {
    if (!paging) return;
    shrink(slot, keep_tokens);
    const int64_t need = blocks(s.prefill_len) - held[static_cast<size_t>(slot)];
    if (!make_room(need, slot, source_row))
      fail("SlotBatch::prefill: slot ", slot, ": its prompt needs ", need, " more KV blocks of ",
           page.block_tokens, " slots; ", free_blocks(), " of the pool's ", pool,
           " are free (admissible() says when a prompt fits)");
  };
  if (reuse_tokens > 0) {
    // The kept tokens [0, from) stay in the cache; the rest of the prompt runs after them.
    run_prompt(s, slot, s.kv_begin + reuse_from, s.prompt_tokens - reuse_from);
    reused += reuse_tokens;
  } else if (s.chunk > 0) {  // a resumed prefill_chunked prompt: its chunks again
    room(0, -1);
    for (int from = 0; from < s.prefill_len; from += s.chunk) run_prompt(s, slot, from, s.chunk);
  } else if (caching && s.kv_begin == 0 && !runs_whole(s.prompt_tokens)) {
    // Canonical chunks from the cached ones on (kv_begin is 0: exact lengths).
    const std::vector<int32_t>& prompt = s.padded;  // kv_begin 0: the prompt itself
    const Hit hit = find_cached(prompt, slot);
    if (hit.row != slot) row.tokens.clear();  // the row is about to be overwritten
    room(hit.row == slot ? hit.tokens : 0, hit.row);
    const size_t whole =
        prompt.size() / static_cast<size_t>(options.prefix_block) * static_cast<size_t>(options.prefix_block);
    if (hit.tokens > 0) {
      m->backend->copy_cache_row_prefix(*cache, hit.row, slot, hit.tokens);
      // A recurrent state: the one after the hit's chunks, as their row's snapshot holds it.
      if (recurrent) m->backend->restore_state(*cache, hit.row, slot);
      grow(slot, hit.tokens);
      chunks[static_cast<size_t>(hit.row)].used = ++clock;
      reused += hit.tokens;
    }
    row.tokens.resize(static_cast<size_t>(hit.row == slot ? hit.tokens : 0));
    if (recurrent && hit.tokens > 0 && static_cast<size_t>(hit.tokens) == whole)
      m->backend->snapshot_state(*cache, slot);
    for (int from = hit.tokens; from < s.prompt_tokens; from += options.prefix_block) {
      run_prompt(s, slot, from, std::min(options.prefix_block, s.prompt_tokens - from));
      if (recurrent && static_cast<size_t>(from + options.prefix_block) == whole)
        m->backend->snapshot_state(*cache, slot);
    }
    row.tokens.assign(prompt.begin(), prompt.begin() + static_cast<long>(whole));
    row.used = ++clock;
  } else {
    room(0, -1);
    run_prompt(s, slot, 0, s.prefill_len);  // the whole prompt at its bucket
  }
  if (!caching || reuse_tokens > 0 || s.kv_begin != 0 || s.chunk > 0 || runs_whole(s.prompt_tokens))
    row.tokens.clear();
}

int32_t SlotBatch::Impl::cross(Slot& s, int slot) {
  // Every token so far (the prompt, the new tokens, the last of which is this step's input at the switch),
  // padded on the left to its bucket where the backend wants buckets and the row still fits its budget.
  const int len = s.prompt_tokens + s.row.produced;
  int pad = m->bucket_for(len, true) - len;
  if (pad + s.prompt_tokens + s.row.budget - 1 > cache_len) pad = 0;  // exact: a program of its own
  if (paging) pad = s.kv_begin;  // paged rows run at their exact length (kv_begin 0): the blocks they hold
  std::vector<int32_t> whole(static_cast<size_t>(pad), 0);  // padding: masked, any valid id
  whole.insert(whole.end(), s.prompt.begin(), s.prompt.end());
  whole.insert(whole.end(), s.out.begin(), s.out.end());
  s.kv_begin = pad;
  s.prefill_len = pad + s.prompt_tokens;  // next_slot() = pad + len - 1 on
  s.padded = std::move(whole);
  chunks[static_cast<size_t>(slot)].tokens.clear();  // its short-factor keys are gone: nothing to share
  s.crossed_out = s.row.produced;
  run_prompt(s, slot, 0, pad + len, s.row.produced);
  return first_token(s, slot, "step");
}

void SlotBatch::Impl::resume(int r) {
  Slot& s = slots[static_cast<size_t>(r)];
  s.preempted = false;
  if (s.prefilling()) return;  // its chunks run again from the first (chunks_done is 0)
  s.padded = s.recompute;
  if (s.crossed_out > 0) {  // its whole-sequence run at the longrope switch
    if (paging) {
      shrink(r, 0);
      const int64_t need = blocks(static_cast<int64_t>(s.padded.size())) - held[static_cast<size_t>(r)];
      if (!make_room(need, r))
        fail("SlotBatch::resume: slot ", r, ": its sequence needs ", need, " more KV blocks; ", free_blocks(),
             " of the pool's ", pool, " are free");
    }
    run_prompt(s, r, 0, static_cast<int>(s.padded.size()), s.crossed_out);
  } else {
    compute_prompt(s, r, 0, 0);
  }
  s.padded.clear();
  // Its new tokens but the last (the next step's input), each computed as the decode step that took it
  // computed it: one-token rows of this cache row, several per program (Capabilities::shared_cache_rows).
  // After a longrope crossing: those after the tokens its whole run took in.
  const int fed = static_cast<int>(s.out.size()) - 1;
  for (int j0 = s.crossed_out; j0 < fed; j0 += kReplayRows) {
    const int count = std::min(kReplayRows, fed - j0);
    in = StepInputs{};
    for (int j = j0; j < j0 + count; ++j) {
      in.ids.push_back(s.out[static_cast<size_t>(j)]);
      in.positions.push_back(s.prompt_tokens + j);
      in.slots.push_back(s.prefill_len + j);
      in.kv_begin.push_back(s.kv_begin);
      in.cache_rows.push_back(r);
    }
    run(decode_key(count, true));
    grow(r, s.prefill_len + j0 + count);
  }
}

void SlotBatch::Impl::plan_memory() {
  if (!paging) return;
  auto active_need = [&] {
    int64_t need = 0;
    for (int r = 0; r < n; ++r) {
      if (slots[static_cast<size_t>(r)].active()) need += step_need(r);
    }
    return need;
  };
  if (capped) {
    while (true) {
      int r = -1;
      for (int i = 0; i < n; ++i) {
        const Slot& s = slots[static_cast<size_t>(i)];
        if (s.busy && s.preempted && (r < 0 || s.started < slots[static_cast<size_t>(r)].started)) r = i;
      }
      if (r < 0) break;
      // Its blocks and what the running sequences write this step (so it is not preempted again at once).
      if (!make_room(step_need(r) + active_need())) break;
      resume(r);
    }
    int64_t need = active_need();
    while (!make_room(need)) {
      int victim = -1;
      for (int r = 0; r < n; ++r) {
        const Slot& s = slots[static_cast<size_t>(r)];
        if (s.active() && (victim < 0 || s.started > slots[static_cast<size_t>(victim)].started)) victim = r;
      }
      if (victim < 0 || active_count() == 1) break;  // one alone always fits (start() checks)
      need -= step_need(victim);
      preempt(victim);
    }
  }
  for (int r = 0; r < n; ++r) {
    const Slot& s = slots[static_cast<size_t>(r)];
    if (s.active()) grow(r, next_extent(s));
  }
}

int32_t SlotBatch::prefill(int slot, const std::vector<int32_t>& prompt, const GenerationConfig& config,
                           const TokenCallback& on_token) {
  Impl& b = *impl_;
  GenerationConfig cfg = config;
  if (b.leading && !cfg.seed) cfg.seed = generation::fresh_seed();  // the followers draw the same
  const Impl::Reuse reuse = b.plan_reuse(slot, prompt, cfg);
  Slot fresh = b.start(slot, prompt, cfg, on_token, 0, "prefill", reuse.tokens);
  b.announce(Op::Prefill, slot, 0, &prompt, &cfg, on_token || cfg.constraint);
  auto lock = b.m->step_lock();
  fresh.started = ++b.starts;
  b.compute_prompt(fresh, slot, reuse.tokens, reuse.from);
  b.kept[static_cast<size_t>(slot)] = Kept{};
  const int32_t tok = b.first_token(fresh, slot, "prefill");
  fresh.busy = true;
  b.slots[static_cast<size_t>(slot)] = std::move(fresh);
  return tok;
}

void SlotBatch::prefill_chunked(int slot, const std::vector<int32_t>& prompt, const GenerationConfig& config,
                                int chunk, const TokenCallback& on_token) {
  Impl& b = *impl_;
  if (chunk < 1 || chunk > b.cache_len)
    fail("SlotBatch::prefill_chunked: chunk must be in 1..", b.cache_len, " (cache_len), got ", chunk);
  GenerationConfig cfg = config;
  if (b.leading && !cfg.seed) cfg.seed = generation::fresh_seed();
  Slot fresh = b.start(slot, prompt, cfg, on_token, chunk, "prefill_chunked");
  b.announce(Op::PrefillChunked, slot, chunk, &prompt, &cfg, on_token || cfg.constraint);
  b.kept[static_cast<size_t>(slot)] = Kept{};
  b.chunks[static_cast<size_t>(slot)] = Impl::RowChunks{};  // padded on the left: not canonical chunks
  b.shrink(slot, 0);
  fresh.started = ++b.starts;
  fresh.busy = true;
  b.slots[static_cast<size_t>(slot)] = std::move(fresh);
}

std::vector<SlotToken> SlotBatch::step() {
  Impl& b = *impl_;
  runtime::ModelCore& m = *b.m;
  std::vector<SlotToken> out;
  if (running_count() == 0) return out;
  b.announce(Op::Step);
  auto lock = m.step_lock();
  b.plan_memory();
  int bad_slot = -1, bad_count = 0;
  std::string bad_why;
  auto bad = [&](int slot, const std::string& why) {
    if (bad_count++ > 0) return;
    bad_slot = slot;
    bad_why = why;
  };
  // Chunked prompts first: one chunk each; a slot whose last chunk ran gets its first token now and decodes
  // from the next step on.
  std::vector<bool> decode(static_cast<size_t>(b.n), false);
  for (int r = 0; r < b.n; ++r) {
    Slot& s = b.slots[static_cast<size_t>(r)];
    if (!s.active()) continue;
    if (!s.prefilling() && b.crosses_now(s)) {  // longrope: the whole sequence again, its next token from it
      try {
        const int32_t tok = b.cross(s, r);
        out.push_back({r, tok, s.row.finish});
      } catch (const Error& e) {
        s.row.finish = FinishReason::Error;
        bad(r, e.what());
      }
      continue;
    }
    if (!s.prefilling()) {
      decode[static_cast<size_t>(r)] = true;
      continue;
    }
    const int from = s.chunks_done++ * s.chunk;
    b.run_prompt(s, r, from, s.chunk);
    if (from + s.chunk < s.prefill_len) continue;
    try {
      const int32_t tok = b.first_token(s, r, "step");
      out.push_back({r, tok, s.row.finish});
    } catch (const Error& e) {
      s.row.finish = FinishReason::Error;
      bad(r, e.what());
    }
  }
  const bool any = std::find(decode.begin(), decode.end(), true) != decode.end();
  const int step = b.steps;
  if (any) {
    // Every row of the cache: decoding slots at their own positions; the others harmless (token 0 at position
    // 0 into their own row's first position, default sampling) and ignored. Or (running_rows_only) only the
    // decoding slots, step row i writing and reading cache row rows[i]. A slot with draft tokens has one more
    // step row per draft token, at its next slots (several step rows of one cache row: `shared`).
    std::vector<int> step_row(static_cast<size_t>(b.n), -1);  // cache row -> its (first) step row
    std::vector<std::vector<int32_t>> drafts(static_cast<size_t>(b.n));
    std::vector<int> drafted_at(static_cast<size_t>(b.n), 0);
    if (b.drafter) b.propose(decode, drafts, drafted_at);
    std::vector<int32_t> rows;
    bool shared = false;
    for (int r = 0; r < b.n; ++r)
      if (!b.running_rows_only || decode[static_cast<size_t>(r)]) {
        step_row[static_cast<size_t>(r)] = static_cast<int>(rows.size());
        rows.push_back(r);
        if (!decode[static_cast<size_t>(r)]) continue;
        std::vector<int32_t>& d = drafts[static_cast<size_t>(r)];
        if (!b.drafter) d = b.draft(b.slots[static_cast<size_t>(r)], r);
        rows.insert(rows.end(), d.size(), r);
        shared = shared || !d.empty();
      }
    const int batch = static_cast<int>(rows.size());
    const bool mapped = batch != b.n || shared;
    StepInputs& in = b.in;
    in = StepInputs{};
    const generation::SamplingParams idle;
    for (size_t i = 0; i < rows.size(); ++i) {
      const int32_t r = rows[i];
      const Slot& s = b.slots[static_cast<size_t>(r)];
      const bool run = decode[static_cast<size_t>(r)];
      const int j =
          static_cast<int>(i) - step_row[static_cast<size_t>(r)];  // 0: its next token; else a draft
      in.ids.push_back(!run     ? 0
                       : j == 0 ? s.last
                                : drafts[static_cast<size_t>(r)][static_cast<size_t>(j - 1)]);
      in.positions.push_back(run ? s.next_position() + j : 0);
      in.slots.push_back(run ? s.next_slot() + j : 0);
      in.kv_begin.push_back(run ? s.kv_begin : 0);
      if (b.on_device) (run ? s.row.params : idle).append_encoded(run ? s.row.produced : 0, in.sample_params);
    }
    if (mapped) in.cache_rows = rows;
    // The constrained rows' masks are computed while the step runs (they depend only on tokens taken).
    // In-step sampling: computed first, an input of the step.
    std::vector<generation::ConstraintMatcher*> masks;
    std::vector<const generation::RowState*> step_rows;
    for (int32_t r : rows)
      step_rows.push_back(decode[static_cast<size_t>(r)] ? &b.slots[static_cast<size_t>(r)].row : nullptr);
    if (b.on_device) in.token_mask = generation::step_token_masks(step_rows, m.config.vocab_size);
    for (int r = 0; r < b.n && !b.on_device; ++r)
      if (decode[static_cast<size_t>(r)] && b.slots[static_cast<size_t>(r)].row.constraint)
        masks.push_back(b.slots[static_cast<size_t>(r)].row.constraint.get());
    generation::overlap_masks(masks, [&] { b.run(b.decode_key(batch, shared)); });
    ++b.steps;

    std::vector<int32_t> next(static_cast<size_t>(b.n), 0), keep(static_cast<size_t>(b.n), 1);
    for (int r = 0; r < b.n; ++r) {
      if (!decode[static_cast<size_t>(r)]) continue;
      Slot& s = b.slots[static_cast<size_t>(r)];
      s.restart_logits();
      std::string why;
      const int32_t tok = b.choose(s, step_row[static_cast<size_t>(r)], why);
      if (tok < 0)
        bad(r, detail::concat("SlotBatch::step: step ", step, ", slot ", r, " (its token ", s.row.produced,
                              "): the model produced a non-finite logit (", why, ")"));
      next[static_cast<size_t>(r)] = tok;
    }
    if (m.comm) m.comm->broadcast(next.data(), next.size() * sizeof(int32_t), 0);
    bool callbacks = false;
    for (int r = 0; r < b.n; ++r) {
      Slot& s = b.slots[static_cast<size_t>(r)];
      if (!decode[static_cast<size_t>(r)] || next[static_cast<size_t>(r)] < 0) continue;
      callbacks = callbacks || static_cast<bool>(s.on_token) || static_cast<bool>(s.row.constraint);
      const bool goes_on = generation::constraint_step(s.row, next[static_cast<size_t>(r)]);
      keep[static_cast<size_t>(r)] = s.on_token(r, next[static_cast<size_t>(r)]) && goes_on;
    }
    if (m.comm && callbacks) m.comm->broadcast(keep.data(), keep.size() * sizeof(int32_t), 0);
    for (int r = 0; r < b.n; ++r) {
      if (!decode[static_cast<size_t>(r)]) continue;
      Slot& s = b.slots[static_cast<size_t>(r)];
      int32_t tok = next[static_cast<size_t>(r)];
      if (tok < 0) {  // no token: the slot ends here
        s.row.finish = FinishReason::Error;
        continue;
      }
      generation::accept(s.row, tok, keep[static_cast<size_t>(r)] != 0);
      s.out.push_back(tok);
      s.last = tok;
      if (s.draft.enabled()) s.seq.push_back(tok);
      out.push_back({r, tok, s.row.finish});
      // Draft tokens: each is kept while it equals the token chosen before it; the logits of its step row
      // (computed as a one-token step would compute them) then give the token after it.
      const std::vector<int32_t>& d = drafts[static_cast<size_t>(r)];
      if (d.empty()) continue;
      size_t accepted = 0;
      while (accepted < d.size() && s.row.running() && tok == d[accepted]) {
        std::string why;
        tok = b.choose(s, step_row[static_cast<size_t>(r)] + static_cast<int>(accepted) + 1, why);
        ++accepted;
        if (tok < 0) {
          bad(r, detail::concat("SlotBatch::step: step ", step, ", slot ", r, " (its token ", s.row.produced,
                                "): the model produced a non-finite logit (", why, ")"));
          s.row.finish = FinishReason::Error;
          break;
        }
        b.take(s, r, tok, &out);
      }
      s.draft.record(static_cast<int>(d.size()), static_cast<int>(accepted));
      if (b.drafter)
        b.drafter->confirmed(r, drafted_at[static_cast<size_t>(r)], static_cast<int>(d.size()),
                             static_cast<int>(accepted));
      ++b.spec.drafts;
      b.spec.draft_tokens += static_cast<int64_t>(d.size());
      b.spec.accepted_tokens += static_cast<int64_t>(accepted);
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const SlotToken& a, const SlotToken& c) { return a.slot < c.slot; });
  if (bad_slot >= 0)
    fail(bad_why,
         bad_count > 1 ? detail::concat("; ", bad_count - 1, " more slot(s) likewise") : std::string(),
         "; the slot has ended (FinishReason::Error), the other slots' tokens are taken");
  m.generation_done();  // the recompile guard counts from here (a prefill and the decode program are
                        // compiled)
  return out;
}

int SlotBatch::warmup(int max_prompt) {
  Impl& b = *impl_;
  runtime::ModelCore& m = *b.m;
  if (max_prompt < 0) fail("SlotBatch::warmup: max_prompt must be >= 0, got ", max_prompt);
  b.announce(Op::Warmup, 0, max_prompt);
  const runtime::CompileStats before = m.compile_stats();
  auto build = [&m](const ShapeKey& k) { return m.build(k); };
  const bool mapped = b.n > 1;
  for (int bucket : m.buckets) {
    if (bucket > b.cache_len || (max_prompt > 0 && bucket > m.bucket_for(max_prompt, false))) break;
    m.cache->get({.phase = Phase::Prefill,
                  .batch = 1,
                  .seq = bucket,
                  .cache_len = b.cache_len,
                  .dtype = m.info.dtype,
                  .sampling = b.sampling,
                  .cache_rows = mapped ? b.n : 0},
                 build);
  }
  for (int batch = b.running_rows_only ? 1 : b.n; batch <= b.n; ++batch)
    m.cache->get(b.decode_key(batch), build);
  m.cache->arm_guard();
  const runtime::CompileStats after = m.compile_stats();
  return after.compiles + after.disk_hits - before.compiles - before.disk_hits;
}

void SlotBatch::release(int slot) {
  Slot& s = impl_->at(slot, "release");
  if (!s.busy) fail("SlotBatch::release: slot ", slot, " is not busy (it is free already)");
  impl_->announce(Op::Release, slot);
  Kept& k = impl_->kept[static_cast<size_t>(slot)];
  k = Kept{};
  if (impl_->options.prefix_reuse && !s.prefilling() && !s.out.empty() &&
      s.row.finish != FinishReason::Error) {
    // The cache row holds the prompt and every new token but the last (never fed back).
    k.kv_begin = s.kv_begin;
    k.tokens = std::move(s.prompt);
    k.tokens.insert(k.tokens.end(), s.out.begin(), s.out.end() - 1);
  }
  s = Slot{};
  // Paged: the memory past the prompt's whole chunks (kept for prefix caching) goes back.
  impl_->shrink(slot, impl_->caching
                          ? static_cast<int64_t>(impl_->chunks[static_cast<size_t>(slot)].tokens.size())
                          : 0);
}

int SlotBatch::reusable(int slot, const std::vector<int32_t>& prompt, const GenerationConfig& config) const {
  impl_->at(slot, "reusable");
  return impl_->plan_reuse(slot, prompt, config).tokens;
}

int SlotBatch::kept_tokens(int slot) const {
  const Slot& s = impl_->at(slot, "kept_tokens");
  return s.busy ? 0 : static_cast<int>(impl_->kept[static_cast<size_t>(slot)].tokens.size());
}

int64_t SlotBatch::reused_tokens() const { return impl_->reused; }

bool SlotBatch::prefix_caching() const { return impl_->caching; }

int SlotBatch::cached_prefix(const std::vector<int32_t>& prompt) const {
  return prompt.empty() ? 0 : impl_->find_cached(prompt, -1).tokens;
}

int SlotBatch::choose_slot(const std::vector<int32_t>& prompt) const {
  const Impl& b = *impl_;
  if (!b.caching || prompt.empty()) return free_slot();
  const std::vector<int> hits = b.row_hits(prompt);
  const int longest = *std::max_element(hits.begin(), hits.end());
  int best = -1;
  for (int r = 0; r < b.n; ++r) {
    if (b.slots[static_cast<size_t>(r)].busy) continue;
    if (longest > 0 && hits[static_cast<size_t>(r)] == longest) return r;  // holds it: nothing to copy
    if (best < 0 || b.chunks[static_cast<size_t>(r)].used < b.chunks[static_cast<size_t>(best)].used)
      best = r;
  }
  return best;
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
  st.preempted = s.preempted;
  st.finish = s.row.finish;
  st.prompt_tokens = s.prompt_tokens;
  st.prefill_len = s.prefill_len;
  st.prefilling = s.prefilling();
  st.new_tokens = s.row.produced;
  st.budget = s.row.budget;
  st.next_slot = s.prefilling() ? s.chunks_done * s.chunk : s.next_slot();
  return st;
}

const std::vector<int32_t>& SlotBatch::tokens(int slot) const { return impl_->at(slot, "tokens").out; }

const std::vector<float>& SlotBatch::last_logits(int slot) const {
  const Slot& s = impl_->at(slot, "last_logits");
  if (!impl_->options.keep_logits || impl_->on_device)
    fail("SlotBatch::last_logits: logits are kept only with SlotBatchOptions::keep_logits and host sampling");
  static const std::vector<float> none;
  return s.kept_logits == 0 ? none : s.logits[static_cast<size_t>(s.kept_logits - 1)];
}

const std::vector<float>& SlotBatch::token_logits(int slot, int index) const {
  const Slot& s = impl_->at(slot, "token_logits");
  if (!impl_->options.keep_logits || impl_->on_device)
    fail(
        "SlotBatch::token_logits: logits are kept only with SlotBatchOptions::keep_logits and host sampling");
  const int last = s.logits_from + s.kept_logits;
  if (index < s.logits_from || index >= last)
    fail("SlotBatch::token_logits: slot ", slot, " keeps the logits of its tokens ", s.logits_from, "..",
         last - 1, " (those of the last prefill or step), not of token ", index);
  return s.logits[static_cast<size_t>(index - s.logits_from)];
}

SpeculationStats SlotBatch::speculation() const { return impl_->spec; }

KvCacheStats SlotBatch::kv_cache() const {
  const Impl& b = *impl_;
  KvCacheStats k;
  k.paged = b.paging;
  if (!b.paging) return k;
  k.block_tokens = b.page.block_tokens;
  k.block_bytes = b.block_bytes;
  k.total_blocks = b.pool;
  k.cached_blocks = b.cached_blocks();
  k.used_blocks = b.used_blocks() - k.cached_blocks;
  k.preemptions = b.preemptions;
  for (const Slot& s : b.slots) k.preempted += s.busy && s.preempted;
  return k;
}

bool SlotBatch::admissible(int prefill_len) const {
  const Impl& b = *impl_;
  if (!b.capped) return true;
  for (const Slot& s : b.slots)
    if (s.busy && s.preempted) return false;
  return b.free_blocks() + b.cached_blocks() >= b.blocks(prefill_len) + b.active_count();
}

int64_t SlotBatch::blocks_for(int64_t slots) const { return impl_->blocks(slots); }
bool SlotBatch::speculates() const { return impl_->can_speculate; }

void SlotBatch::stop_followers() { impl_->announce(Op::Stop); }

void SlotBatch::follow() {
  Impl& b = *impl_;
  backends::Communicator* comm = b.m->comm.get();
  if (!comm || comm->size() < 2)
    fail("SlotBatch::follow: the model is not tensor-parallel over MPI (nothing to follow)");
  if (comm->rank() == 0) fail("SlotBatch::follow: rank 0 leads; follow() runs on the other ranks");
  if (!b.options.lead_followers)
    fail("SlotBatch::follow: the batch needs SlotBatchOptions::lead_followers, as rank 0's has");
  const TokenCallback stand_in = [](int, int32_t) { return true; };  // rank 0's answers are broadcast into it
  while (true) {
    Command c;
    comm->broadcast_untimed(&c, sizeof c, 0);
    if (c.prompt_len < 0 || c.config_bytes < 0) fail("SlotBatch::follow: a malformed command from rank 0");
    std::vector<char> payload(static_cast<size_t>(c.prompt_len) * sizeof(int32_t) +
                              static_cast<size_t>(c.config_bytes));
    if (!payload.empty()) comm->broadcast(payload.data(), payload.size(), 0);
    std::vector<int32_t> prompt(static_cast<size_t>(c.prompt_len));
    if (!prompt.empty()) std::memcpy(prompt.data(), payload.data(), prompt.size() * sizeof(int32_t));
    const char* cfg_bytes = payload.data() + prompt.size() * sizeof(int32_t);
    const TokenCallback none;
    const TokenCallback& cb = c.callback ? stand_in : none;
    switch (c.op) {
      case Op::Prefill:
        prefill(c.slot, prompt, decode_config(cfg_bytes, static_cast<size_t>(c.config_bytes)), cb);
        break;
      case Op::PrefillChunked:
        prefill_chunked(c.slot, prompt, decode_config(cfg_bytes, static_cast<size_t>(c.config_bytes)), c.arg,
                        cb);
        break;
      case Op::Step:
        try {
          step();
        } catch (const Error&) {
          // A non-finite logit ended a slot: rank 0 met the same one (the ranks' logits agree) and goes on.
        }
        break;
      case Op::Release:
        release(c.slot);
        break;
      case Op::Warmup:
        warmup(c.arg);
        break;
      case Op::Stop:
        return;
      default:
        fail("SlotBatch::follow: unknown command ", static_cast<int32_t>(c.op), " from rank 0");
    }
  }
}

}  // namespace tessera
