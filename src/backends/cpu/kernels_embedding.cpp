// Embedding lookup: rows of a [vocab, dim] table (f32/bf16/f16, or block-quantised: dequantised) gathered and
// converted to f32.
#include "backends/cpu/kernels.h"
#include "backends/cpu/thread_pool.h"
#include "tessera/error.h"

namespace tessera::cpu {

void embedding(const int32_t* ids, int64_t n, const void* table, DType dt, int64_t vocab, int64_t dim,
               float* y, float scale) {
  TS_ASSERT(dt == DType::F32 || dt == DType::BF16 || dt == DType::F16 || is_quantized(dt), "embedding dtype ",
            dtype_name(dt));
  const size_t row_bytes = dtype_bytes(dt, dim);
  for (int64_t i = 0; i < n; ++i) {
    TS_ASSERT(ids[i] >= 0 && ids[i] < vocab, "embedding id ", ids[i], " outside [0, ", vocab, ")");
  }
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, dim));
  ThreadPool::instance().parallel_for(n, grain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      if (is_quantized(dt)) {
        dequantize_row_at(dt, table, dim, ids[i], y + i * dim);
      } else {
        const auto* row = static_cast<const uint8_t*>(table) + static_cast<size_t>(ids[i]) * row_bytes;
        convert(row, dt, y + i * dim, DType::F32, dim);  // [dim]
      }
      if (scale != 1.0f)
        for (int64_t d = 0; d < dim; ++d) y[i * dim + d] *= scale;
    }
  });
}

}  // namespace tessera::cpu
