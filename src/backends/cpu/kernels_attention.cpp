// Causal attention over a static KV cache. One task is one kv head g and a block of up to TB consecutive
// query tokens with the G = nh / nkv query heads that share g (GQA), so each key and value row is read once
// for G * TB query rows (R of them):
//   scores S[R, n] = Q[R, hd] · K[kv_begin .. last]^T   (the matmul kernel with K as the weights, f32 or
//                                                        bf16 widened exactly: its gemm path for a prefill
//                                                        block, its gemv path for decode)
//   P = softmax(S * scale) per row over that row's own keys kv_begin .. q_slot[t], in f32 (with softcap > 0,
//       S * scale soft-capped to tanh(S * scale / softcap) * softcap first);
//   O[r, :] = sum_j P[r, j] V[j, :]                      (six rows per pass over V).
// `last` is the block's largest q_slot: a row's scores past its own q_slot are computed but never used, and
// its weighted sum stops at its own q_slot. Slots outside kv_begin .. max(q_slot) are never read.
// Sliding window (window > 0): row t sees lo(t) = max(kv_begin, q_slot[t] - window + 1) .. q_slot[t]. A block
// reads keys from the smallest lo of its rows on (keys before it are skipped, not masked); a row whose
// window starts later gets zero probabilities for the block's keys before its own lo. Blocks hold at most
// `window` tokens, so a block reads fewer than twice the keys its rows see. Decode over a long window splits
// the window's keys, as it splits the whole prefix.
// Sinks (gpt-oss): a learned logit per head joins each row's softmax denominator (its max included), so
// P = exp(s - m) / (sum exp(s - m) + exp(sink - m)), m = max(s, sink); the sink has no value row.
// A quantised cache (Q8_0 or F8_E4M3) is read in tiles of kTileKeys keys (or values) dequantised to f32 in
// this thread's scratch: the scores of a tile are the f32 matmul's, and P V continues one f32 sum across
// tiles (weighted_rows_multi_acc), so every result is the f32 path's over the dequantised values, and the
// invariances of that path (a row alone or in a batch, a prompt whole or in chunks) hold for it too.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_simd.h"
#include "backends/cpu/thread_pool.h"
#include "tessera/error.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kBlockRows = 96;  // query rows (tokens x group) per task: three 32-row gemm panels
constexpr int64_t kTileKeys = 128;  // keys of a quantised cache dequantised at a time (64 KiB at hd 128)

bool quantised_kv(DType dt) { return dt == DType::Q8_0 || dt == DType::F8_E4M3; }

struct AttnArgs {
  const float* q;                    // [T, nh, hd]
  const void* k;                     // [nkv, cache_len, hd] in kv_dtype
  const void* v;                     // [nkv, cache_len, hd] in kv_dtype
  DType kv_dtype;                    // F32, BF16, Q8_0 or F8_E4M3
  int64_t nh, hd, cache_len, group;  // group = nh / nkv query heads per kv head
  const int32_t* q_slot;
  int32_t kv_begin;
  float scale;
  float* out;          // [T, nh * hd]
  int64_t window;      // > 0: sliding window (keys j > q_slot - window)
  float softcap;       // > 0: scores s -> tanh(s / softcap) * softcap
  const float* sinks;  // [nh] or nullptr
  size_t row_bytes;    // of one cache row (kv_row_bytes)
  int64_t head_rows;   // rows from one kv head's first to the next's: cache_len (0: k, v hold one head)
  int64_t row0;        // the slot k and v start at (0: the cache; > 0: a buffer of the slots from row0 on)

  // Scales n scores (and soft-caps them).
  void scale_scores(const VecOps& ops, float* s, int64_t n) const {
    ops.scale(scale, s, n);
    if (softcap > 0.0f)
      for (int64_t j = 0; j < n; ++j) s[j] = std::tanh(s[j] / softcap) * softcap;
  }

  // The first slot query t may see.
  int64_t lo(int64_t t) const {
    return window > 0 ? std::max<int64_t>(kv_begin, q_slot[t] - window + 1) : int64_t{kv_begin};
  }
};

// Row j of kv head g in a cache (k or v) of a.kv_dtype.
const uint8_t* kv_row(const AttnArgs& a, const void* cache, int64_t g, int64_t j) {
  return static_cast<const uint8_t*>(cache) + static_cast<size_t>(g * a.head_rows + j - a.row0) * a.row_bytes;
}

// s[r * n + j] = Q row r . K row j for r < R, j < n (keys from kg on): the matmul with K as the weights, or
// for a quantised cache the same over f32 tiles of K.
void key_scores(const AttnArgs& a, const float* qb, int64_t R, const uint8_t* kg, int64_t n, float* s) {
  if (!quantised_kv(a.kv_dtype)) return matmul(qb, R, a.hd, kg, a.kv_dtype, n, nullptr, s);  // inline
  float* kt = scratch(5, kTileKeys * a.hd);
  float* st = scratch(6, R * kTileKeys);
  for (int64_t j0 = 0; j0 < n; j0 += kTileKeys) {
    const int64_t nt = std::min(kTileKeys, n - j0);
    load_kv_rows(a.kv_dtype, kg + static_cast<size_t>(j0) * a.row_bytes, a.hd, nt, kt);
    matmul(qb, R, a.hd, kt, DType::F32, nt, nullptr, st);
    for (int64_t r = 0; r < R; ++r)
      std::memcpy(s + r * n + j0, st + r * nt, static_cast<size_t>(nt) * sizeof(float));
  }
}

// dst += p * V row j (rows of hd values in a.kv_dtype from vg).
void axpy_v(const AttnArgs& a, const VecOps& ops, const uint8_t* vg, int64_t j, float p, float* dst) {
  const uint8_t* row = vg + static_cast<size_t>(j) * a.row_bytes;
  if (a.kv_dtype == DType::BF16) return ops.axpy_bf16(p, reinterpret_cast<const uint16_t*>(row), dst, a.hd);
  if (a.kv_dtype == DType::F32) return ops.axpy(p, reinterpret_cast<const float*>(row), dst, a.hd);
  float* vf = scratch(5, a.hd);
  load_kv_rows(a.kv_dtype, row, a.hd, 1, vf);
  ops.axpy(p, vf, dst, a.hd);
}

// dst[r, :] (row stride ldo) = sum_{j < keys} p[r * ldp + j] * V row j, for r < rows.
void weighted_v(const AttnArgs& a, const VecOps& ops, const uint8_t* vg, const float* p, int64_t ldp,
                int64_t rows, int64_t keys, float* dst, int64_t ldo) {
  if (a.kv_dtype == DType::BF16)
    return ops.weighted_rows_multi_bf16(p, ldp, rows, keys, reinterpret_cast<const uint16_t*>(vg), a.hd, dst,
                                        ldo);
  if (a.kv_dtype == DType::F32 || keys == 0)  // no keys: zeros (rows are not read)
    return ops.weighted_rows_multi(p, ldp, rows, keys, reinterpret_cast<const float*>(vg), a.hd, dst, ldo);
  float* vt = scratch(5, kTileKeys * a.hd);
  for (int64_t j0 = 0; j0 < keys; j0 += kTileKeys) {
    const int64_t nt = std::min(kTileKeys, keys - j0);
    load_kv_rows(a.kv_dtype, vg + static_cast<size_t>(j0) * a.row_bytes, a.hd, nt, vt);
    (j0 == 0 ? ops.weighted_rows_multi : ops.weighted_rows_multi_acc)(p + j0, ldp, rows, nt, vt, a.hd, dst,
                                                                      ldo);
  }
}

// Tokens t0 .. t1-1, kv head g: writes out[t, (g * group + i) * hd ...] for i < group.
void attend_block(const AttnArgs& a, const VecOps& ops, int64_t t0, int64_t t1, int64_t g) {
  const int64_t h0 = g * a.group, G = a.group, hd = a.hd, R = (t1 - t0) * G;
  // Keys first .. last: from the earliest window start to the latest query of rows that see any key.
  int64_t first = INT64_MAX, last = -1;
  for (int64_t t = t0; t < t1; ++t) {
    if (a.q_slot[t] < a.kv_begin) continue;  // padding: sees nothing
    first = std::min(first, a.lo(t));
    last = std::max<int64_t>(last, a.q_slot[t]);
  }
  auto out_row = [&](int64_t r) { return a.out + ((t0 + r / G) * a.nh + h0 + r % G) * hd; };
  // Row r's keys are [start(r), keys(r)) of the block's keys (keys(r) = 0: none).
  auto keys = [&](int64_t r) {
    const int64_t t = t0 + r / G;
    return a.q_slot[t] < a.kv_begin ? int64_t{0} : a.q_slot[t] - first + 1;
  };
  auto start = [&](int64_t r) { return a.lo(t0 + r / G) - first; };
  if (last < 0) {  // nothing visible for any row (padding)
    for (int64_t r = 0; r < R; ++r) std::memset(out_row(r), 0, static_cast<size_t>(hd) * sizeof(float));
    return;
  }
  const int64_t n = last - first + 1;
  const uint8_t* kg = kv_row(a, a.k, g, first);  // [n, hd]
  const uint8_t* vg = kv_row(a, a.v, g, first);  // [n, hd]
  // Q rows of the block, [R, hd] (token-major, then the group's heads): contiguous per token already.
  const float* qb = a.q + (t0 * a.nh + h0) * hd;
  if (t1 - t0 > 1) {
    float* qc = scratch(2, R * hd);
    for (int64_t t = t0; t < t1; ++t)
      std::memcpy(qc + (t - t0) * G * hd, a.q + (t * a.nh + h0) * hd,
                  static_cast<size_t>(G * hd) * sizeof(float));
    qb = qc;
  }
  float* s = scratch(3, R * n);  // [R, n] scores, then probabilities
  key_scores(a, qb, R, kg, n, s);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t nr = keys(r);
    if (nr == 0) continue;
    const int64_t j0 = start(r);
    std::fill(s + r * n, s + r * n + j0, 0.0f);  // keys before this row's window
    float* sr = s + r * n + j0;
    a.scale_scores(ops, sr, nr - j0);
    float mx = *std::max_element(sr, sr + nr - j0);
    if (a.sinks) {
      const float sink = a.sinks[h0 + r % G];
      mx = std::max(mx, sink);
      ops.scale(1.0f / (ops.exp_sum(sr, nr - j0, mx) + std::exp(sink - mx)), sr, nr - j0);
    } else {
      ops.scale(1.0f / ops.exp_sum(sr, nr - j0, mx), sr, nr - j0);
    }
  }
  // O = P V: rows in runs of six share each V row up to the run's smallest key count; the few keys left
  // (later tokens of the run) are added row by row.
  for (int64_t r0 = 0; r0 < R;) {
    int64_t r1 = std::min(R, r0 + 6);
    int64_t common = n;
    for (int64_t r = r0; r < r1; ++r) common = std::min(common, keys(r));
    if (common == 0) {  // a row with no visible key: handle it alone
      if (keys(r0) == 0) {
        std::memset(out_row(r0), 0, static_cast<size_t>(hd) * sizeof(float));
      } else {
        weighted_v(a, ops, vg, s + r0 * n, n, 1, keys(r0), out_row(r0), hd);
      }
      ++r0;
      continue;
    }
    // out rows of one token are contiguous; a run may span tokens, so write through a staging buffer.
    float o[6 * 512];
    float* ob = hd <= 512 ? o : scratch(1, 6 * hd);
    weighted_v(a, ops, vg, s + r0 * n, n, r1 - r0, common, ob, hd);
    for (int64_t r = r0; r < r1; ++r) {
      float* dst = out_row(r);
      std::memcpy(dst, ob + (r - r0) * hd, static_cast<size_t>(hd) * sizeof(float));
      const float* sr = s + r * n;
      for (int64_t j = common; j < keys(r); ++j) axpy_v(a, ops, vg, j, sr[j], dst);
    }
    r0 = r1;
  }
}

// One token (decode), kv head g, keys j0 .. j1-1 (cache slots): the group's scores, their max m and
// sum l of exp(score - m), and the unnormalised sum o of exp(score - m) V. part: [group][2 + hd] (m, l, o).
void attend_chunk(const AttnArgs& a, const VecOps& ops, int64_t g, int64_t j0, int64_t j1, float* part) {
  const int64_t G = a.group, hd = a.hd, n = j1 - j0;
  const uint8_t* vg = kv_row(a, a.v, g, j0);
  float* s = scratch(3, G * n);
  key_scores(a, a.q + g * G * hd, G, kv_row(a, a.k, g, j0), n, s);
  for (int64_t r = 0; r < G; ++r) {
    float* sr = s + r * n;
    a.scale_scores(ops, sr, n);
    const float mx = *std::max_element(sr, sr + n);
    part[r * (2 + hd)] = mx;
    part[r * (2 + hd) + 1] = ops.exp_sum(sr, n, mx);
  }
  weighted_v(a, ops, vg, s, n, G, n, part + 2, 2 + hd);
}

// Decode over a long context: each kv head's keys are split into chunks that the threads share (one task
// per kv head alone leaves threads idle when there are few kv heads), and the chunks' partial softmax sums
// are merged: out = sum_c e^(m_c - M) o_c / sum_c e^(m_c - M) l_c with M = max_c m_c.
void attend_decode_split(const AttnArgs& a, const VecOps& ops, int64_t nkv, int64_t chunks) {
  const int64_t G = a.group, hd = a.hd, first = a.lo(0), n = a.q_slot[0] - first + 1;
  static thread_local std::vector<float> parts;  // [nkv][chunks][G][2 + hd]; grows once
  const size_t stride = static_cast<size_t>(G * (2 + hd));
  if (parts.size() < static_cast<size_t>(nkv * chunks) * stride)
    parts.resize(static_cast<size_t>(nkv * chunks) * stride);
  float* pbase = parts.data();
  std::atomic<int64_t> next{0};
  const int64_t tasks = nkv * chunks;
  ThreadPool::instance().run([&](int, int) {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < tasks;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t g = i / chunks, c = i % chunks;
      attend_chunk(a, ops, g, first + n * c / chunks, first + n * (c + 1) / chunks,
                   pbase + static_cast<size_t>(i) * stride);
    }
  });
  for (int64_t g = 0; g < nkv; ++g) {
    for (int64_t r = 0; r < G; ++r) {
      auto part = [&](int64_t c) {
        return pbase + static_cast<size_t>(g * chunks + c) * stride + r * (2 + hd);
      };
      float mx = -INFINITY;
      for (int64_t c = 0; c < chunks; ++c) mx = std::max(mx, part(c)[0]);
      if (a.sinks) mx = std::max(mx, a.sinks[g * G + r]);
      float* dst = a.out + (g * G + r) * hd;
      std::memset(dst, 0, static_cast<size_t>(hd) * sizeof(float));
      float l = 0.0f;
      for (int64_t c = 0; c < chunks; ++c) {
        const float w = std::exp(part(c)[0] - mx);
        l += w * part(c)[1];
        ops.axpy(w, part(c) + 2, dst, hd);
      }
      if (a.sinks) l += std::exp(a.sinks[g * G + r] - mx);
      ops.scale(1.0f / l, dst, hd);
    }
  }
}

// A prompt over a quantised cache, one kv head at a time: the head's keys and values that any row sees are
// dequantised once into f32 buffers (the caller's scratch, shared with the pool's threads), and every block
// of tokens reads them there, instead of dequantising its own tiles (which would repeat the work once per
// block). The values are the tiles' values, so the results are the same bit for bit.
void attend_heads_dequantised(const AttnArgs& a, const VecOps& ops, int64_t T, int64_t nkv, int64_t tb) {
  int64_t first = INT64_MAX, last = -1;
  for (int64_t t = 0; t < T; ++t) {
    if (a.q_slot[t] < a.kv_begin) continue;  // padding: sees nothing
    first = std::min(first, a.lo(t));
    last = std::max<int64_t>(last, a.q_slot[t]);
  }
  if (last < 0) first = last = 0;  // every row is padding: nothing is read
  const int64_t hd = a.hd, rows = last + 1 - first;
  float* kf = scratch(5, 2 * rows * hd);  // [rows, hd] keys of slots first .. last, then values
  float* vf = kf + rows * hd;
  AttnArgs h = a;
  h.k = kf;
  h.v = vf;
  h.kv_dtype = DType::F32;
  h.row_bytes = static_cast<size_t>(hd) * sizeof(float);
  h.head_rows = 0;  // every kv head reads the one buffer
  h.row0 = first;
  const int64_t blocks = (T + tb - 1) / tb;
  for (int64_t g = 0; g < nkv; ++g) {
    ThreadPool::instance().parallel_for(rows, 256, [&](int64_t r0, int64_t r1) {
      load_kv_rows(a.kv_dtype, kv_row(a, a.k, g, first + r0), hd, r1 - r0, kf + r0 * hd);
      load_kv_rows(a.kv_dtype, kv_row(a, a.v, g, first + r0), hd, r1 - r0, vf + r0 * hd);
    });
    std::atomic<int64_t> next{0};
    ThreadPool::instance().run([&](int, int) {
      for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < blocks;
           i = next.fetch_add(1, std::memory_order_relaxed)) {
        const int64_t b = blocks - 1 - i;  // the last (longest: causal) blocks first
        attend_block(h, ops, b * tb, std::min(T, (b + 1) * tb), g);
      }
    });
  }
}

// Keys per decode chunk: below this a kv head is not split.
constexpr int64_t kDecodeChunkKeys = 128;

}  // namespace

void attention(const float* q, int64_t T, int64_t nh, int64_t hd, const void* k, const void* v,
               DType kv_dtype, int64_t nkv, int64_t cache_len, const int32_t* q_slot, int32_t kv_begin,
               float scale, float* out, int64_t window, float softcap, const float* sinks) {
  TS_ASSERT(nkv > 0 && nh % nkv == 0, "attention nh=", nh, " nkv=", nkv);
  TS_ASSERT(window >= 0, "attention window=", window);
  TS_ASSERT(kv_dtype == DType::F32 || kv_dtype == DType::BF16 || quantised_kv(kv_dtype),
            "attention KV cache dtype ", dtype_name(kv_dtype));
  TS_ASSERT(kv_begin >= 0, "attention kv_begin=", kv_begin);
  for (int64_t t = 0; t < T; ++t) {
    TS_ASSERT(q_slot[t] < cache_len, "attention q_slot[", t, "]=", q_slot[t], " cache_len=", cache_len);
  }
  TS_ASSERT(softcap >= 0.0f, "attention softcap=", softcap);
  const AttnArgs a{
      q,         k,        v,     kv_dtype, nh,     hd,      cache_len, nh / nkv,
      q_slot,    kv_begin, scale, out,      window, softcap, sinks,     kv_row_bytes(kv_dtype, hd),
      cache_len, 0};
  const VecOps& ops = vec_ops();
  if (T == 1 && q_slot[0] >= kv_begin) {
    // Enough chunks for every thread to take a few (so a preempted thread holds up little), none shorter
    // than kDecodeChunkKeys.
    const int64_t n = q_slot[0] - a.lo(0) + 1, threads = ThreadPool::instance().num_threads();
    const int64_t chunks = std::min<int64_t>(n / kDecodeChunkKeys, (4 * threads + nkv - 1) / nkv);
    if (chunks > 1) return attend_decode_split(a, ops, nkv, chunks);
  }
  int64_t tb = std::max<int64_t>(1, kBlockRows / a.group);  // tokens per block
  if (window > 0) tb = std::min(tb, window);                // a block's keys span < 2 windows
  const int64_t blocks = (T + tb - 1) / tb, tasks = blocks * nkv;
  if (quantised_kv(kv_dtype) && blocks >= 2 * ThreadPool::instance().num_threads())
    return attend_heads_dequantised(a, ops, T, nkv, tb);
  // Tasks claimed from a counter, the last (longest: causal) blocks first.
  std::atomic<int64_t> next{0};
  ThreadPool::instance().run([&](int, int) {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < tasks;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t b = blocks - 1 - i / nkv;
      attend_block(a, ops, b * tb, std::min(T, (b + 1) * tb), i % nkv);
    }
  });
}

void store_kv_row(DType kv_dtype, const float* x, int64_t hd, void* dst) {
  switch (kv_dtype) {
    case DType::F32:
      std::memcpy(dst, x, static_cast<size_t>(hd) * sizeof(float));
      return;
    case DType::BF16:
      for (int64_t d = 0; d < hd; ++d) static_cast<uint16_t*>(dst)[d] = f32_to_bf16(x[d]);
      return;
    case DType::F8_E4M3:
      for (int64_t d = 0; d < hd; ++d) static_cast<uint8_t*>(dst)[d] = f32_to_f8e4m3(x[d]);
      return;
    case DType::Q8_0: {
      if (!std::all_of(x, x + hd, [](float e) { return std::isfinite(e); })) {
        // No scale fits: every block's scale NaN (its quants 0), so the row reads back as NaN and propagates
        // as it would from an f32 cache (quantize_rows refuses non-finite values).
        auto* block = static_cast<uint8_t*>(dst);
        const uint16_t nan = 0x7e00;
        for (int64_t b = 0; b < kv_row_values(kv_dtype, hd) / 32; ++b, block += 34) {
          std::memcpy(block, &nan, 2);
          std::memset(block + 2, 0, 32);
        }
        return;
      }
      if (hd % 32 == 0) return quantize_rows(x, 1, hd, DType::Q8_0, dst);
      // The last block padded with zeros.
      thread_local std::vector<float> padded;
      padded.assign(static_cast<size_t>(kv_row_values(kv_dtype, hd)), 0.0f);
      std::copy(x, x + hd, padded.begin());
      return quantize_rows(padded.data(), 1, static_cast<int64_t>(padded.size()), DType::Q8_0, dst);
    }
    default:
      TS_ASSERT(false, "KV cache dtype ", dtype_name(kv_dtype));
  }
}

void load_kv_rows(DType kv_dtype, const void* src, int64_t hd, int64_t rows, float* y) {
  switch (kv_dtype) {
    case DType::Q8_0: {
      if (hd % 32 == 0) return dequantize_rows(DType::Q8_0, src, hd, rows, y);
      const int64_t width = kv_row_values(kv_dtype, hd);
      const size_t row_bytes = kv_row_bytes(kv_dtype, hd);
      thread_local std::vector<float> padded;
      padded.resize(static_cast<size_t>(width));
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_rows(DType::Q8_0, static_cast<const uint8_t*>(src) + static_cast<size_t>(r) * row_bytes,
                        width, 1, padded.data());
        std::copy(padded.begin(), padded.begin() + hd, y + r * hd);
      }
      return;
    }
    case DType::F8_E4M3:
      return vec_ops().widen_f8e4m3(static_cast<const uint8_t*>(src), y, rows * hd);
    case DType::BF16:
      for (int64_t i = 0; i < rows * hd; ++i) y[i] = bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return;
    case DType::F32:
      std::memcpy(y, src, static_cast<size_t>(rows * hd) * sizeof(float));
      return;
    default:
      TS_ASSERT(false, "KV cache dtype ", dtype_name(kv_dtype));
  }
}

}  // namespace tessera::cpu
