// Rotary position embedding, HF "rotate_half" convention: for i < half = rot_dim / 2,
//   out[i]        = x[i] * cos - x[i + half] * sin
//   out[i + half] = x[i + half] * cos + x[i] * sin,   angle = pos * inv_freq[i] (f32).
// Products and sums are rounded separately (no fused multiply-add), as PyTorch's eager kernels do.
#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_simd.h"
#include "backends/cpu/thread_pool.h"
#include "tessera/error.h"

namespace tessera::cpu {
namespace {

// cs [2 * half]: cos then sin of pos * inv_freq[i], each times `scale` (yarn's attention factor; 1 is exact).
void rope_angles(int32_t pos, const float* inv_freq, int64_t half, float scale, float* cs) {
  for (int64_t i = 0; i < half; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];
    cs[i] = std::cos(angle) * scale;
    cs[half + i] = std::sin(angle) * scale;
  }
}

// Rotates one head xh [rot_dim] (the rest of the head is left alone).
void rope_head(float* xh, const float* cs, int64_t half) {
  const float* c = cs;
  const float* s = cs + half;
  for (int64_t i = 0; i < half; ++i) {
    const float a = xh[i], b = xh[i + half];
    const float ac = a * c[i], bs = b * s[i], bc = b * c[i], as = a * s[i];
    xh[i] = ac - bs;
    xh[i + half] = bc + as;
  }
}

}  // namespace

void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rot_dim,
          const int32_t* positions, const float* inv_freq, float scale, int64_t row_tokens) {
  TS_ASSERT(rot_dim >= 0 && rot_dim <= head_dim && rot_dim % 2 == 0, "rope rot_dim=", rot_dim,
            " head_dim=", head_dim);
  const int64_t half = rot_dim / 2;
  if (half == 0 || tokens <= 0) return;
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, heads * rot_dim));
  ThreadPool::instance().parallel_for(tokens, grain, [&](int64_t t0, int64_t t1) {
    float* cs = scratch(2, 2 * half);  // [2, half]
    for (int64_t t = t0; t < t1; ++t) {
      rope_angles(positions[t], row_tokens > 0 ? inv_freq + t / row_tokens * half : inv_freq, half, scale,
                  cs);
      for (int64_t h = 0; h < heads; ++h) rope_head(x + (t * heads + h) * head_dim, cs, half);
    }
  });
}

}  // namespace tessera::cpu
