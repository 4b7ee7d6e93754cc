// Mixture-of-experts kernels (moe_route, moe_experts; kernels_moe.cpp) against double-precision references,
// for every instruction set this CPU supports x every integer dot product at that level (as in
// test_cpu_kernels_quant.cpp) x 1 and 2 threads, with odd expert counts and shapes.
//
// moe_route: the experts chosen are exactly those a double reference picks from the logits (largest first,
// ties to the lower index); unchosen weights are +0 bit for bit; chosen weights are within
// 3e-6 + 1.2e-7 |l_e - max l| relative of the double softmax (expf is good to ~1 ulp, the f32 difference
// l_e - max l rounds by 2^-24 |l_e - max l|, which exp turns into that relative error, and a sum of at most
// 13 terms, a division and, for SoftmaxTopKNorm, a second sum and division add ~1.5e-6 at worst); the
// normalising routings' rows sum to 1 within 2.4e-7 (k + 1) (k divisions and the k-term sum, 6e-8 each).
//
// moe_experts: the reference is computed in double from the weights' exact values (float dtypes widened;
// blocks decoded by the GGUF reader's dequantisers, written apart from the kernels) and carries a bound on
// the kernel's error through the block, so the tolerance is tight (~1e-6 relative) yet needs no knowledge of
// the kernels' summation orders:
//  * a matmul input as the kernel multiplies it: x as it is, or rounded as the matmul rounds it
//    (Bf16Dot::RoundX: to int8 per block of 32, scale = max|x| / 127, for block-quantised weights on every
//    level; to bf16 for bf16 weights where matmul_rounds_bf16()), replicated exactly for x. The down
//    projection's input comes from the kernel within a bound of the reference's value; it is rounded as the
//    reference's value, plus what rounding any value within the bound can change: one step where a rounding
//    boundary lies inside the bound, and for int8 the block's scale moving with the block's largest value.
//  * a matmul output: sum_k |w_k| eta_k (the inputs' bounds) + the matmul tests' accumulation bounds,
//    1e-6 sqrt(K) rss for f32 x (test_cpu_kernels.cpp; bf16-rounded x likewise), 3e-6 l1 for int8 x
//    (test_cpu_kernels_quant.cpp), + 1.2e-7 |ref|.
//  * act(gate) * up: 1.13 (the largest |act'|: SiLU 1.10, GELU and tanh-GELU 1.13, ReLU 1) x the gate's
//    bound x (|up| + up's bound) + |act(gate)| x up's bound, + the gated-activation test's relative bound
//    (2e-6, + 2e-7 x^2 for GELU, + 2e-7 (|x| + 0.1 |x|^3) for tanh-GELU).
//  * the f32 weighted sum over a row's k experts: + 1.2e-7 k sum_e |route_e y_e| (k products, k sums).
// Measured on an avx512bf16 + AMX Xeon (every level, every int8 dot, 1 and 2 threads), the largest
// |error| / tolerance: moe_experts 0.022 with f32 x (the matmul bound dominates), 0.026 with int8 x (a
// rounding step of the down projection's input inside its bound; 0.002 elsewhere), 0.018 with bf16 x;
// moe_route 0.085 (weights), 0.093 (sums).
//
// Experts that no row chooses have their weights and biases set to NaN in every moe_experts call (their
// outputs never reach y); a death test puts them behind PROT_NONE pages (never read at all).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/thread_pool.h"
#include "cpu_targets_util.h"
#include "io/gguf_quants.h"
#include "quant_blocks_util.h"
#include "tessera/tensor.h"

namespace tessera::cpu {
namespace {

// ------------------------------------------------------------------ targets

class CpuMoeKernels : public kernel_targets::OnEachInt8Target {};

// ------------------------------------------------------------------ inputs

std::vector<float> random_vec(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// A matrix [rows, K] in dt: its bytes and its exact values.
struct Mat {
  std::vector<uint8_t> raw;
  std::vector<float> val;
};

Mat make_mat(DType dt, int64_t rows, int64_t K, uint32_t seed) {
  Mat m;
  if (!is_quantized(dt)) {  // uniform in [-1, 1], rounded to dt
    const std::vector<float> v = random_vec(rows * K, seed);
    m.raw.resize(static_cast<size_t>(rows * K) * dtype_size(dt));
    convert(v.data(), DType::F32, m.raw.data(), dt, rows * K);
    m.val.resize(v.size());
    convert(m.raw.data(), dt, m.val.data(), DType::F32, rows * K);
    return m;
  }
  tessera::test_blocks::RandomBlocks b =
      tessera::test_blocks::random_blocks(dt, rows, K, seed);  // tests/quant_blocks_util.h
  m.raw = std::move(b.raw);
  m.val = std::move(b.value);
  return m;
}

// The weights of a sparse MLP block: E experts, hidden H, intermediate I.
struct MoeSet {
  DType gu_dt, dn_dt;
  int64_t E, H, I;
  Mat gu, dn;                           // [E * 2I, H] (expert e: gate rows, then up rows), [E * H, I]
  std::vector<float> gu_bias, dn_bias;  // [E * 2I], [E * H]
  float x_scale;                        // x uniform in [-x_scale, x_scale] gives gate values of rms ~1.2
};

bool kquant(DType dt) { return is_quantized(dt) && dtype_block(dt) == 256; }

// Odd shapes for the float dtypes (K tails of every vector width), whole blocks for the quantised ones.
MoeSet make_set(DType gu_dt, DType dn_dt, int64_t E, uint32_t seed) {
  MoeSet s{gu_dt, dn_dt, E, 67, 45, {}, {}, {}, {}, 1.0f};
  if (kquant(gu_dt) || kquant(dn_dt)) {
    s.H = s.I = 256;
  } else if (is_quantized(gu_dt) || is_quantized(dn_dt)) {
    s.H = 96;
    s.I = 64;
  }
  s.gu = make_mat(gu_dt, E * 2 * s.I, s.H, seed);
  s.dn = make_mat(dn_dt, E * s.H, s.I, seed + 1);
  s.gu_bias = random_vec(E * 2 * s.I, seed + 2, -0.5f, 0.5f);
  s.dn_bias = random_vec(E * s.H, seed + 3, -0.5f, 0.5f);
  double ss = 0.0;
  for (float v : s.gu.val) ss += static_cast<double>(v) * v;
  const double rms = std::sqrt(ss / static_cast<double>(s.gu.val.size()));
  s.x_scale = static_cast<float>(2.0 / (rms * std::sqrt(static_cast<double>(s.H))));
  return s;
}

// Logits [rows, E] uniform in [-2, 2]; expert `cold` far below (chosen by no row while top_k < E), expert
// `fav` (or none: -1) far above (chosen by every row).
std::vector<float> make_logits(int64_t rows, int64_t E, int64_t cold, int64_t fav, uint32_t seed) {
  std::vector<float> l = random_vec(rows * E, seed, -2.0f, 2.0f);
  for (int64_t r = 0; r < rows; ++r) {
    if (cold >= 0) l[static_cast<size_t>(r * E + cold)] = -30.0f;
    if (fav >= 0) l[static_cast<size_t>(r * E + fav)] += 6.0f;
  }
  return l;
}

std::vector<float> route_of(const std::vector<float>& logits, int64_t rows, int64_t E, int64_t top_k,
                            MoeRouting routing) {
  std::vector<float> route(static_cast<size_t>(rows * E), NAN);
  moe_route(logits.data(), rows, E, top_k, routing, route.data());
  return route;
}

bool chosen_by_any(const float* route, int64_t rows, int64_t E, int64_t e) {
  for (int64_t r = 0; r < rows; ++r)
    if (route[r * E + e] != 0.0f) return true;
  return false;
}

// NaN in every element of dt: f32 / bf16 / f16 quiet NaNs; for the block formats every byte 0xFF, which
// makes every f16 scale NaN (so every value of the block).
void fill_nan(DType dt, uint8_t* p, size_t bytes) {
  if (dt == DType::F32) {
    const float n = NAN;
    for (size_t i = 0; i + 4 <= bytes; i += 4) std::memcpy(p + i, &n, 4);
  } else if (dt == DType::BF16 || dt == DType::F16) {
    const uint16_t n = dt == DType::BF16 ? 0x7fc0 : 0x7e00;
    for (size_t i = 0; i + 2 <= bytes; i += 2) std::memcpy(p + i, &n, 2);
  } else {
    std::memset(p, 0xFF, bytes);
  }
}

// The bytes moe_experts reads the weights from (the set's own, or another form of them, e.g. _R8).
struct WeightBytes {
  DType gu_dt, dn_dt;
  const std::vector<uint8_t>* gu;
  const std::vector<uint8_t>* dn;
};

// moe_experts on a copy of the weights in which every expert no row chose is NaN (weights and biases); y
// starts as NaN.
std::vector<float> run_experts(const MoeSet& s, const float* x, int64_t rows, const float* route, GateAct act,
                               bool bias, bool row_invariant, Bf16Dot dot, const WeightBytes* as = nullptr) {
  const WeightBytes own{s.gu_dt, s.dn_dt, &s.gu.raw, &s.dn.raw};
  const WeightBytes& wb = as ? *as : own;
  std::vector<uint8_t> gu = *wb.gu, dn = *wb.dn;
  std::vector<float> gub = s.gu_bias, dnb = s.dn_bias;
  const size_t gu_bytes = dtype_bytes(wb.gu_dt, s.H) * static_cast<size_t>(2 * s.I),
               dn_bytes = dtype_bytes(wb.dn_dt, s.I) * static_cast<size_t>(s.H);
  for (int64_t e = 0; e < s.E; ++e) {
    if (chosen_by_any(route, rows, s.E, e)) continue;
    fill_nan(wb.gu_dt, gu.data() + e * gu_bytes, gu_bytes);
    fill_nan(wb.dn_dt, dn.data() + e * dn_bytes, dn_bytes);
    std::fill(gub.begin() + e * 2 * s.I, gub.begin() + (e + 1) * 2 * s.I, NAN);
    std::fill(dnb.begin() + e * s.H, dnb.begin() + (e + 1) * s.H, NAN);
  }
  const MoeWeights w{
      gu.data(), dn.data(), wb.gu_dt, wb.dn_dt, bias ? gub.data() : nullptr, bias ? dnb.data() : nullptr,
      s.E,       s.H,       s.I};
  std::vector<float> y(static_cast<size_t>(rows * s.H), NAN);
  moe_experts(x, rows, route, w, act, row_invariant, dot, y.data());
  return y;
}

// ------------------------------------------------------------------ the double reference with its bound

const char* act_name(GateAct a) {
  switch (a) {
    case GateAct::Silu:
      return "silu";
    case GateAct::Gelu:
      return "gelu";
    case GateAct::GeluTanh:
      return "gelu_tanh";
    case GateAct::Relu:
      return "relu";
    case GateAct::Sigmoid:
      return "sigmoid";
  }
  return "?";
}

double act_ref(GateAct a, double x) {
  switch (a) {
    case GateAct::Silu:
      return x / (1.0 + std::exp(-x));
    case GateAct::Gelu:
      return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    case GateAct::GeluTanh:
      return x / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case GateAct::Relu:
      return x > 0 ? x : 0.0;
    case GateAct::Sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
  }
  return NAN;
}

// The gated-activation test's relative bound (test_cpu_kernels.cpp).
double act_rel_tol(GateAct a, double x) {
  const double ax = std::abs(x);
  if (a == GateAct::Gelu) return 2e-6 + 2e-7 * ax * ax;
  if (a == GateAct::GeluTanh) return 2e-6 + 2e-7 * (ax + 0.1 * ax * ax * ax);
  return 2e-6;
}

constexpr double kActLipschitz = 1.13;

// How a matmul rounds its input x before the products.
enum class XRound { None, Bf16, Int8 };

XRound x_round(DType wdt, Bf16Dot dot) {
  if (dot != Bf16Dot::RoundX) return XRound::None;
  if (is_quantized(wdt)) return XRound::Int8;
  if (wdt == DType::BF16 && matmul_rounds_bf16()) return XRound::Bf16;
  return XRound::None;
}

float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// A matmul input: v (the reference's values, double) that the kernel holds in f32 within err of v. Returns in
// `in` v as the matmul multiplies it (f32; rounded as the kernels round x: bf16, or int8 per block of 32 as
// kernels_quant.cpp: scale = max|x| / 127, q = round-half-even(x / scale)), and in `eta` a bound on how far
// the kernel's multiplied input can be from `in` (0 where err is 0: then `in` is the kernel's, exactly).
void matmul_input(const std::vector<double>& v, const std::vector<double>& err, XRound r,
                  std::vector<double>& in, std::vector<double>& eta) {
  const size_t K = v.size();
  std::vector<float> f(K);
  std::vector<double> d(K);
  for (size_t k = 0; k < K; ++k) {
    f[k] = static_cast<float>(v[k]);
    d[k] = err[k] == 0.0 && f[k] == v[k] ? 0.0 : err[k] + std::abs(v[k] - f[k]);
  }
  in.assign(K, 0.0);
  eta.assign(K, 0.0);
  if (r == XRound::None) {
    for (size_t k = 0; k < K; ++k) {
      in[k] = f[k];
      eta[k] = d[k];
    }
  } else if (r == XRound::Bf16) {  // rounding is monotone: the kernel's value lies between these two
    for (size_t k = 0; k < K; ++k) {
      in[k] = round_bf16(f[k]);
      if (d[k] > 0.0)
        eta[k] = static_cast<double>(round_bf16(static_cast<float>(f[k] + d[k]))) -
                 round_bf16(static_cast<float>(f[k] - d[k]));
    }
  } else {
    for (size_t b = 0; b < K; b += 32) {
      float amax = 0.0f;
      double delta = 0.0;  // the block's largest bound: the kernel's max|x| is within it of amax
      for (size_t j = b; j < b + 32; ++j) {
        amax = std::max(amax, std::fabs(f[j]));
        delta = std::max(delta, d[j]);
      }
      const float scale = amax / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
      for (size_t j = b; j < b + 32; ++j) {
        const float yq = f[j] * inv, q = std::clamp(std::nearbyint(yq), -127.0f, 127.0f);
        in[j] = static_cast<double>(scale) * q;
        if (delta == 0.0) continue;
        const double s_lo = scale - delta / 127.0;  // the kernel's scale is at least this
        if (s_lo <= 0.5 * scale) {                  // the scale itself is anyone's guess: any value this big
          eta[j] = 2.0 * amax + delta;
          continue;
        }
        // The kernel's x / scale is within t of yq (|x| <= 127 scale); q moves by whole steps of the scale
        // where a rounding boundary lies inside; scale * q moves by at most delta with the scale (|q| <=
        // 127), plus the f32 roundings of the scale and x / scale.
        const double t = (d[j] + delta) / s_lo + 3e-5;
        const double qlo = std::clamp(std::nearbyint(yq - t), -127.0, 127.0),
                     qhi = std::clamp(std::nearbyint(yq + t), -127.0, 127.0);
        const double steps = std::max(qhi - q, q - qlo);
        eta[j] = delta + 2e-5 * scale + steps * scale * (1.0 + 1e-6);
      }
    }
  }
}

struct Bound {
  double v, err;
};

// sum_k w_k in_k + bias, and a bound on the kernel's error: its inputs within eta of `in`, its f32
// accumulation as the matmul tests bound it.
Bound matmul_bound(const float* w, const std::vector<double>& in, const std::vector<double>& eta, double bias,
                   XRound r) {
  const size_t K = in.size();
  double ref = bias, l1 = 0.0, rss = bias * bias, prop = 0.0;
  for (size_t k = 0; k < K; ++k) {
    const double p = static_cast<double>(w[k]) * in[k];
    ref += p;
    l1 += std::abs(p);
    rss += p * p;
    prop += std::abs(static_cast<double>(w[k])) * eta[k];
  }
  const double acc = r == XRound::Int8 ? 3e-6 * (l1 + prop)
                                       : 1e-6 * std::sqrt(static_cast<double>(K)) * (std::sqrt(rss) + prop);
  return {ref, prop + acc + 1.2e-7 * (std::abs(ref) + prop)};
}

// y [rows, H] and its tolerance.
struct Ref {
  std::vector<double> y, tol;
};

Ref moe_reference(const MoeSet& s, const float* x, int64_t rows, const float* route, GateAct act, bool bias,
                  Bf16Dot dot) {
  const int64_t E = s.E, H = s.H, I = s.I;
  const XRound rg = x_round(s.gu_dt, dot), rd = x_round(s.dn_dt, dot);
  Ref out{std::vector<double>(static_cast<size_t>(rows * H), 0.0),
          std::vector<double>(static_cast<size_t>(rows * H), 1e-30)};
  std::vector<double> xv(static_cast<size_t>(H)), zero(static_cast<size_t>(H), 0.0), xin, xeta;
  std::vector<double> h(static_cast<size_t>(I)), herr(static_cast<size_t>(I)), hin, heta;
  std::vector<double> sum_abs(static_cast<size_t>(H));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < H; ++k) xv[static_cast<size_t>(k)] = x[r * H + k];
    matmul_input(xv, zero, rg, xin, xeta);
    std::fill(sum_abs.begin(), sum_abs.end(), 0.0);
    int64_t picked = 0;
    for (int64_t e = 0; e < E; ++e) {
      const double w = route[r * E + e];
      if (w == 0.0) continue;
      ++picked;
      for (int64_t i = 0; i < I; ++i) {
        const float* gate_row = s.gu.val.data() + (e * 2 * I + i) * H;
        const float* up_row = gate_row + I * H;
        const double gb = bias ? s.gu_bias[static_cast<size_t>(e * 2 * I + i)] : 0.0,
                     ub = bias ? s.gu_bias[static_cast<size_t>(e * 2 * I + I + i)] : 0.0;
        const Bound g = matmul_bound(gate_row, xin, xeta, gb, rg),
                    u = matmul_bound(up_row, xin, xeta, ub, rg);
        const double a = act_ref(act, g.v), hv = a * u.v;
        const double prop = kActLipschitz * g.err * (std::abs(u.v) + u.err) + std::abs(a) * u.err;
        h[static_cast<size_t>(i)] = hv;
        herr[static_cast<size_t>(i)] = prop + act_rel_tol(act, std::abs(g.v) + g.err) * (std::abs(hv) + prop);
      }
      matmul_input(h, herr, rd, hin, heta);
      for (int64_t j = 0; j < H; ++j) {
        const Bound d = matmul_bound(s.dn.val.data() + (e * H + j) * I, hin, heta,
                                     bias ? s.dn_bias[static_cast<size_t>(e * H + j)] : 0.0, rd);
        out.y[static_cast<size_t>(r * H + j)] += w * d.v;
        out.tol[static_cast<size_t>(r * H + j)] += std::abs(w) * d.err;
        sum_abs[static_cast<size_t>(j)] += std::abs(w) * (std::abs(d.v) + d.err);
      }
    }
    for (int64_t j = 0; j < H; ++j)
      out.tol[static_cast<size_t>(r * H + j)] += 1.2e-7 * static_cast<double>(picked) * sum_abs[j];
  }
  return out;
}

// y within `slack` times the tolerance of the reference, element by element.
::testing::AssertionResult near_ref(const std::vector<float>& y, const Ref& ref, int64_t H,
                                    double slack = 1.0) {
  if (y.size() != ref.y.size()) return ::testing::AssertionFailure() << "size " << y.size();
  for (size_t i = 0; i < y.size(); ++i) {
    const double err = std::abs(static_cast<double>(y[i]) - ref.y[i]);
    if (!(err <= slack * ref.tol[i]))
      return ::testing::AssertionFailure()
             << "at [" << i / static_cast<size_t>(H) << ", " << i % H << "]: " << y[i] << " against "
             << ref.y[i] << " (error " << err << ", tolerance " << slack * ref.tol[i] << ")";
  }
  return ::testing::AssertionSuccess();
}

// Row r of a against row rb of b, bit for bit.
::testing::AssertionResult same_row_bits(const float* a, const float* b, int64_t H) {
  if (std::memcmp(a, b, static_cast<size_t>(H) * sizeof(float)) == 0) return ::testing::AssertionSuccess();
  for (int64_t j = 0; j < H; ++j)
    if (std::memcmp(a + j, b + j, sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "column " << j << ": " << a[j] << " against " << b[j];
  return ::testing::AssertionFailure();
}

std::string dot_name(Bf16Dot d) { return d == Bf16Dot::RoundX ? "RoundX" : "Exact"; }

std::string routing_name(MoeRouting r) {
  switch (r) {
    case MoeRouting::SoftmaxTopK:
      return "SoftmaxTopK";
    case MoeRouting::SoftmaxTopKNorm:
      return "SoftmaxTopKNorm";
    case MoeRouting::TopKSoftmax:
      return "TopKSoftmax";
  }
  return "?";
}

// ------------------------------------------------------------------ moe_experts

// The weight dtypes (gate_up, down): the float ones, and the block formats alone and as the mixes of
// llama.cpp's _M files, and gpt-oss's MXFP4.
constexpr std::pair<DType, DType> kPairs[] = {
    {DType::F32, DType::F32},   {DType::BF16, DType::BF16},  {DType::F16, DType::F16},
    {DType::Q8_0, DType::Q8_0}, {DType::Q4_0, DType::Q4_0},  {DType::Q4_1, DType::Q5_0},
    {DType::Q4_K, DType::Q4_K}, {DType::Q6_K, DType::Q6_K},  {DType::Q4_K, DType::Q6_K},
    {DType::Q5_K, DType::Q5_1}, {DType::MXFP4, DType::MXFP4}};
constexpr int kNumPairs = static_cast<int>(std::size(kPairs));

// The weights of one pair and expert count, made once for every target.
const MoeSet& moe_set(int pair, int64_t E) {
  static std::map<std::pair<int, int64_t>, MoeSet> sets;
  auto it = sets.find({pair, E});
  if (it == sets.end())
    it = sets.emplace(std::make_pair(pair, E),
                      make_set(kPairs[pair].first, kPairs[pair].second, E, 1000u + 17u * pair + E))
             .first;
  return it->second;
}

// A reference made once per input (named by `key`) and rounding of the matmuls (the bf16 one depends on the
// level), for every target.
const Ref& cached_ref(const std::string& key, const std::function<Ref()>& make) {
  static std::map<std::pair<std::string, bool>, Ref> refs;
  auto it = refs.find({key, matmul_rounds_bf16()});
  if (it == refs.end()) it = refs.emplace(std::make_pair(key, matmul_rounds_bf16()), make()).first;
  return it->second;
}

struct MainCase {
  int pair;
  Bf16Dot dot;
  int64_t rows, E, top_k;
  MoeRouting routing;
  GateAct act;
  bool bias;
  int64_t cold, fav;
  std::vector<float> x, route;
  std::string what;
};

// Each pair x Bf16Dot x rows 1, 2, 7, 33, with the expert count (3, 5), top_k, routing, activation, bias and
// a favourite expert (chosen by every row) varied over them, and one cold expert (chosen by no row) in each.
const std::vector<MainCase>& main_cases() {
  static const std::vector<MainCase> cases = [] {
    std::vector<MainCase> out;
    constexpr GateAct kActs[] = {GateAct::Silu, GateAct::Gelu, GateAct::GeluTanh, GateAct::Relu};
    constexpr MoeRouting kRoutings[] = {MoeRouting::SoftmaxTopK, MoeRouting::SoftmaxTopKNorm,
                                        MoeRouting::TopKSoftmax};
    uint32_t seed = 1;
    for (int p = 0; p < kNumPairs; ++p)
      for (int j = 0; j < 8; ++j) {
        MainCase c;
        c.pair = p;
        c.dot = j < 4 ? Bf16Dot::Exact : Bf16Dot::RoundX;
        c.rows = std::array<int64_t, 4>{1, 2, 7, 33}[static_cast<size_t>(j % 4)];
        c.E = (p + j) % 2 ? 5 : 3;
        c.top_k = 1 + (j * 7 + p) % (c.E - 1);
        c.routing = kRoutings[(j + p) % 3];
        c.act = kActs[(j + p / 2) % 4];
        c.bias = (((j >> 1) + p) & 1) != 0;
        c.cold = (j + p) % c.E;
        c.fav = j % 3 == 0 ? (c.cold + 1) % c.E : -1;
        const MoeSet& s = moe_set(p, c.E);
        c.x = random_vec(c.rows * s.H, ++seed, -s.x_scale, s.x_scale);
        c.route = route_of(make_logits(c.rows, c.E, c.cold, c.fav, ++seed), c.rows, c.E, c.top_k, c.routing);
        c.what = std::string(dtype_name(s.gu_dt)) + "/" + dtype_name(s.dn_dt) + " " + dot_name(c.dot) +
                 " rows=" + std::to_string(c.rows) + " E=" + std::to_string(c.E) +
                 " top_k=" + std::to_string(c.top_k) + " " + routing_name(c.routing) + " " + act_name(c.act) +
                 (c.bias ? " bias" : " no bias") + " cold=" + std::to_string(c.cold) +
                 " fav=" + std::to_string(c.fav);
        out.push_back(std::move(c));
      }
    return out;
  }();
  return cases;
}

TEST_P(CpuMoeKernels, ExpertsMatchDoubleReference) {
  for (size_t i = 0; i < main_cases().size(); ++i) {
    const MainCase& c = main_cases()[i];
    const MoeSet& s = moe_set(c.pair, c.E);
    // The routing made what the case asks for: the cold expert empty, the favourite full.
    ASSERT_FALSE(chosen_by_any(c.route.data(), c.rows, c.E, c.cold)) << c.what;
    if (c.fav >= 0) {
      for (int64_t r = 0; r < c.rows; ++r)
        ASSERT_NE(c.route[static_cast<size_t>(r * c.E + c.fav)], 0.0f) << c.what;
    }
    const Ref& ref = cached_ref("main " + std::to_string(i), [&] {
      return moe_reference(s, c.x.data(), c.rows, c.route.data(), c.act, c.bias, c.dot);
    });
    for (bool inv : {true, false}) {
      const std::vector<float> y =
          run_experts(s, c.x.data(), c.rows, c.route.data(), c.act, c.bias, inv, c.dot);
      ASSERT_TRUE(near_ref(y, ref, s.H)) << c.what << " row_invariant=" << inv;
    }
  }
}

// Inputs of the row tests: rows of x and their route (the top min(3, E - 1) of E, SoftmaxTopKNorm, with a
// favourite, so one expert has every row: past the prefill gemm's 8 rows where row_invariant is false; and
// three experts a row at E = 5, where the order of a row's sum shows: a sum of two is the same either way).
struct RowsCase {
  int pair;
  Bf16Dot dot;
  int64_t rows, E;
  std::vector<float> x, route;
};
RowsCase rows_case(int pair, Bf16Dot dot, int64_t rows, int64_t E, uint32_t seed) {
  const MoeSet& s = moe_set(pair, E);
  RowsCase c{pair, dot, rows, E, random_vec(rows * s.H, seed, -s.x_scale, s.x_scale), {}};
  c.route = route_of(make_logits(rows, E, -1, 1, seed + 1), rows, E, std::min<int64_t>(3, E - 1),
                     MoeRouting::SoftmaxTopKNorm);
  return c;
}

// (pair, Bf16Dot) of the row tests: f32, bf16 both ways, f16, q8_0, q4_0 both ways, q4_k/q6_k, q6_k.
const std::pair<int, Bf16Dot> kRowPairs[] = {{0, Bf16Dot::Exact},  {1, Bf16Dot::RoundX}, {1, Bf16Dot::Exact},
                                             {2, Bf16Dot::RoundX}, {3, Bf16Dot::RoundX}, {4, Bf16Dot::RoundX},
                                             {4, Bf16Dot::Exact},  {8, Bf16Dot::RoundX}, {7, Bf16Dot::Exact}};

TEST_P(CpuMoeKernels, EachRowAsItAlone) {
  // row_invariant: each row bit-identical to the row alone (rows = 1); otherwise within the tolerance of it
  // (both near the reference). At rows = 1 (every expert below the prefill gemm's rows) both modes compute
  // the same (matmul_rows is matmul_multi there, whose results are matmul()'s), bit for bit.
  const int64_t rows = 11, E = 5;
  int n = 0;
  for (const auto& [pair, dot] : kRowPairs) {
    const RowsCase c = rows_case(pair, dot, rows, E, 5000u + static_cast<uint32_t>(n++) * 7u);
    const MoeSet& s = moe_set(pair, E);
    const std::string what =
        std::string(dtype_name(s.gu_dt)) + "/" + dtype_name(s.dn_dt) + " " + dot_name(dot);
    const Ref& ref = cached_ref("alone " + what, [&] {
      return moe_reference(s, c.x.data(), rows, c.route.data(), GateAct::Silu, true, dot);
    });
    const std::vector<float> inv = run_experts(s, c.x.data(), rows, c.route.data(), GateAct::Silu, true, true,
                                               dot),
                             pre = run_experts(s, c.x.data(), rows, c.route.data(), GateAct::Silu, true,
                                               false, dot);
    ASSERT_TRUE(near_ref(inv, ref, s.H)) << what << " row_invariant";
    ASSERT_TRUE(near_ref(pre, ref, s.H)) << what << " prefill";
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = c.x.data() + r * s.H;
      const float* rr = c.route.data() + r * E;
      const std::vector<float> a_inv = run_experts(s, xr, 1, rr, GateAct::Silu, true, true, dot),
                               a_pre = run_experts(s, xr, 1, rr, GateAct::Silu, true, false, dot);
      ASSERT_TRUE(same_row_bits(inv.data() + r * s.H, a_inv.data(), s.H)) << what << " row " << r;
      ASSERT_TRUE(same_row_bits(a_pre.data(), a_inv.data(), s.H)) << what << " row " << r << " alone";
      for (int64_t j = 0; j < s.H; ++j) {
        const size_t i = static_cast<size_t>(r * s.H + j);
        ASSERT_LE(std::abs(pre[i] - a_pre[static_cast<size_t>(j)]), 2.0 * ref.tol[i])
            << what << " prefill row " << r << " column " << j;
      }
    }
  }
}

TEST_P(CpuMoeKernels, RowInvariantIsTheRowsMatmulsComposed) {
  // row_invariant's contract spelled out with the public kernels: for each row alone, each of its experts in
  // ascending order: gate and up by matmul_rows (one call, M = 1), gated_act, down by matmul_rows; the row's
  // sum starts at 0 and adds route * out in f32. Bit for bit, so Bf16Dot, the biases' offsets and the order
  // of the sum all reach the matmuls as they should.
  const int64_t rows = 9, E = 5;
  int n = 0;
  for (const auto& [pair, dot] : kRowPairs) {
    for (bool bias : {true, false}) {
      const RowsCase c = rows_case(pair, dot, rows, E, 6000u + static_cast<uint32_t>(n++) * 7u);
      const MoeSet& s = moe_set(pair, E);
      const GateAct act = bias ? GateAct::Gelu : GateAct::Silu;
      const std::vector<float> y = run_experts(s, c.x.data(), rows, c.route.data(), act, bias, true, dot);
      const int64_t H = s.H, I = s.I;
      const size_t gu_row = dtype_bytes(s.gu_dt, H), dn_row = dtype_bytes(s.dn_dt, I);
      std::vector<float> gate(static_cast<size_t>(I)), up(static_cast<size_t>(I)), o(static_cast<size_t>(H)),
          acc(static_cast<size_t>(H));
      for (int64_t r = 0; r < rows; ++r) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t e = 0; e < E; ++e) {
          const float w = c.route[static_cast<size_t>(r * E + e)];
          if (w == 0.0f) continue;
          const uint8_t* g = s.gu.raw.data() + static_cast<size_t>(2 * e * I) * gu_row;
          const float* gb = bias ? s.gu_bias.data() + 2 * e * I : nullptr;
          const MatmulOut gu[2] = {
              {g, I, gb, gate.data()},
              {g + static_cast<size_t>(I) * gu_row, I, gb ? gb + I : nullptr, up.data()}};
          matmul_rows(c.x.data() + r * H, 1, H, s.gu_dt, gu, 2, dot);
          gated_act(act, gate.data(), up.data(), I, gate.data());
          const MatmulOut dn{s.dn.raw.data() + static_cast<size_t>(e * H) * dn_row, H,
                             bias ? s.dn_bias.data() + e * H : nullptr, o.data()};
          matmul_rows(gate.data(), 1, I, s.dn_dt, &dn, 1, dot);
          for (int64_t j = 0; j < H; ++j) {
            const float v = o[static_cast<size_t>(j)] * w;
            acc[static_cast<size_t>(j)] += v;
          }
        }
        ASSERT_TRUE(same_row_bits(y.data() + r * H, acc.data(), H))
            << dtype_name(s.gu_dt) << "/" << dtype_name(s.dn_dt) << " " << dot_name(dot) << " bias=" << bias
            << " row " << r;
      }
    }
  }
}

TEST_P(CpuMoeKernels, RowOrderOnlyPermutesTheRows) {
  // Permuting the rows (x and route alike) permutes the output rows: bit for bit with row_invariant, within
  // the tolerance otherwise (the prefill gemm may tile rows differently).
  const int64_t rows = 13, E = 5;
  int n = 0;
  for (const auto& [pair, dot] : kRowPairs) {
    const MoeSet& s = moe_set(pair, E);
    const RowsCase c = rows_case(pair, dot, rows, E, 7000u + static_cast<uint32_t>(n++) * 7u);
    std::vector<int64_t> perm(static_cast<size_t>(rows));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(static_cast<uint32_t>(n)));
    std::vector<float> xp(c.x.size()), rp(c.route.size());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t from = perm[static_cast<size_t>(r)];
      std::copy_n(c.x.begin() + from * s.H, s.H, xp.begin() + r * s.H);
      std::copy_n(c.route.begin() + from * E, E, rp.begin() + r * E);
    }
    const std::string what =
        std::string(dtype_name(s.gu_dt)) + "/" + dtype_name(s.dn_dt) + " " + dot_name(dot);
    const Ref& ref = cached_ref("order " + what, [&] {
      return moe_reference(s, c.x.data(), rows, c.route.data(), GateAct::Gelu, false, dot);
    });
    for (bool inv : {true, false}) {
      const std::vector<float> y = run_experts(s, c.x.data(), rows, c.route.data(), GateAct::Gelu, false, inv,
                                               dot),
                               yp =
                                   run_experts(s, xp.data(), rows, rp.data(), GateAct::Gelu, false, inv, dot);
      ASSERT_TRUE(near_ref(y, ref, s.H)) << what << " row_invariant=" << inv;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t from = perm[static_cast<size_t>(r)];
        if (inv) {
          ASSERT_TRUE(same_row_bits(yp.data() + r * s.H, y.data() + from * s.H, s.H)) << what << " row " << r;
          continue;
        }
        for (int64_t j = 0; j < s.H; ++j)
          ASSERT_LE(std::abs(yp[static_cast<size_t>(r * s.H + j)] - y[static_cast<size_t>(from * s.H + j)]),
                    2.0 * ref.tol[static_cast<size_t>(from * s.H + j)])
              << what << " prefill row " << r << " column " << j;
      }
    }
  }
}

TEST_P(CpuMoeKernels, InterleavedRowsComputeAsStored) {
  // The experts' matrices in their _R8 forms (rows interleaved by 8: the whole [E * 2I, H] and [E * H, I]
  // matrices at once, which interleaves each expert's gate, up and down blocks alone since I and H are
  // multiples of 8): near the reference in every mode, and bit for bit as the stored dtype where the _R8
  // kernels promise it (Bf16Dot::Exact).
  struct R8Case {
    int pair;
    int64_t rows;
  };
  int n = 0;
  for (R8Case rc : {R8Case{4, 3}, R8Case{4, 12}, R8Case{8, 2}, R8Case{8, 9}, R8Case{7, 5}})
    for (Bf16Dot dot : {Bf16Dot::Exact, Bf16Dot::RoundX}) {
      const int64_t E = 3;
      const MoeSet& s = moe_set(rc.pair, E);
      const RowsCase c = rows_case(rc.pair, dot, rc.rows, E, 8000u + static_cast<uint32_t>(n++) * 7u);
      std::vector<uint8_t> gu = s.gu.raw, dn = s.dn.raw;
      const DType gu8 = rows8_dtype(s.gu_dt), dn8 = rows8_dtype(s.dn_dt);
      ASSERT_NE(gu8, s.gu_dt);
      ASSERT_NE(dn8, s.dn_dt);
      interleave_rows8(s.gu_dt, gu.data(), E * 2 * s.I, s.H);
      interleave_rows8(s.dn_dt, dn.data(), E * s.H, s.I);
      const WeightBytes r8{gu8, dn8, &gu, &dn};
      const std::string what = std::string(dtype_name(gu8)) + "/" + dtype_name(dn8) + " " + dot_name(dot) +
                               " rows=" + std::to_string(rc.rows);
      const Ref& ref = cached_ref("r8 " + what, [&] {
        return moe_reference(s, c.x.data(), rc.rows, c.route.data(), GateAct::Silu, true, dot);
      });
      for (bool inv : {true, false}) {
        const std::vector<float> y =
            run_experts(s, c.x.data(), rc.rows, c.route.data(), GateAct::Silu, true, inv, dot, &r8);
        ASSERT_TRUE(near_ref(y, ref, s.H)) << what << " row_invariant=" << inv;
        if (dot == Bf16Dot::Exact) {
          const std::vector<float> stored =
              run_experts(s, c.x.data(), rc.rows, c.route.data(), GateAct::Silu, true, inv, dot);
          for (int64_t r = 0; r < rc.rows; ++r)
            ASSERT_TRUE(same_row_bits(y.data() + r * s.H, stored.data() + r * s.H, s.H))
                << what << " row_invariant=" << inv << " row " << r << " against the stored dtype";
        }
      }
    }
}

TEST_P(CpuMoeKernels, AnyRouteWeights) {
  // Routes that moe_route does not make: a row with no expert (y exactly +0), a -0 weight (no expert either),
  // weights above 1, negative ones, tiny ones, every expert in one row; expert 2 chosen by no row (NaN).
  const int64_t rows = 6, E = 5;
  const std::vector<float> route = {0.0f,   0.0f, -0.0f, 0.0f,   0.0f,    // nothing
                                    0.0f,   2.5f, 0.0f,  0.0f,   0.0f,    // one expert, weight 2.5
                                    -0.75f, 0.0f, 0.0f,  0.125f, 0.0f,    // a negative weight
                                    0.0f,   1.0f, 0.0f,  1e-30f, 0.0f,    // a tiny one
                                    0.2f,   0.3f, 0.0f,  0.1f,   0.4f,    // all but expert 2
                                    0.0f,   0.0f, 0.0f,  0.0f,   -3.0f};  // only the last expert
  uint32_t seed = 9000;
  for (int pair : {0, 1, 3, 6})
    for (Bf16Dot dot : {Bf16Dot::Exact, Bf16Dot::RoundX}) {
      const MoeSet& s = moe_set(pair, E);
      const std::vector<float> x = random_vec(rows * s.H, ++seed, -s.x_scale, s.x_scale);
      const std::string what =
          std::string(dtype_name(s.gu_dt)) + "/" + dtype_name(s.dn_dt) + " " + dot_name(dot);
      const Ref& ref = cached_ref("any " + what, [&] {
        return moe_reference(s, x.data(), rows, route.data(), GateAct::Silu, true, dot);
      });
      for (bool inv : {true, false}) {
        const std::vector<float> y =
            run_experts(s, x.data(), rows, route.data(), GateAct::Silu, true, inv, dot);
        ASSERT_TRUE(near_ref(y, ref, s.H)) << what << " row_invariant=" << inv;
        for (int64_t j = 0; j < s.H; ++j) {
          const float v = y[static_cast<size_t>(j)];
          ASSERT_TRUE(v == 0.0f && !std::signbit(v)) << what << " the row without experts, column " << j;
        }
      }
    }
  // No rows: nothing is written.
  const MoeSet& s = moe_set(0, E);
  const MoeWeights w{s.gu.raw.data(), s.dn.raw.data(), s.gu_dt, s.dn_dt, nullptr, nullptr, E, s.H, s.I};
  std::vector<float> x(static_cast<size_t>(s.H), 1.0f), y(static_cast<size_t>(s.H), 7.0f);
  for (bool inv : {true, false})
    moe_experts(x.data(), 0, route.data(), w, GateAct::Silu, inv, Bf16Dot::Exact, y.data());
  for (float v : y) ASSERT_EQ(v, 7.0f);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, CpuMoeKernels, testing::ValuesIn(kernel_targets::int8_targets()),
                         kernel_targets::int8_target_name);

TEST(CpuMoeKernelsDeathTest, UnchosenExpertsAreNeverRead) {
  // The weights and biases of the expert no row chose (the middle one of three, so reading past either
  // neighbour's end would touch it too) behind PROT_NONE pages, in a child process: any read ends it with
  // SIGSEGV. One thread, so that the fork has no pool workers to lose. The result is the one of readable
  // weights, bit for bit.
  const long page = sysconf(_SC_PAGESIZE);
  ASSERT_GT(page, 0);
  struct OneThread {  // for this test, whatever way it ends
    OneThread() { ThreadPool::instance().set_num_threads(1); }
    ~OneThread() { ThreadPool::instance().set_num_threads(0); }
  } one_thread;
  for (DType dt : {DType::F32, DType::Q4_K, DType::BF16}) {
    // Per expert: gate_up 1024 rows of H, down 1024 rows of I, biases of 4096 bytes: whole pages.
    const int64_t E = 3, H = 1024, I = 512, rows = 5;
    const size_t sizes[4] = {dtype_bytes(dt, H) * static_cast<size_t>(2 * I),
                             dtype_bytes(dt, I) * static_cast<size_t>(H), 2 * I * sizeof(float),
                             H * sizeof(float)};
    uint8_t* mem[4];
    for (int i = 0; i < 4; ++i) {
      ASSERT_EQ(sizes[i] % static_cast<size_t>(page), 0u) << dtype_name(dt) << " " << i;
      void* p = mmap(nullptr, sizes[i] * E, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ASSERT_NE(p, MAP_FAILED);
      mem[i] = static_cast<uint8_t*>(p);
    }
    const Mat gu = make_mat(dt, E * 2 * I, H, 31), dn = make_mat(dt, E * H, I, 32);
    const std::vector<float> gub = random_vec(E * 2 * I, 33), dnb = random_vec(E * H, 34);
    std::memcpy(mem[0], gu.raw.data(), gu.raw.size());
    std::memcpy(mem[1], dn.raw.data(), dn.raw.size());
    std::memcpy(mem[2], gub.data(), gub.size() * sizeof(float));
    std::memcpy(mem[3], dnb.data(), dnb.size() * sizeof(float));
    const std::vector<float> x = random_vec(rows * H, 35, -0.05f, 0.05f);
    std::vector<float> route(static_cast<size_t>(rows * E), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      route[static_cast<size_t>(r * E)] = r == 1 ? 0.0f : 0.6f;
      route[static_cast<size_t>(r * E + 2)] = r == 3 ? 0.0f : 0.4f;
    }
    const MoeWeights w{
        mem[0], mem[1], dt, dt, reinterpret_cast<float*>(mem[2]), reinterpret_cast<float*>(mem[3]), E, H, I};
    for (bool inv : {true, false}) {
      std::vector<float> want(static_cast<size_t>(rows * H), NAN);
      moe_experts(x.data(), rows, route.data(), w, GateAct::Silu, inv, Bf16Dot::RoundX, want.data());
      for (float v : want) ASSERT_TRUE(std::isfinite(v)) << dtype_name(dt);
      EXPECT_EXIT(
          {
            for (int i = 0; i < 4; ++i) mprotect(mem[i] + sizes[i], sizes[i], PROT_NONE);
            std::vector<float> y(static_cast<size_t>(rows * H), NAN);
            moe_experts(x.data(), rows, route.data(), w, GateAct::Silu, inv, Bf16Dot::RoundX, y.data());
            std::_Exit(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)) == 0 ? 0 : 3);
          },
          ::testing::ExitedWithCode(0), "")
          << dtype_name(dt) << " row_invariant=" << inv;
    }
    for (int i = 0; i < 4; ++i) munmap(mem[i], sizes[i] * E);
  }
}

// ------------------------------------------------------------------ moe_route

// The double-precision reference of one row: the top_k experts by logit (largest first, ties to the lower
// index) and their weights [E] (0 for the others).
struct RouteRef {
  std::vector<int64_t> picks;
  std::vector<double> w;
};
RouteRef route_reference(const float* l, int64_t E, int64_t top_k, MoeRouting routing) {
  std::vector<int64_t> idx(static_cast<size_t>(E));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return l[a] > l[b]; });
  RouteRef ref{std::vector<int64_t>(idx.begin(), idx.begin() + top_k),
               std::vector<double>(static_cast<size_t>(E))};
  const double m = l[idx[0]];
  double all = 0.0, kept = 0.0;
  for (int64_t e = 0; e < E; ++e) all += std::exp(l[e] - m);
  for (int64_t e : ref.picks) kept += std::exp(l[e] - m);
  for (int64_t e : ref.picks)
    ref.w[static_cast<size_t>(e)] = std::exp(l[e] - m) / (routing == MoeRouting::SoftmaxTopK ? all : kept);
  return ref;
}

constexpr MoeRouting kRoutings[] = {MoeRouting::SoftmaxTopK, MoeRouting::SoftmaxTopKNorm,
                                    MoeRouting::TopKSoftmax};

// One routed row against the reference: the chosen experts exactly, unchosen weights +0, chosen ones within
// the relative tolerance, normalising rows summing to 1.
::testing::AssertionResult route_row_ok(const float* l, const float* got, int64_t E, int64_t top_k,
                                        MoeRouting routing) {
  const RouteRef ref = route_reference(l, E, top_k, routing);
  std::vector<bool> chosen(static_cast<size_t>(E), false);
  for (int64_t e : ref.picks) chosen[static_cast<size_t>(e)] = true;
  const double m = *std::max_element(l, l + E);
  double sum = 0.0;
  for (int64_t e = 0; e < E; ++e) {
    const float v = got[e];
    sum += v;
    if (!chosen[static_cast<size_t>(e)]) {
      if (v != 0.0f || std::signbit(v))
        return ::testing::AssertionFailure() << "unchosen expert " << e << ": " << v;
      continue;
    }
    const double want = ref.w[static_cast<size_t>(e)];
    const double tol =  // (an underflowed weight, e.g. of a -inf logit: 0 as in double)
        want == 0.0 ? 1e-37 : (3e-6 + 1.2e-7 * std::abs(static_cast<double>(l[e]) - m)) * want + 1e-37;
    if (!(std::abs(v - want) <= tol))
      return ::testing::AssertionFailure()
             << "expert " << e << ": " << v << " against " << want << " (tolerance " << tol << ")";
  }
  if (routing != MoeRouting::SoftmaxTopK || top_k == E) {
    const double tol = 2.4e-7 * static_cast<double>(top_k + 1);
    if (!(std::abs(sum - 1.0) <= tol))
      return ::testing::AssertionFailure() << "the weights sum to " << sum << " (tolerance " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

TEST(CpuMoeRoute, MatchesDoubleReference) {
  // Odd expert counts, every top_k; distinct logits (0.37 apart, jittered by 0.1), rows shifted by 0, +-150
  // (no overflow: the softmax subtracts the max) and a random offset.
  uint32_t seed = 1;
  for (MoeRouting routing : kRoutings)
    for (int64_t E : {1, 3, 5, 8, 13})
      for (int64_t top_k = 1; top_k <= E; ++top_k) {
        const int64_t rows = 4;
        std::mt19937 rng(++seed);
        std::uniform_real_distribution<float> jitter(-0.1f, 0.1f), shift(-20.0f, 20.0f);
        const float offsets[rows] = {0.0f, 150.0f, -150.0f, shift(rng)};
        std::vector<float> logits(static_cast<size_t>(rows * E));
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<int> perm(static_cast<size_t>(E));
          std::iota(perm.begin(), perm.end(), 0);
          std::shuffle(perm.begin(), perm.end(), rng);
          for (int64_t e = 0; e < E; ++e)
            logits[static_cast<size_t>(r * E + e)] =
                offsets[r] + 0.37f * perm[static_cast<size_t>(e)] + jitter(rng);
        }
        const std::vector<float> route = route_of(logits, rows, E, top_k, routing);
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_TRUE(route_row_ok(logits.data() + r * E, route.data() + r * E, E, top_k, routing))
              << routing_name(routing) << " E=" << E << " top_k=" << top_k << " row " << r;
        // The one expert of a normalised row (or of one expert) weighs 1 exactly.
        if (E == 1 || (top_k == 1 && routing != MoeRouting::SoftmaxTopK))
          for (int64_t r = 0; r < rows; ++r) {
            const float* w = route.data() + r * E;
            ASSERT_EQ(*std::max_element(w, w + E), 1.0f)
                << routing_name(routing) << " E=" << E << " row " << r;
          }
      }
}

TEST(CpuMoeRoute, TiesGoToTheLowerExpert) {
  struct Case {
    std::vector<float> logits;
    int64_t top_k;
    std::vector<int64_t> chosen;
  };
  const std::vector<Case> cases = {
      {{1, 1, 1, 1, 1}, 2, {0, 1}},
      {{1, 3, 3, 2, 3}, 1, {1}},
      {{1, 3, 3, 2, 3}, 2, {1, 2}},
      {{1, 3, 3, 2, 3}, 3, {1, 2, 4}},
      {{1, 3, 3, 2, 3}, 4, {1, 2, 3, 4}},
      {{2, 1, 2, 1, 1}, 3, {0, 1, 2}},
      {{-1, 5, 5}, 1, {1}},
      {{0, 0, 0}, 3, {0, 1, 2}},
      {{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}, 5, {0, 1, 2, 3, 4}},
      {{0, 7, 0, 7, 0, 7, 0, 7}, 3, {1, 3, 5}},
  };
  for (MoeRouting routing : kRoutings)
    for (const Case& c : cases) {
      const int64_t E = static_cast<int64_t>(c.logits.size());
      std::vector<float> route(c.logits.size(), NAN);
      moe_route(c.logits.data(), 1, E, c.top_k, routing, route.data());
      std::string what = routing_name(routing) + " top_k=" + std::to_string(c.top_k) + " logits";
      for (float l : c.logits) what += " " + std::to_string(static_cast<int>(l));
      std::vector<int64_t> chosen;
      for (int64_t e = 0; e < E; ++e)
        if (route[static_cast<size_t>(e)] != 0.0f) chosen.push_back(e);
      EXPECT_EQ(chosen, c.chosen) << what;
      EXPECT_TRUE(route_row_ok(c.logits.data(), route.data(), E, c.top_k, routing)) << what;
      for (int64_t a : c.chosen)  // equal logits, equal weights
        for (int64_t b : c.chosen)
          if (c.logits[static_cast<size_t>(a)] == c.logits[static_cast<size_t>(b)]) {
            EXPECT_EQ(route[static_cast<size_t>(a)], route[static_cast<size_t>(b)])
                << what << " " << a << " " << b;
          }
    }
}

TEST(CpuMoeRoute, ExtremeLogitsStayFinite) {
  // Huge logits and differences: the softmax subtracts the max, so nothing overflows; underflowed weights are
  // 0 (a chosen expert of weight 0 is one moe_experts skips).
  struct Case {
    std::vector<float> logits;
    int64_t top_k;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {{1e30f, -1e30f, 0.0f, 1e30f}, 2}, {{1e30f, -1e30f, 0.0f, 1e30f}, 4},
      {{1000.0f, -1000.0f, 0.0f}, 2},    {{-1e4f, -1e4f - 1.0f, -2e4f}, 3},
      {{-inf, 0.0f, 1.0f}, 2},           {{88.0f, 89.0f, 90.0f, -88.0f, -104.0f}, 5}};
  for (MoeRouting routing : kRoutings)
    for (const Case& c : cases) {
      const int64_t E = static_cast<int64_t>(c.logits.size());
      std::vector<float> route(c.logits.size(), NAN);
      moe_route(c.logits.data(), 1, E, c.top_k, routing, route.data());
      std::string what = routing_name(routing) + " top_k=" + std::to_string(c.top_k) + " logits";
      for (float l : c.logits) what += " " + std::to_string(l);
      for (float v : route) ASSERT_TRUE(std::isfinite(v) && v >= 0.0f && v <= 1.0f) << what;
      EXPECT_TRUE(route_row_ok(c.logits.data(), route.data(), E, c.top_k, routing)) << what;
    }
}

TEST(CpuMoeRoute, NanLogitIsNeverPickedOverANumber) {
  // kernels_moe.cpp: "a tie goes to the lower index (a NaN is never picked over a number)". TopKSoftmax
  // selects on the raw logits, and each pick's scan starts from the lowest-index expert not yet taken: when
  // that one is NaN no number compares greater, so the NaN is picked (and the row's weights are all NaN),
  // while a NaN anywhere else was passed over (fixed: a number is always preferred to a NaN).
  struct Case {
    std::vector<float> logits;
    int64_t top_k, nan_at;
  };
  for (const Case& c : {Case{{NAN, 1.0f, 2.0f}, 1, 0}, Case{{2.0f, NAN, 1.0f}, 2, 1}}) {
    std::vector<float> route(c.logits.size(), -1.0f);
    moe_route(c.logits.data(), 1, static_cast<int64_t>(c.logits.size()), c.top_k, MoeRouting::TopKSoftmax,
              route.data());
    EXPECT_EQ(route[static_cast<size_t>(c.nan_at)], 0.0f) << "NaN at " << c.nan_at;
    for (float v : route) EXPECT_TRUE(std::isfinite(v)) << "NaN at " << c.nan_at;
  }
}

TEST(CpuMoeRouteDeathTest, TopKOutsideOneToExpertsIsAnInternalError) {
  const std::vector<float> logits(3, 0.0f);
  std::vector<float> route(3);
  EXPECT_DEATH(moe_route(logits.data(), 1, 3, 0, MoeRouting::SoftmaxTopK, route.data()), "moe_route");
  EXPECT_DEATH(moe_route(logits.data(), 1, 3, 4, MoeRouting::TopKSoftmax, route.data()), "moe_route");
}

}  // namespace
}  // namespace tessera::cpu
