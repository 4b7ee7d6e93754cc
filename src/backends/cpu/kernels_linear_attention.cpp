// Gated DeltaNet (Qwen3.5 / Qwen3-Next's linear attention) with its recurrent state, token by token in f32:
// the per-token recurrence Transformers' torch_recurrent_gated_delta_rule computes (its chunked form for
// prompts is the same sums regrouped, equal to ~1e-6).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/thread_pool.h"

namespace tessera::cpu {
namespace {

float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }  // PyTorch's threshold 20
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float x) { return x / (1.0f + std::exp(-x)); }

// x * rsqrt(sum(x^2) + eps), times `scale` (FLA's l2norm, as Transformers').
void l2_normalise(const float* x, int64_t n, float scale, float* out) {
  float ss = 0.f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * scale;
}

// One token of the gated delta rule on one head's state S [dk, dv], in place: S *= decay;
// delta = (v - S^T k) * beta; S += k (x) delta; o = S^T q. The loops run along dv (contiguous, no reduction
// across j), so each ISA's copy below vectorises them with its width; the sums over i stay in i order, and
// without FMA contraction (this file is compiled with -ffp-contract=off: CMakeLists.txt) every copy, and the
// vector and scalar paths the vectoriser picks between by the buffers' addresses, computes the same bits.
__attribute__((always_inline)) inline void delta_step_body(float* S, const float* k, const float* q,
                                                           const float* v, float beta, float decay,
                                                           int64_t dk, int64_t dv, float* delta, float* o) {
  for (int64_t j = 0; j < dv; ++j) delta[j] = 0.f;
  for (int64_t i = 0; i < dk; ++i) {
    float* Si = S + i * dv;
    const float ki = k[i];
    for (int64_t j = 0; j < dv; ++j) {
      Si[j] *= decay;
      delta[j] += Si[j] * ki;
    }
  }
  for (int64_t j = 0; j < dv; ++j) delta[j] = (v[j] - delta[j]) * beta;
  for (int64_t j = 0; j < dv; ++j) o[j] = 0.f;
  for (int64_t i = 0; i < dk; ++i) {
    float* Si = S + i * dv;
    const float ki = k[i], qi = q[i];
    for (int64_t j = 0; j < dv; ++j) {
      Si[j] += ki * delta[j];
      o[j] += Si[j] * qi;
    }
  }
}

using DeltaStep = void (*)(float*, const float*, const float*, const float*, float, float, int64_t, int64_t,
                           float*, float*);
// One copy per instruction set, picked by the ISA the kernels use (cpu::active_isa), not by ifunc resolvers
// (target_clones), which run before ThreadSanitizer's runtime is up and crash instrumented builds.
__attribute__((target("avx512f"))) void delta_step_avx512(float* S, const float* k, const float* q,
                                                          const float* v, float beta, float decay, int64_t dk,
                                                          int64_t dv, float* delta, float* o) {
  delta_step_body(S, k, q, v, beta, decay, dk, dv, delta, o);
}
__attribute__((target("avx2"))) void delta_step_avx2(float* S, const float* k, const float* q, const float* v,
                                                     float beta, float decay, int64_t dk, int64_t dv,
                                                     float* delta, float* o) {
  delta_step_body(S, k, q, v, beta, decay, dk, dv, delta, o);
}
void delta_step_scalar(float* S, const float* k, const float* q, const float* v, float beta, float decay,
                       int64_t dk, int64_t dv, float* delta, float* o) {
  delta_step_body(S, k, q, v, beta, decay, dk, dv, delta, o);
}
DeltaStep delta_step_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
    case Isa::Avx512Bf16:
      return delta_step_avx512;
    case Isa::Avx2:
      return delta_step_avx2;
    case Isa::Scalar:
      break;
  }
  return delta_step_scalar;
}

}  // namespace

void gated_delta_net(const DeltaNet& w, const float* qkv, const float* z, const float* b, const float* a,
                     int64_t batch, int64_t seq, const int64_t* cache_row, const int32_t* const* slots,
                     const int32_t* kv_begin, float* state, float* y) {
  const int64_t C = w.channels(), K = w.kernel, keep = K - 1, rows = batch * seq;
  const int64_t key_dim = w.hk * w.dk, value_dim = w.hv * w.dv, per_row = w.state_floats();
  auto valid = [&](int64_t r, int64_t s) { return slots[r][s] >= kv_begin[r]; };
  auto first = [&](int64_t r, int64_t s) { return slots[r][s] == kv_begin[r]; };

  // 1. The causal depthwise convolution and silu, per channel (each channel's history is its own).
  std::vector<float> conv_out(static_cast<size_t>(rows * C));  // read by every worker below
  ThreadPool::instance().parallel_for(C, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < batch; ++r) {
      float* hist_base = state + cache_row[r] * per_row;
      for (int64_t c = c0; c < c1; ++c) {
        float* hist = hist_base + c * keep;  // the channel's last K - 1 inputs, oldest first
        const float* wc = w.conv + c * K;
        for (int64_t s = 0; s < seq; ++s) {
          const int64_t t = r * seq + s;
          if (!valid(r, s)) {
            conv_out[static_cast<size_t>(t * C + c)] = 0.f;
            continue;
          }
          if (first(r, s)) std::fill(hist, hist + keep, 0.f);
          const float x = qkv[t * C + c];
          float acc = 0.f;
          for (int64_t j = 0; j < keep; ++j) acc += wc[j] * hist[j];
          acc += wc[keep] * x;
          for (int64_t j = 0; j + 1 < keep; ++j) hist[j] = hist[j + 1];
          if (keep > 0) hist[keep - 1] = x;
          conv_out[static_cast<size_t>(t * C + c)] = silu(acc);
        }
      }
    }
  });

  // 2. The delta rule per value head, then the gated RMSNorm of its output.
  const DeltaStep delta_step = delta_step_for(active_isa());
  const int64_t group = w.hv / w.hk;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(w.dk));
  ThreadPool::instance().parallel_for(w.hv, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> q(static_cast<size_t>(w.dk)), k(static_cast<size_t>(w.dk)),
        delta(static_cast<size_t>(w.dv)), o(static_cast<size_t>(w.dv));
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t kh = w.tiled ? h % w.hk : h / group;
      const float decay_rate = std::exp(w.a_log[h]);
      for (int64_t r = 0; r < batch; ++r) {
        float* S = state + cache_row[r] * per_row + C * keep + h * w.dk * w.dv;  // [dk, dv]
        for (int64_t s = 0; s < seq; ++s) {
          const int64_t t = r * seq + s;
          float* out = y + t * value_dim + h * w.dv;
          if (!valid(r, s)) {
            std::fill(out, out + w.dv, 0.f);
            continue;
          }
          if (first(r, s)) std::fill(S, S + w.dk * w.dv, 0.f);
          const float* row = conv_out.data() + t * C;
          l2_normalise(row + kh * w.dk, w.dk, q_scale, q.data());
          l2_normalise(row + key_dim + kh * w.dk, w.dk, 1.0f, k.data());
          const float* v = row + 2 * key_dim + h * w.dv;
          const float beta = sigmoid(b[t * w.hv + h]);
          const float decay = std::exp(-decay_rate * softplus(a[t * w.hv + h] + w.dt_bias[h]));
          delta_step(S, k.data(), q.data(), v, beta, decay, w.dk, w.dv, delta.data(), o.data());
          // RMSNorm over the head (the plain weight), times silu(z)
          float ss = 0.f;
          for (int64_t j = 0; j < w.dv; ++j) ss += o[static_cast<size_t>(j)] * o[static_cast<size_t>(j)];
          const float inv = 1.0f / std::sqrt(ss / static_cast<float>(w.dv) + w.eps);
          const float* zt = z + t * value_dim + h * w.dv;
          for (int64_t j = 0; j < w.dv; ++j)
            out[j] = w.norm[j] * (o[static_cast<size_t>(j)] * inv) * silu(zt[j]);
        }
      }
    }
  });
}

}  // namespace tessera::cpu
