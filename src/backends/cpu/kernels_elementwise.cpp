// Elementwise kernels (gated activations, add, soft-capping), row softmax and argmax.
#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_simd.h"
#include "backends/cpu/thread_pool.h"
#include "tessera/error.h"

namespace tessera::cpu {
namespace {

// Chunks of elementwise work: big enough to amortise a fork-join, multiples of 64 to keep vectors whole.
constexpr int64_t kElementGrain = 32 * 1024;

template <typename Fn>
void for_chunks(int64_t n, const Fn& fn) {
  ThreadPool::instance().parallel_for((n + 63) / 64, kElementGrain / 64, [&](int64_t b0, int64_t b1) {
    const int64_t i0 = b0 * 64, i1 = std::min(n, b1 * 64);
    fn(i0, i1 - i0);
  });
}

}  // namespace

void swiglu(const float* gate, const float* up, int64_t n, float* y) {
  const VecOps& ops = vec_ops();
  for_chunks(n, [&](int64_t i, int64_t len) { ops.swiglu(gate + i, up + i, len, y + i); });
}

void gated_act(GateAct act, const float* gate, const float* up, int64_t n, float* y) {
  const VecOps& ops = vec_ops();
  auto fn = ops.swiglu;
  switch (act) {
    case GateAct::Silu:
      break;
    case GateAct::Gelu:
      fn = ops.gelu_mul;
      break;
    case GateAct::GeluTanh:
      fn = ops.gelu_tanh_mul;
      break;
    case GateAct::Relu:
      fn = ops.relu_mul;
      break;
    case GateAct::Sigmoid:
      for_chunks(n, [&](int64_t i, int64_t len) {
        for (int64_t j = i; j < i + len; ++j) y[j] = up[j] * (1.0f / (1.0f + std::exp(-gate[j])));
      });
      return;
  }
  for_chunks(n, [&](int64_t i, int64_t len) { fn(gate + i, up + i, len, y + i); });
}

void row_gated_act(GateAct act, const float* gate, const float* up, int64_t rows, int64_t cols, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float one = 1.0f;
    float a = 0.0f;
    gated_act(act, gate + r, &one, 1, &a);  // act(gate) times exactly 1
    const float* u = up + r * cols;
    float* out = y + r * cols;
    for (int64_t j = 0; j < cols; ++j) out[j] = a * u[j];
  }
}

void add(const float* a, const float* b, int64_t n, float* y) {
  const VecOps& ops = vec_ops();
  for_chunks(n, [&](int64_t i, int64_t len) { ops.add(a + i, b + i, len, y + i); });
}

void softcap(const float* x, int64_t n, float cap, float* y) {
  for_chunks(n, [&](int64_t i, int64_t len) {
    for (int64_t j = i; j < i + len; ++j) y[j] = std::tanh(x[j] / cap) * cap;
  });
}

void softmax(float* x, int64_t rows, int64_t n) {
  if (n <= 0) return;
  const VecOps& ops = vec_ops();
  ThreadPool::instance().parallel_for(rows, std::max<int64_t>(1, kElementGrain / n),
                                      [&](int64_t r0, int64_t r1) {
                                        for (int64_t r = r0; r < r1; ++r) {
                                          float* xr = x + r * n;  // [n]
                                          const float mx = *std::max_element(xr, xr + n);
                                          ops.scale(1.0f / ops.exp_sum(xr, n, mx), xr, n);
                                        }
                                      });
}

int64_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  float bv = -INFINITY;
  bool found = false;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] > bv || (!found && x[i] == bv)) {  // strict '>' keeps the first of equal values
      bv = x[i];
      best = i;
      found = true;
    }
  }
  return best;
}

}  // namespace tessera::cpu
