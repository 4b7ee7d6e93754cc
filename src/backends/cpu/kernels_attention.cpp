// Causal attention over a static KV cache. One task is one query token and one kv head with the G = nh / nkv
// query heads that share it (GQA), so each key and value row is read once for the whole group:
//   scores S[G, n] = Q[G, hd] · K[kv_begin .. q_slot[t]]^T      (the matmul kernel, f32 weights)
//   P = softmax(S * scale) per row in f32;   O[g, :] = sum_j P[g, j] V[j, :].
// Slots outside kv_begin .. q_slot[t] are never read.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_simd.h"
#include "backends/cpu/thread_pool.h"
#include "tessera/error.h"

namespace tessera::cpu {
namespace {

struct AttnArgs {
  const float* q;                    // [T, nh, hd]
  const float* k;                    // [nkv, cache_len, hd]
  const float* v;                    // [nkv, cache_len, hd]
  int64_t nh, hd, cache_len, group;  // group = nh / nkv query heads per kv head
  const int32_t* q_slot;
  int32_t kv_begin;
  float scale;
  float* out;  // [T, nh * hd]
};

// Query token t, kv head g: writes out[t, (g * group + i) * hd ...] for i < group.
void attend_group(const AttnArgs& a, const VecOps& ops, int64_t t, int64_t g) {
  const int64_t h0 = g * a.group;
  float* o = a.out + (t * a.nh + h0) * a.hd;  // [group, hd]
  const int64_t last = a.q_slot[t];
  if (last < a.kv_begin) {  // nothing visible (a padding row)
    std::memset(o, 0, static_cast<size_t>(a.group * a.hd) * sizeof(float));
    return;
  }
  const int64_t n = last - a.kv_begin + 1;
  const float* qg = a.q + (t * a.nh + h0) * a.hd;                 // [group, hd]
  const float* kg = a.k + (g * a.cache_len + a.kv_begin) * a.hd;  // [n, hd]
  const float* vg = a.v + (g * a.cache_len + a.kv_begin) * a.hd;  // [n, hd]
  float* s = scratch(3, a.group * n);                             // [group, n] scores
  matmul(qg, a.group, a.hd, kg, DType::F32, n, nullptr, s);       // runs inline: we are inside a pool job
  for (int64_t i = 0; i < a.group; ++i) {
    float* si = s + i * n;
    ops.scale(a.scale, si, n);
    const float mx = *std::max_element(si, si + n);
    ops.scale(1.0f / ops.exp_sum(si, n, mx), si, n);
    ops.weighted_rows(si, n, vg, a.hd, o + i * a.hd);
  }
}

}  // namespace

void attention(const float* q, int64_t T, int64_t nh, int64_t hd, const float* k, const float* v, int64_t nkv,
               int64_t cache_len, const int32_t* q_slot, int32_t kv_begin, float scale, float* out) {
  TS_ASSERT(nkv > 0 && nh % nkv == 0, "attention nh=", nh, " nkv=", nkv);
  TS_ASSERT(kv_begin >= 0, "attention kv_begin=", kv_begin);
  for (int64_t t = 0; t < T; ++t) {
    TS_ASSERT(q_slot[t] < cache_len, "attention q_slot[", t, "]=", q_slot[t], " cache_len=", cache_len);
  }
  const AttnArgs a{q, k, v, nh, hd, cache_len, nh / nkv, q_slot, kv_begin, scale, out};
  const VecOps& ops = vec_ops();
  ThreadPool::instance().run([&](int tid, int nth) {
    // Interleaved (not contiguous) tasks: later tokens see more keys, so this balances causal prefill.
    for (int64_t i = tid; i < T * nkv; i += nth) attend_group(a, ops, i / nkv, i % nkv);
  });
}

}  // namespace tessera::cpu
