// Causal attention over a static KV cache. One (query token, head) pair is one task: scores against keys
// kv_begin .. q_slot[t] (never further), an f32 softmax, and the weighted sum of values.
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
  const float* q;  // [T, nh, hd]
  const float* k;  // [nkv, cache_len, hd]
  const float* v;  // [nkv, cache_len, hd]
  int64_t nh, hd, cache_len, group;  // group = nh / nkv query heads per kv head
  const int32_t* q_slot;
  int32_t kv_begin;
  float scale;
  float* out;  // [T, nh * hd]
};

// One query head of one token: o [hd] = softmax(q·K^T * scale) · V over slots kv_begin .. q_slot[t].
void attend_one(const AttnArgs& a, const VecOps& ops, int64_t t, int64_t h) {
  float* o = a.out + (t * a.nh + h) * a.hd;  // [hd]
  std::memset(o, 0, static_cast<size_t>(a.hd) * sizeof(float));
  const int64_t last = a.q_slot[t];
  if (last < a.kv_begin) return;  // nothing visible (a padding row)
  const int64_t n = last - a.kv_begin + 1;
  const float* qh = a.q + (t * a.nh + h) * a.hd;                                        // [hd]
  const float* kh = a.k + ((h / a.group) * a.cache_len + a.kv_begin) * a.hd;            // [n, hd]
  const float* vh = a.v + ((h / a.group) * a.cache_len + a.kv_begin) * a.hd;            // [n, hd]
  float* s = scratch(3, n);                                                              // [n] scores
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = ops.dot(qh, kh + j * a.hd, a.hd) * a.scale;
    mx = std::max(mx, s[j]);
  }
  const float inv = 1.0f / ops.exp_sum(s, n, mx);
  for (int64_t j = 0; j < n; ++j) ops.axpy(s[j] * inv, vh + j * a.hd, o, a.hd);
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
  ThreadPool::instance().parallel_for(T * nh, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) attend_one(a, ops, i / nh, i % nh);
  });
}

}  // namespace tessera::cpu
