// Mixture-of-experts kernels: the router's top-k (moe_route) and the experts of a sparse MLP block
// (moe_experts). The experts reuse the matmul kernels: each expert's rows are gathered and multiplied by its
// gate and up rows in one call (one fork-join; every matmul dtype, quantised included, in its decode or
// prefill form), the gated activation, its down rows; then every row sums its experts' outputs, weighted, in
// ascending expert order (Transformers' index_add_ order), so a row's result does not depend on the others.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/kernels.h"
#include "tessera/error.h"

namespace tessera::cpu {

void moe_route(const float* logits, int64_t rows, int64_t experts, int64_t top_k, MoeRouting routing,
               float* route) {
  TS_ASSERT(top_k >= 1 && top_k <= experts, "moe_route: top ", top_k, " of ", experts);
  std::vector<float> p(static_cast<size_t>(experts));
  std::vector<int64_t> pick(static_cast<size_t>(top_k));
  std::vector<float> val(static_cast<size_t>(top_k));
  std::vector<uint8_t> taken(static_cast<size_t>(experts));  // per row: the experts already picked
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = logits + r * experts;
    float* w = route + r * experts;
    if (routing == MoeRouting::TopKSoftmax) {
      std::copy(l, l + experts, p.begin());
    } else {  // softmax over every expert, in f32, max-subtracted
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t e = 0; e < experts; ++e) m = std::max(m, l[e]);
      float sum = 0.f;
      for (int64_t e = 0; e < experts; ++e) sum += p[static_cast<size_t>(e)] = std::exp(l[e] - m);
      for (int64_t e = 0; e < experts; ++e) p[static_cast<size_t>(e)] /= sum;
    }
    // The top_k, largest first; a tie goes to the lower index (a NaN is never picked over a number).
    std::fill(taken.begin(), taken.end(), 0);
    for (int64_t k = 0; k < top_k; ++k) {
      int64_t best = -1;
      for (int64_t e = 0; e < experts; ++e)
        if (!taken[static_cast<size_t>(e)] &&
            (best < 0 || p[static_cast<size_t>(e)] > p[static_cast<size_t>(best)] ||
             (std::isnan(p[static_cast<size_t>(best)]) && !std::isnan(p[static_cast<size_t>(e)]))))
          best = e;
      taken[static_cast<size_t>(best)] = 1;
      pick[static_cast<size_t>(k)] = best;
      val[static_cast<size_t>(k)] = p[static_cast<size_t>(best)];
    }
    if (routing == MoeRouting::SoftmaxTopKNorm) {
      float sum = 0.f;
      for (float v : val) sum += v;
      for (float& v : val) v /= sum;
    } else if (routing == MoeRouting::TopKSoftmax) {
      const float m = val[0];
      float sum = 0.f;
      for (float& v : val) sum += v = std::exp(v - m);
      for (float& v : val) v /= sum;
    }
    std::fill(w, w + experts, 0.f);
    for (int64_t k = 0; k < top_k; ++k) w[pick[static_cast<size_t>(k)]] = val[static_cast<size_t>(k)];
  }
}

void moe_experts(const float* x, int64_t rows, const float* route, const MoeWeights& w, GateAct act,
                 bool row_invariant, Bf16Dot bf16, float* y) {
  const int64_t E = w.experts, H = w.hidden, I = w.inter;
  // Each expert's rows, experts ascending: rows_of[begin[e], begin[e + 1]).
  std::vector<int64_t> begin(static_cast<size_t>(E + 1), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < E; ++e)
      if (route[r * E + e] != 0.f) ++begin[static_cast<size_t>(e + 1)];
  for (int64_t e = 0; e < E; ++e) begin[static_cast<size_t>(e + 1)] += begin[static_cast<size_t>(e)];
  const int64_t picks = begin[static_cast<size_t>(E)];
  std::vector<int64_t> rows_of(static_cast<size_t>(picks)), fill(begin.begin(), begin.end() - 1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < E; ++e)
      if (route[r * E + e] != 0.f) rows_of[static_cast<size_t>(fill[static_cast<size_t>(e)]++)] = r;

  thread_local std::vector<float> xs, gate, up, out;
  out.resize(static_cast<size_t>(picks * H));
  const size_t gu_bytes = dtype_bytes(w.gate_up_dtype, H) * static_cast<size_t>(I),  // I rows of gate_up
      down_bytes = dtype_bytes(w.down_dtype, I) * static_cast<size_t>(H);            // one expert's down
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = begin[static_cast<size_t>(e)], n = begin[static_cast<size_t>(e + 1)] - b;
    if (n == 0) continue;  // no token chose this expert: its weights are not read
    const float* xe = x;
    if (n != rows) {  // gather the expert's rows (all rows in order: x itself)
      xs.resize(static_cast<size_t>(n * H));
      for (int64_t j = 0; j < n; ++j)
        std::memcpy(xs.data() + j * H, x + rows_of[static_cast<size_t>(b + j)] * H,
                    static_cast<size_t>(H) * 4);
      xe = xs.data();
    }
    gate.resize(static_cast<size_t>(n * I));
    up.resize(static_cast<size_t>(n * I));
    const auto* gu = static_cast<const uint8_t*>(w.gate_up) + static_cast<size_t>(2 * e) * gu_bytes;
    const float* gub = w.gate_up_bias ? w.gate_up_bias + e * 2 * I : nullptr;
    const MatmulOut gate_up[2] = {{gu, I, gub, gate.data()},
                                  {gu + gu_bytes, I, gub ? gub + I : nullptr, up.data()}};
    if (row_invariant) {
      matmul_rows(xe, n, H, w.gate_up_dtype, gate_up, 2, bf16);
    } else {
      matmul_multi(xe, n, H, w.gate_up_dtype, gate_up, 2, bf16);
    }
    if (w.clamped_swiglu) {  // gpt-oss: Transformers' GptOssExperts._apply_gate, op for op in f32
      for (int64_t i = 0; i < n * I; ++i) {
        const float g = std::min(gate[static_cast<size_t>(i)], w.limit);
        const float u = std::clamp(up[static_cast<size_t>(i)], -w.limit, w.limit);
        const float glu = g * (1.0f / (1.0f + std::exp(-(g * w.alpha))));
        gate[static_cast<size_t>(i)] = (u + 1.0f) * glu;
      }
    } else {
      gated_act(act, gate.data(), up.data(), n * I, gate.data());
    }
    const void* dn = static_cast<const uint8_t*>(w.down) + static_cast<size_t>(e) * down_bytes;
    const MatmulOut down{dn, H, w.down_bias ? w.down_bias + e * H : nullptr, out.data() + b * H};
    if (row_invariant) {
      matmul_rows(gate.data(), n, I, w.down_dtype, &down, 1, bf16);
    } else {
      matmul(gate.data(), n, I, dn, w.down_dtype, H, down.bias, down.y, bf16);
    }
  }
  // Each row: the sum of its experts' weighted outputs, in ascending expert order (zeros first, as
  // Transformers' index_add_ into zeros).
  std::fill(y, y + rows * H, 0.f);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t j = begin[static_cast<size_t>(e)]; j < begin[static_cast<size_t>(e + 1)]; ++j) {
      const int64_t r = rows_of[static_cast<size_t>(j)];
      const float wt = route[r * E + e];
      const float* o = out.data() + j * H;
      float* yr = y + r * H;
      for (int64_t i = 0; i < H; ++i) {
        const float v = o[i] * wt;
        yr[i] += v;
      }
    }
}

}  // namespace tessera::cpu
