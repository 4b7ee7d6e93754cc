// The step API for a scheduler (JetStream's prefill / insert / generate): a fixed set of decode slots over
// one multi-sequence KV cache, which requests join and leave between steps with no recompile.
//
//   tessera::SlotBatch batch(model, /*slots=*/8, /*cache_len=*/1024);
//   int32_t first = batch.prefill(batch.free_slot(), prompt_ids, config);  // a request joins
//   for (const auto& t : batch.step()) ...  // one token for every running slot
//   batch.release(slot);                    // when its sequence is done (or to cancel it)
//   batch.prefill_chunked(slot, long_prompt, config, 256);  // joins one chunk per step()
//
// A slot is one sequence's row of the cache (not a cache position). prefill() runs the prompt of one
// sequence alone, padded on the left to its prompt bucket where the backend wants buckets, into the chosen
// slot (one program per bucket: batch 1, seq bucket, cache rows = slots); step() runs one decode program
// for all slots at once (batch = slots, cache_len), each row at its own position; free and finished slots
// get harmless inputs and their outputs are ignored. So a workload of any prompt lengths and arrival times
// compiles the buckets it uses plus one decode program. Where the backend samples inside the step
// (Capabilities::in_step_sampling on a device that prefers buckets, as generate() decides) only token ids
// come back; otherwise the logits do and each row is sampled on the host. Greedy tokens of a request equal
// what generate() gives for it alone. Sampled draws are keyed by the sequence's seed and its own token index
// only (0: the prefill's token), never by its slot, its step row or its neighbours, on the host and in the
// compiled step alike: a seeded sampled request gives the same tokens in any slot, alone or beside others,
// and the same as generate() gives for it as a one-prompt call (row 0 of a generate() batch; its other rows
// draw with seeds derived from the row, generation::row_seed, so one seed still samples them independently).
//
// A SlotBatch is used by one thread at a time; several SlotBatches (and generate() calls) may share one
// CausalLM from different threads. The model must outlive the batch.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/generation.h"
#include "tessera/model.h"

namespace tessera {

struct SlotBatchOptions {
  // Sample every row on the host from the logits even where the backend could sample in the step (tests,
  // or a caller that wants last_logits()).
  bool host_sampling = false;
  // Keep each running slot's logits of its last token (host sampling only): last_logits().
  bool keep_logits = false;
  // Which rows a decode step runs. All (the default): every slot, one decode program whatever runs (the
  // static shape a TPU or GPU wants). Running: only the running slots, row-mapped into the cache (a program
  // per count of running slots, 1..slots), so a half-empty batch costs half. Auto: Running where the backend
  // plans cheaply and pads with real FLOPs (the native cpu backend: Capabilities::prefers_buckets false),
  // else All. Greedy tokens are the same either way.
  enum class DecodeRows { All, Running, Auto };
  DecodeRows decode_rows = DecodeRows::All;
  // Prefix reuse: a released slot keeps what its cache holds, and a prefill() into it whose prompt starts
  // with those tokens runs only the rest (on bucketed backends: the rest padded back into the prefix to a
  // bucket, those prefix positions recomputed). See reusable().
  bool prefix_reuse = false;
  // Automatic prefix caching: a prompt is computed in chunks of `prefix_block` tokens aligned to its start
  // (one chunk when it is no longer), and the whole chunks of every prompt a cache row holds are looked up by
  // each prefill(): the longest run of whole chunks the new prompt shares with any row (running or free) is
  // copied into the new slot's row (or already is there) and only the rest is computed, in the same chunks.
  // So a hit gives bit for bit the logits a miss gives: the chunks it skips are those a miss computes, with
  // the same inputs. Keys and values computed by decode steps are never taken (other kernels: they would
  // differ in the last bits). Applies where the rows are sampled on the host, prompts run at their exact
  // length (not padded to buckets) and the backend copies cache rows (Capabilities::copies_cache_rows): the
  // native cpu backend, tensor-parallel over MPI too; prefix_reuse, when set, takes precedence. See
  // choose_slot().
  bool prefix_cache = true;
  int prefix_block = 256;
  // Paged KV memory, where the backend pages its caches (Backend::cache_paging: the native cpu backend) and
  // the decode steps run the running slots only, sampled on the host, without prefix_reuse: a row's memory
  // is taken in blocks of kv_cache().block_tokens slots as they are written and given back when its slot is
  // released (beyond the whole prefix chunks it keeps for prefix_cache), so `slots` rows of `cache_len`
  // cost what their sequences hold. kv_cache_bytes > 0 caps the memory of every row together (a pool of
  // kv_cache_bytes / kv_cache().block_bytes blocks): rows cached for prefix_cache are evicted (least
  // recently used first) when a sequence needs blocks, then running sequences are preempted (the latest
  // started first: their blocks given back) and resume when blocks are free, recomputed exactly (the prompt
  // in the chunks it first ran in, the new tokens as the decode steps computed them), so their tokens are
  // those they would have had unpreempted. 0: no cap (every row may fill its cache_len). Not with tensor
  // parallelism over MPI.
  int64_t kv_cache_bytes = 0;
  // Speculative decoding with a draft model (llama.cpp's -md, vLLM's draft_model): a smaller model with the
  // same vocabulary, on the cpu device, proposes up to draft_tokens tokens per step for every slot, greedily
  // from its own cache of the slot's sequence; the step verifies them as it verifies prompt lookup's (so the
  // tokens are those of plain decoding, sampled ones included) and the length adapts as for prompt lookup
  // (generation::DraftControl). Takes precedence over prompt_lookup_num_tokens; needs speculates(). The model
  // must outlive the batch.
  CausalLM* draft_model = nullptr;
  int draft_tokens = 5;
  // Tensor parallelism over MPI driven by one caller (a server): rank 0's batch sends each operation
  // (prefill, prefill_chunked, step, release, warmup) with its inputs to the other ranks, whose batches (made
  // with the same slots, cache_len and options) replay it in follow(). Unset, every rank must call the same
  // operations itself. Without an MPI group (one process, or a PJRT device driving its chips) it changes
  // nothing.
  bool lead_followers = false;
};

// The token one running slot got from a step.
struct SlotToken {
  int slot = 0;
  int32_t token = 0;
  FinishReason finish = FinishReason::None;  // None: the slot goes on; else it ended with this token
};

// Prompt lookup over the batch's life (GenerationConfig::prompt_lookup_num_tokens): drafts proposed, their
// tokens, and the tokens of them the model confirmed (each a token the step gave beyond the slot's one).
struct SpeculationStats {
  int64_t drafts = 0, draft_tokens = 0, accepted_tokens = 0;
};

// Paged KV memory (SlotBatchOptions::kv_cache_bytes). Blocks are block_tokens cache slots of every layer's
// keys and values (block_bytes bytes).
struct KvCacheStats {
  bool paged = false;  // memory follows what the rows hold (else every row's cache_len is allocated)
  int block_tokens = 0;
  int64_t block_bytes = 0;
  int64_t total_blocks = 0;   // the pool (kv_cache_bytes, or every row's cache_len)
  int64_t used_blocks = 0;    // held by busy slots
  int64_t cached_blocks = 0;  // held by free slots' rows for prefix caching (evicted first when needed)
  int64_t preemptions = 0;    // sequences preempted so far
  int preempted = 0;          // sequences preempted now (waiting for blocks to resume)
};

// What a slot holds.
struct SlotState {
  bool busy = false;        // holds a sequence (running or finished) until release()
  bool running = false;     // step() produces its next token (or, prefilling, runs its next prompt chunk)
  bool preempted = false;   // running, but its blocks were taken: it resumes (recomputed) when they are free
  bool prefilling = false;  // prefill_chunked: chunks of its prompt are still to run
  FinishReason finish = FinishReason::None;
  int prompt_tokens = 0;  // the prompt's length
  int prefill_len = 0;    // the bucket its prefill ran at (>= prompt_tokens)
  int new_tokens = 0;     // tokens produced so far (the prefill's first one included)
  int budget = 0;         // new tokens at most (max_new_tokens / max_length for this prompt)
  int next_slot = 0;      // cache position its next token is written to
};

class SlotBatch {
 public:
  // `slots` sequences of at most `cache_len` cache positions each (prompt bucket + new tokens - 1).
  SlotBatch(CausalLM& model, int slots, int cache_len, const SlotBatchOptions& options = {});
  SlotBatch(SlotBatch&&) noexcept;
  SlotBatch& operator=(SlotBatch&&) noexcept;
  ~SlotBatch();

  int slots() const;
  int cache_len() const;
  // Whether tokens are chosen inside the compiled step (only ids cross back).
  bool device_sampling() const;

  // Starts a sequence in free slot `slot`: runs its prompt and returns its first new token (which may already
  // end it: eos, a budget of 1, or `on_token` returning false). `config` gives the sampling settings, the
  // eos ids and the new-token budget (new_token_budget of the prompt); its seed, when unset, is drawn fresh.
  // `on_token(slot, token)` is called with every token of this sequence, this first one included.
  // Errors: slot out of range or busy, an empty prompt, ids outside the vocabulary, a prompt whose bucket and
  // budget do not fit cache_len, disable_compile.
  int32_t prefill(int slot, const std::vector<int32_t>& prompt, const GenerationConfig& config,
                  const TokenCallback& on_token = {});
  // Chunked prefill: starts a sequence in free slot `slot` whose prompt runs `chunk` tokens at a time, one
  // chunk per step(), so a long prompt does not stall the running slots. The prompt is padded on the left to
  // whole chunks (one prefill program of `chunk` tokens serves every chunk of every prompt); the step that
  // runs the last chunk returns the slot's first token. Same checks as prefill(); with in-step sampling the
  // repetition penalty must be 1 (the step's seen mask restarts at every prefill program).
  void prefill_chunked(int slot, const std::vector<int32_t>& prompt, const GenerationConfig& config,
                       int chunk, const TokenCallback& on_token = {});
  // One step: the next chunk of every chunked prompt, then one decode step over every other running slot;
  // returns the new tokens in slot order (empty, running nothing, when no slot runs); a speculating slot
  // (speculates()) may get several, in order: its next token and the tokens its confirmed drafts gave. A
  // non-finite logit in a slot ends that slot (FinishReason::Error) after the other slots' tokens are taken,
  // and then throws Error naming the slot and the step.
  std::vector<SlotToken> step();
  // Frees a busy slot (finished, or still running: that cancels it). Error when the slot is not busy.
  void release(int slot);

  // Whether prefix_cache applies (above).
  bool prefix_caching() const;
  // prefix_cache: prompt tokens prefill() would take from the cache for `prompt` (whole chunks, never the
  // last token), wherever they are.
  int cached_prefix(const std::vector<int32_t>& prompt) const;
  // A free slot for `prompt` (-1: none): with prefix_cache, the free slot whose own row holds the longest
  // cached prefix of it (nothing to copy), else the free slot whose cached chunks were used least recently
  // (the eviction of an LRU cache, by rows); without, the lowest free slot.
  int choose_slot(const std::vector<int32_t>& prompt) const;
  // prefix_reuse: how many leading tokens of `prompt` prefill(slot, prompt, config) would take from what free
  // slot `slot` still holds (0: none; it runs the whole prompt). Never the whole prompt: its last token runs.
  int reusable(int slot, const std::vector<int32_t>& prompt, const GenerationConfig& config) const;
  // prefix_reuse: how many tokens free slot `slot` still holds (0 for a busy slot).
  int kept_tokens(int slot) const;
  // Prompt tokens taken from a cache row instead of prefilled (prefix_reuse or prefix_cache), over the
  // batch's life.
  int64_t reused_tokens() const;

  bool busy(int slot) const;
  bool running(int slot) const;
  int free_slot() const;      // the lowest free slot, or -1
  int running_count() const;  // slots step() will advance
  SlotState state(int slot) const;
  // The slot's new tokens so far (its sequence after the prompt), until release().
  const std::vector<int32_t>& tokens(int slot) const;
  // SlotBatchOptions::keep_logits: the logits [vocab] its last token was chosen from (before any processor).
  const std::vector<float>& last_logits(int slot) const;
  // SlotBatchOptions::keep_logits: the logits token `index` of tokens(slot) was chosen from, for the tokens
  // the last prefill or step gave the slot (several where draft tokens were confirmed). Error otherwise.
  const std::vector<float>& token_logits(int slot, int index) const;
  // Whether a slot whose config sets prompt_lookup_num_tokens speculates here: the decode steps run the
  // running slots only (DecodeRows::Running / Auto on the cpu backend), rows are sampled on the host, the
  // backend verifies drafts in one step (Capabilities::shared_cache_rows) and there is one process (no
  // tensor parallelism over MPI). Elsewhere such a slot decodes one token per step. A constrained slot's
  // drafts are checked against its constraint's mask at each position, as its tokens are.
  bool speculates() const;
  SpeculationStats speculation() const;
  KvCacheStats kv_cache() const;
  // Whether a sequence whose prompt runs as `prefill_len` cache slots may start now without preempting one:
  // no preempted sequence waits to resume, and its blocks (with one block of growth for each running
  // sequence) are free or held by rows cached for prefix_cache. Always true without a kv_cache_bytes cap.
  bool admissible(int prefill_len) const;
  // The blocks `slots` cache slots of one row take (0 where the memory is not paged).
  int64_t blocks_for(int64_t slots) const;
  // Compiles (or loads from the disk cache) the prefill program of every prompt bucket up to `max_prompt`
  // (0: every bucket that fits cache_len) and the decode program (with DecodeRows::Running, one per count of
  // running slots), then arms the model's recompile guard.
  // Returns the programs compiled or loaded. With exact prompt lengths (the native cpu backend's default)
  // only the decode program is made ahead.
  int warmup(int max_prompt = 0);
  // Decode programs run so far (steps that ran only prompt chunks do not count).
  int steps() const;

  // SlotBatchOptions::lead_followers, on a tensor-parallel rank other than 0: runs every operation rank 0's
  // batch runs, in its order, with its inputs (its drawn seeds included), until rank 0 calls stop_followers()
  // (or its batch is destroyed); then returns. Waiting for the next operation has no deadline (a server may
  // idle for hours); the collectives inside one do. An operation that fails as it failed on rank 0 (a step
  // with a non-finite logit) is taken as rank 0's engine takes it; any other error is thrown.
  // Errors: rank 0, a model that is not tensor-parallel over MPI, or options without lead_followers.
  void follow();
  // Rank 0 of SlotBatchOptions::lead_followers: tells the followers to return from follow(). Idempotent; the
  // destructor calls it. No-op anywhere else.
  void stop_followers();

 private:
  void stop_followers_quietly() noexcept;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
