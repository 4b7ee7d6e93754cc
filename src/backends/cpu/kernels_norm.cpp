// rms_norm, in the order Hugging Face computes it in f32: variance = mean(x^2);
// y = (x * (1 / sqrt(variance + eps))) * weight.
#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_simd.h"
#include "backends/cpu/thread_pool.h"
#include "tessera/error.h"

namespace tessera::cpu {

void rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y) {
  TS_ASSERT(rows >= 0 && dim > 0, "rms_norm rows=", rows, " dim=", dim);
  const VecOps& ops = vec_ops();
  const int64_t grain = std::max<int64_t>(1, 16384 / dim);  // rows per thread worth a fork-join
  ThreadPool::instance().parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;  // [dim]
      float* yr = y + r * dim;        // [dim]
      const float mean = ops.sumsq(xr, dim) / static_cast<float>(dim);
      const float inv = 1.0f / std::sqrt(mean + eps);
      if (weight) {
        ops.scale_mul(xr, inv, weight, yr, dim);
      } else {
        for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv;
      }
    }
  });
}

void scale_rows(const float* x, int64_t rows, int64_t cols, const float* w, int64_t w_len, float scale,
                float* y) {
  TS_ASSERT(w == nullptr || w_len == 1 || w_len == cols, "scale_rows: weight of ", w_len, " for ", cols,
            " columns");
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    for (int64_t i = 0; i < cols; ++i) {
      float v = xr[i];
      if (w) v = v * w[w_len == 1 ? 0 : i];
      if (scale != 1.0f) v = v * scale;
      yr[i] = v;
    }
  }
}

}  // namespace tessera::cpu
