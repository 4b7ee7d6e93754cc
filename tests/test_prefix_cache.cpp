// Automatic prefix caching (SlotBatchOptions::prefix_cache): a prompt that shares whole chunks with any cache
// row's prompt takes them from there and gives, bit for bit, the logits and tokens of the same prompt
// computed without a hit, on every golden model (sliding windows, soft-capping, sinks and experts
// included); keys and values of generated tokens are never taken; a free slot holding the prefix is chosen,
// else the least recently used one.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "golden_util.h"
#include "tessera/batch.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
namespace golden = tessera::golden;

namespace {

CausalLM load(const std::string& name) { return golden::load_f32(name); }

std::vector<int32_t> ids(int len, int salt, int64_t vocab = 128) {
  std::vector<int32_t> v(static_cast<size_t>(len));
  for (int i = 0; i < len; ++i)
    v[static_cast<size_t>(i)] = static_cast<int32_t>(3 + (i * 53 + salt * 29 + i * i) % (vocab - 3));
  return v;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

GenerationConfig greedy(int n) {
  GenerationConfig g;
  g.max_new_tokens = n;
  return g;
}

SlotBatchOptions cached(int block) {
  return {.keep_logits = true, .decode_rows = SlotBatchOptions::DecodeRows::Running, .prefix_block = block};
}

// A request's logits of every token, and its tokens, run in `batch` slot `slot` to the end.
std::vector<std::vector<float>> run(SlotBatch& batch, int slot, const std::vector<int32_t>& prompt, int n) {
  std::vector<std::vector<float>> out;
  batch.prefill(slot, prompt, greedy(n));
  out.push_back(batch.last_logits(slot));
  while (batch.running(slot)) {
    batch.step();
    out.push_back(batch.last_logits(slot));
  }
  return out;
}

}  // namespace

// A hit from another slot's running prompt (copied) and from the slot's own row (in place) against the same
// prompts computed with nothing cached: the same logits to the last bit, for every token.
TEST(PrefixCache, AHitGivesTheLogitsOfAMissToTheLastBitOnEveryGoldenModel) {
  for (const std::string& name : golden::model_names()) {
    SCOPED_TRACE(name);
    CausalLM m = load(name);
    const int64_t vocab = m.info().vocab_size;
    const std::vector<int32_t> system = ids(70, 1, vocab);  // 4 whole chunks of 16 (64 tokens) are cacheable
    const std::vector<int32_t> a = cat(system, ids(9, 2, vocab)), b = cat(system, ids(13, 3, vocab));

    SlotBatch batch(m, 3, 160, cached(16));
    ASSERT_TRUE(batch.prefix_caching());
    batch.prefill(0, a, greedy(6));  // computes and keeps a's whole chunks
    EXPECT_EQ(batch.cached_prefix(b), 64);
    const int64_t before = batch.reused_tokens();
    const auto hit = run(batch, 1, b, 6);  // copied from row 0 while slot 0 runs
    EXPECT_EQ(batch.reused_tokens() - before, 64);
    SlotBatch fresh(m, 1, 160, cached(16));
    const auto miss = run(fresh, 0, b, 6);
    EXPECT_EQ(fresh.reused_tokens(), 0);
    ASSERT_EQ(hit.size(), miss.size());
    for (size_t i = 0; i < hit.size(); ++i) EXPECT_TRUE(hit[i] == miss[i]) << "token " << i;
    EXPECT_EQ(batch.tokens(1), fresh.tokens(0));

    // Slot 1 released: the same prompt again reuses its own row (nothing copied), still bit-equal.
    batch.release(1);
    EXPECT_EQ(batch.choose_slot(b), 1);
    const auto again = run(batch, 1, b, 6);
    for (size_t i = 0; i < again.size(); ++i) EXPECT_TRUE(again[i] == miss[i]) << "token " << i;
  }
}

// Generated tokens' keys and values are never reused: a next turn (prompt, answer, more) reuses only the
// whole chunks of the first prompt, and its answer equals the turn computed from scratch.
TEST(PrefixCache, TheNextTurnReusesOnlyThePromptsChunks) {
  CausalLM m = load("llama_gqa");
  SlotBatch batch(m, 2, 200, cached(16));
  const std::vector<int32_t> first = ids(40, 7);  // 2 whole chunks (32 tokens)
  batch.prefill(0, first, greedy(30));
  while (batch.running(0)) batch.step();
  const std::vector<int32_t> next = cat(cat(first, batch.tokens(0)), ids(5, 8));  // 75 tokens
  batch.release(0);
  EXPECT_EQ(batch.cached_prefix(next), 32);
  const auto hit = run(batch, 0, next, 8);
  SlotBatch fresh(m, 1, 200, cached(16));
  const auto miss = run(fresh, 0, next, 8);
  for (size_t i = 0; i < hit.size(); ++i) EXPECT_TRUE(hit[i] == miss[i]) << "token " << i;
  EXPECT_EQ(batch.reused_tokens(), 32);
}

// Never the whole prompt (its last token runs), only whole chunks, and nothing for other prompts.
TEST(PrefixCache, OnlyWholeChunksAndNeverTheLastToken) {
  CausalLM m = load("qwen3_tied");
  SlotBatch batch(m, 2, 128, cached(8));
  const std::vector<int32_t> p = ids(32, 4);
  batch.prefill(0, p, greedy(2));
  EXPECT_EQ(batch.cached_prefix(p), 24);                            // 32 cached, but the last token runs
  EXPECT_EQ(batch.cached_prefix(cat(p, {5})), 32);                  // one more token: all four chunks
  EXPECT_EQ(batch.cached_prefix({p.begin(), p.begin() + 20}), 16);  // a shorter prompt: its whole chunks
  EXPECT_EQ(batch.cached_prefix(ids(40, 9)), 0);
  std::vector<int32_t> parted = p;
  parted[10] = parted[10] == 5 ? 6 : 5;
  EXPECT_EQ(batch.cached_prefix(parted), 8);  // parts in the second chunk
}

// Choosing a free slot: the one whose row holds the prefix; else the least recently used row (empty rows
// first); slot 0 is busy throughout.
TEST(PrefixCache, ChoosesTheRowHoldingThePrefixElseTheLeastRecentlyUsed) {
  CausalLM m = load("qwen3_tied");
  SlotBatch batch(m, 4, 128, cached(8));
  const std::vector<int32_t> x = ids(20, 1), y = ids(20, 2), z = ids(20, 3);
  batch.prefill(0, ids(10, 9), greedy(50));  // busy
  EXPECT_EQ(batch.choose_slot(x), 1);        // rows 1-3 empty: the lowest
  batch.prefill(1, x, greedy(1));
  batch.release(1);
  EXPECT_EQ(batch.choose_slot(y), 2);  // empty rows before row 1's cached chunks
  batch.prefill(2, y, greedy(1));
  batch.release(2);
  batch.prefill(3, z, greedy(1));
  batch.release(3);
  EXPECT_EQ(batch.choose_slot(cat(x, {7})), 1);  // holds x
  EXPECT_EQ(batch.choose_slot(cat(z, {7})), 3);  // holds z
  EXPECT_EQ(batch.choose_slot(ids(30, 5)), 1);   // nothing cached: row 1 was used least recently
  batch.prefill(2, cat(x, {7}), greedy(1));      // takes x from row 1: row 1 is now the most recent
  batch.release(2);
  EXPECT_EQ(batch.choose_slot(ids(30, 5)), 3);
}

TEST(PrefixCache, OffWhereItCannotBeExactAndBadBlocksRefused) {
  CausalLM m = load("qwen3_tied");
  EXPECT_FALSE(SlotBatch(m, 2, 64, {.prefix_cache = false}).prefix_caching());
  EXPECT_FALSE(SlotBatch(m, 2, 64, {.prefix_reuse = true}).prefix_caching());
  EXPECT_TRUE(SlotBatch(m, 2, 64).prefix_caching());
  EXPECT_THROW(SlotBatch(m, 2, 64, {.prefix_block = 0}), Error);
  EXPECT_THROW(SlotBatch(m, 2, 64, {.prefix_block = -3}), Error);
  EXPECT_TRUE(SlotBatch(m, 2, 64, {.prefix_block = 65}).prefix_caching());  // no prompt has a whole chunk
}
