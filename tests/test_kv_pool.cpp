// Paged KV memory (SlotBatchOptions::kv_cache_bytes): the cpu cache's memory follows what its rows hold
// (taken as slots are written, given back on release); under a capped pool, sequences wait for blocks or are
// preempted and resumed by recompute, and every token and every logit is what the same request gets alone
// with no cap, to the last bit, on every golden model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "golden_util.h"
#include "tessera/batch.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
namespace golden = tessera::golden;

namespace {

CausalLM load(const std::string& name) { return golden::load_f32(name); }

std::vector<int32_t> ids(int len, int salt, int64_t vocab) { return golden::made_up_ids(len, salt, vocab); }

// Resident bytes of this process.
int64_t rss() {
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

struct Request {
  std::vector<int32_t> prompt;
  GenerationConfig config;
};

struct Result {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // of each token
};

// Runs `reqs` through `batch` as a server would: each waits in order until a slot is free and the batch
// admits its prompt (chunk > 0: prefill_chunked), steps run until all are done.
std::vector<Result> serve(SlotBatch& batch, const std::vector<Request>& reqs, int chunk = 0) {
  std::vector<Result> out(reqs.size());
  std::map<int, size_t> at;  // slot -> request
  size_t next = 0;
  auto keep = [&](int slot, int from) {
    Result& r = out[at[slot]];
    const std::vector<int32_t>& t = batch.tokens(slot);
    for (int i = from; i < static_cast<int>(t.size()); ++i) {
      r.tokens.push_back(t[static_cast<size_t>(i)]);
      r.logits.push_back(batch.token_logits(slot, i));
    }
  };
  for (int guard = 0; guard < 100000; ++guard) {
    while (next < reqs.size() && batch.free_slot() >= 0) {
      const int len = static_cast<int>(reqs[next].prompt.size());
      if (!batch.admissible(chunk > 0 ? (len + chunk - 1) / chunk * chunk : len)) break;
      const int slot = batch.choose_slot(reqs[next].prompt);
      at[slot] = next;
      if (chunk > 0) {
        batch.prefill_chunked(slot, reqs[next].prompt, reqs[next].config, chunk);
      } else {
        batch.prefill(slot, reqs[next].prompt, reqs[next].config);
        keep(slot, 0);
      }
      ++next;
    }
    if (batch.running_count() == 0 && next == reqs.size()) break;
    std::map<int, int> before;
    for (const auto& [slot, i] : at) before[slot] = static_cast<int>(out[i].tokens.size());
    batch.step();
    for (const auto& [slot, i] : at) {
      if (static_cast<int>(batch.tokens(slot).size()) > before[slot]) keep(slot, before[slot]);
    }
    for (auto it = at.begin(); it != at.end();) {
      if (!batch.running(it->first)) {
        batch.release(it->first);
        it = at.erase(it);
      } else {
        ++it;
      }
    }
  }
  return out;
}

SlotBatchOptions options(int64_t kv_bytes, int block = 16) {
  return {.host_sampling = true,
          .keep_logits = true,
          .decode_rows = SlotBatchOptions::DecodeRows::Running,
          .prefix_block = block,
          .kv_cache_bytes = kv_bytes};
}

// Requests of a shared head (prefix-cache hits and evictions), some seeded sampled, some with prompt lookup.
std::vector<Request> requests(int64_t vocab, int count) {
  std::vector<Request> reqs;
  const std::vector<int32_t> head = ids(32, 7, vocab);
  for (int i = 0; i < count; ++i) {
    Request r;
    r.prompt = i % 2 == 0 ? head : std::vector<int32_t>{};
    const std::vector<int32_t> tail = ids(5 + 7 * i % 23, i + 1, vocab);
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    if (i % 3 == 2) {  // a repeated phrase: prompt lookup finds drafts
      const std::vector<int32_t> again(r.prompt.begin(), r.prompt.begin() + 6);
      r.prompt.insert(r.prompt.end(), again.begin(), again.end());
    }
    r.config.max_new_tokens = 160 + 10 * (i % 4);
    if (i % 4 == 1) {
      r.config.do_sample = true;
      r.config.temperature = 0.9f;
      r.config.top_k = 20;
      r.config.seed = 1000 + static_cast<uint64_t>(i);
    }
    if (i % 3 == 0) r.config.prompt_lookup_num_tokens = 4;
    reqs.push_back(r);
  }
  return reqs;
}

// Each request alone in an uncapped batch.
std::vector<Result> alone(CausalLM& m, const std::vector<Request>& reqs, int cache_len) {
  std::vector<Result> out;
  for (const Request& r : reqs) {
    SlotBatch b(m, 1, cache_len, options(0));
    out.push_back(serve(b, {r})[0]);
  }
  return out;
}

void expect_same(const std::vector<Result>& got, const std::vector<Result>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(got[i].tokens, want[i].tokens);
    ASSERT_EQ(got[i].logits.size(), want[i].logits.size());
    for (size_t t = 0; t < got[i].logits.size(); ++t)
      ASSERT_TRUE(got[i].logits[t] == want[i].logits[t]) << "token " << t << ": logits differ";
  }
}

}  // namespace

// Address space at first; pages as slots are written (a copy into a row here); given back by
// release_cache_slots past the slot asked, and wholly from 0.
TEST(KvPool, CpuCacheMemoryFollowsTheSlotsWritten) {
  auto backend = backends::make_cpu_backend();
  const backends::CachePaging p = backend->cache_paging(64);
  EXPECT_EQ(p.block_tokens, 16);  // 64 float32 values: 256 bytes a slot, 16 to a 4 KiB page
  EXPECT_EQ(p.block_bytes, 4096);
  EXPECT_EQ(backends::make_cpu_backend(nullptr, {.kv_dtype = DType::BF16})->cache_paging(64).block_tokens,
            32);
  // q8_0: 64 values are 2 blocks of 34 bytes (68 a slot, which whole pages never hold): the 16-slot default
  EXPECT_EQ(backends::make_cpu_backend(nullptr, {.kv_dtype = DType::Q8_0})->cache_paging(64).block_bytes,
            16 * 68);
  EXPECT_EQ(backends::make_cpu_backend(nullptr, {.kv_dtype = DType::F8_E4M3})->cache_paging(64).block_tokens,
            64);
  EXPECT_EQ(backend->cache_paging(80).block_tokens, 64);  // 320 bytes a slot: 64 of them fill 5 pages

  const int64_t r0 = rss();
  // 4 layers x 8 rows x 4 heads x 4096 slots x 64 floats, keys and values: 1 GiB of address space.
  auto cache = backend->create_cache(4, 8, 4, 4096, 64);
  const int64_t r1 = rss();
  EXPECT_LT(r1 - r0, int64_t{16} << 20) << "creating the cache took memory";
  const int64_t row = int64_t{4} * 2 * 4 * 4096 * 64 * 4;  // one row, every layer: 128 MiB
  backend->copy_cache_row_prefix(*cache, 0, 1, 4096);      // writes all of row 1
  const int64_t r2 = rss();
  EXPECT_GT(r2 - r1, row * 9 / 10);
  backend->release_cache_slots(*cache, 1, 1024);  // keeps a quarter
  const int64_t r3 = rss();
  EXPECT_GT(r2 - r3, row * 3 / 4 * 9 / 10);
  EXPECT_LT(r2 - r3, row * 3 / 4 * 11 / 10);
  backend->release_cache_slots(*cache, 1, 0);
  EXPECT_LT(rss() - r1, int64_t{16} << 20);
  EXPECT_THROW(backend->release_cache_slots(*cache, 8, 0), Error);
  EXPECT_THROW(backend->release_cache_slots(*cache, 0, 4097), Error);
}

// Eight requests through 4 slots and a pool that holds about half of what they need: they wait for blocks,
// some are preempted and resumed, and each gets, token for token and logit for logit, what it gets alone.
TEST(KvPool, PreemptedSequencesResumeWithTheSameTokensAndLogitsOnEveryGoldenModel) {
  for (const std::string& name : golden::model_names()) {
    SCOPED_TRACE(name);
    CausalLM m = load(name);
    const std::vector<Request> reqs = requests(m.info().vocab_size, 8);
    const int cache_len = 256;
    const std::vector<Result> want = alone(m, reqs, cache_len);

    SlotBatch probe(m, 4, cache_len, options(0));
    const KvCacheStats k0 = probe.kv_cache();
    ASSERT_TRUE(k0.paged);
    EXPECT_TRUE(probe.admissible(1 << 20));  // no cap: always
    int64_t largest = 0, total = 0;
    for (const Request& r : reqs) {
      const int64_t b =
          probe.blocks_for(static_cast<int64_t>(r.prompt.size()) + *r.config.max_new_tokens - 1);
      largest = std::max(largest, b);
      total += b;
    }
    const int64_t pool = std::max(largest + 1, total / 5);
    SlotBatch batch(m, 4, cache_len, options(pool * k0.block_bytes));
    EXPECT_EQ(batch.kv_cache().total_blocks, pool);
    expect_same(serve(batch, reqs), want);
    const KvCacheStats k = batch.kv_cache();
    // (llama3_v4's heads of 12 values make blocks of 256 slots: a whole sequence, which never grows.)
    if (largest > 1) {
      EXPECT_GT(k.preemptions, 0) << "the pool never ran out: the test did not preempt";
    }
    EXPECT_EQ(k.used_blocks, 0);
    EXPECT_EQ(k.preempted, 0);
    EXPECT_LE(k.cached_blocks, pool);
  }
}

// Chunked prompts (prefill_chunked) are preempted between chunks or after, and resume in the same chunks.
TEST(KvPool, ChunkedPromptsResumeInTheirChunks) {
  CausalLM m = load("llama_gqa");
  std::vector<Request> reqs = requests(m.info().vocab_size, 6);
  const int cache_len = 256;
  std::vector<Result> want;
  for (const Request& r : reqs) {
    SlotBatch b(m, 1, cache_len, options(0));
    want.push_back(serve(b, {r}, 8)[0]);
  }
  SlotBatch probe(m, 3, cache_len, options(0));
  int64_t largest = 0;
  for (const Request& r : reqs)
    largest = std::max(largest, probe.blocks_for((static_cast<int64_t>(r.prompt.size()) + 7) / 8 * 8 +
                                                 *r.config.max_new_tokens - 1));
  SlotBatch batch(m, 3, cache_len, options(largest * probe.kv_cache().block_bytes));
  expect_same(serve(batch, reqs, 8), want);
  EXPECT_GT(batch.kv_cache().preemptions, 0);
  EXPECT_EQ(batch.kv_cache().used_blocks, 0);
}

// A draft model's rows are recomputed by its own cache after a preemption; the tokens stay those alone.
TEST(KvPool, PreemptionWithADraftModelKeepsEveryToken) {
  CausalLM m = load("qwen3_untied"), draft = load("qwen3_tied");
  const std::vector<Request> reqs = requests(m.info().vocab_size, 6);
  const int cache_len = 256;
  const std::vector<Result> want = alone(m, reqs, cache_len);
  SlotBatch probe(m, 3, cache_len, options(0));
  int64_t largest = 0;
  for (const Request& r : reqs)
    largest = std::max(
        largest, probe.blocks_for(static_cast<int64_t>(r.prompt.size()) + *r.config.max_new_tokens - 1));
  SlotBatchOptions o = options((largest + 1) * probe.kv_cache().block_bytes);
  o.draft_model = &draft;
  SlotBatch batch(m, 3, cache_len, o);
  expect_same(serve(batch, reqs), want);
  EXPECT_GT(batch.kv_cache().preemptions, 0);
  EXPECT_GT(batch.speculation().draft_tokens, 0);
}

// Released rows give their memory back past the prompt chunks kept for prefix caching; those are evicted
// (least recently used first) before anything running is preempted.
TEST(KvPool, ReleasedRowsKeepOnlyTheirCachedChunksAndAreEvictedFirst) {
  CausalLM m = load("llama_gqa");
  const int64_t vocab = m.info().vocab_size;
  SlotBatch probe(m, 4, 256, options(0));
  const int bt = probe.kv_cache().block_tokens;
  const std::vector<int32_t> a = ids(2 * bt + 5, 1, vocab), b = ids(2 * bt + 5, 2, vocab);
  GenerationConfig g;
  g.max_new_tokens = bt;
  // Chunks of one block: a prompt of 2 blocks + 5 tokens keeps 2 blocks once released.
  SlotBatch batch(m, 4, 256, options(5 * probe.kv_cache().block_bytes, bt));
  batch.prefill(0, a, g);
  while (batch.running(0)) batch.step();
  EXPECT_EQ(batch.kv_cache().used_blocks, 4);  // 2 bt + 5 + bt - 1 slots
  batch.release(0);
  EXPECT_EQ(batch.kv_cache().used_blocks, 0);
  EXPECT_EQ(batch.kv_cache().cached_blocks, 2);
  EXPECT_EQ(batch.cached_prefix(a), 2 * bt);
  // b needs 4 blocks of the 5 at its end: row 0's cached chunks are evicted on the way, nothing preempted.
  ASSERT_TRUE(batch.admissible(static_cast<int>(b.size())));
  const int slot = batch.choose_slot(b);
  EXPECT_NE(slot, 0);  // the least recently used free row is another
  batch.prefill(slot, b, g);
  while (batch.running(slot)) batch.step();
  EXPECT_EQ(batch.kv_cache().preemptions, 0);
  EXPECT_EQ(batch.cached_prefix(a), 0) << "row 0's chunks should have been evicted";
  batch.release(slot);
}

TEST(KvPool, BadPoolsAndOversizedSequencesAreRefusedByName) {
  CausalLM m = load("llama_gqa");
  SlotBatch probe(m, 2, 128, options(0));
  const int64_t block = probe.kv_cache().block_bytes;
  try {
    SlotBatch b(m, 2, 128, options(block - 1));
    FAIL() << "a pool of less than one block was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_cache_bytes"), std::string::npos) << e.what();
  }
  SlotBatchOptions all = options(4 * block);
  all.decode_rows = SlotBatchOptions::DecodeRows::All;
  EXPECT_THROW(SlotBatch(m, 2, 128, all), Error);
  SlotBatchOptions negative = options(-1);
  EXPECT_THROW(SlotBatch(m, 2, 128, negative), Error);
  // A sequence that could never fit the pool, even alone, is refused at prefill.
  SlotBatch small(m, 2, 128, options(block));
  GenerationConfig g;
  g.max_new_tokens = 100;
  try {
    small.prefill(0, ids(10, 1, m.info().vocab_size), g);
    FAIL() << "a sequence larger than the pool was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV blocks"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(small.busy(0));
}
