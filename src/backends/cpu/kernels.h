// CPU kernels of the native backend. Activations are float32; weights may be F32, BF16 or F16 in the
// Hugging Face [out, in] row-major layout. Every kernel exists for three instruction sets (portable scalar,
// AVX2+FMA, AVX-512), the best this CPU has until set_isa() picks another (the tessera command does for
// TESSERA_ISA=scalar|avx2|avx512|avx512bf16; tests run each target against a scalar reference).
// "avx512bf16" is AVX-512 plus vdpbf16ps dot products for the decode matmul of bf16 weights (see matmul).
// Kernels are threaded through ThreadPool::instance() and do not allocate in the steady state (per-thread
// scratch grows once).
#pragma once
#include <cstdint>

#include "tessera/tensor.h"

namespace tessera::cpu {

// ---- instruction-set dispatch ----
enum class Isa : uint8_t { Scalar, Avx2, Avx512, Avx512Bf16 };
const char* isa_name(Isa isa);  // "scalar", "avx2", "avx512", "avx512bf16"
bool isa_supported(Isa isa);    // by this CPU
Isa best_isa();                 // the best supported one
Isa active_isa();               // the one kernels use now
// Selects the kernels' instruction set; throws tessera::Error when this CPU lacks it.
// Not thread-safe with running kernels (call it between steps, as tests do).
void set_isa(Isa isa);
// Parses "scalar" | "avx2" | "avx512" | "avx512bf16"; throws tessera::Error otherwise.
Isa parse_isa(const char* name);
// The integer dot products of the block-quantised kernels (kernels_quant.cpp) on avx2 and above:
// Avx2 = vpmaddubsw + vpmaddwd; AvxVnni = vpdpbusd (VEX); Avx512Vnni = vpdpbusd's EVEX form (only at the
// avx512 levels: 256-bit vectors in decode, 512-bit in the prefill gemm); EmulatedVnni = the VNNI kernels'
// code with the AVX2 pair standing in for vpdpbusd, so that an AVX2 machine tests it (tests only). All four
// give the same integers, so the same outputs bit for bit.
enum class Int8Dot : uint8_t { Avx2, AvxVnni, Avx512Vnni, EmulatedVnni };
const char* int8_dot_name(Int8Dot d);  // "avx2", "avx-vnni", "avx512-vnni", "emulated-vnni"
bool int8_dot_supported(Int8Dot d);    // by this CPU (at any ISA)
// The one the kernels use at the active ISA: the forced one (set_int8_dot), else Avx512Vnni at the avx512
// levels where the CPU has it, else AvxVnni where it has that, else Avx2. Meaningless on the scalar level.
Int8Dot active_int8_dot();
// Forces one (tests); throws tessera::Error when this CPU lacks it. reset_int8_dot() returns to the default.
void set_int8_dot(Int8Dot d);
void reset_int8_dot();
// What the quantised decode kernels use now: "scalar" at the scalar level, else active_int8_dot()'s name.
const char* int8_dot_in_use();

// ---- linear algebra ----
// What a matmul with bf16 weights may do with x. Exact: x stays f32 (products of f32 x and exactly widened
// weights, summed in f32). RoundX: x may be rounded to bf16 (round-to-nearest-even) so the products come from
// vdpbf16ps, as llama.cpp does for bf16 weights (the decode gemv and the prefill gemm). It takes effect
// where matmul_rounds_bf16() (the avx512bf16 instruction set) and is Exact everywhere else.
enum class Bf16Dot : uint8_t { Exact, RoundX };

// Block-quantised weights (wdt Q8_0, Q4_0 or Q4_1, K a multiple of 32; see kernels_quant.cpp) are computed
// from their blocks: below kGemmMinRows rows (and always in matmul_rows) x is quantised per row and block of
// 32 to int8 and dotted in integers, as llama.cpp does; from kGemmMinRows rows on (prefill) the int8 gemm
// does the same with x (panels of 16 unpacked weight rows). For them `bf16` says whether x may be rounded to
// int8: RoundX (the default callers pass) does; Exact keeps x f32 (dequantised chunks through the f32 gemm,
// or the f32 decode kernel: what f32 weights give, bit for bit).
//
// y[M, N] = x[M, K] · w[N, K]^T (+ bias[N]). x f32 row-major; w in wdt (F32/BF16/F16/quantised) row-major [N,
// K]; bias f32 or nullptr; y f32 (must not alias x). Accumulates in f32; x stays f32 unless `bf16` allows
// rounding (above).
void matmul(const float* x, int64_t M, int64_t K, const void* w, DType wdt, int64_t N, const float* bias,
            float* y, Bf16Dot bf16 = Bf16Dot::Exact);
// One product of a matmul_multi: y[M, N] = x · w[N, K]^T (+ bias[N]).
struct MatmulOut {
  const void* w;
  int64_t N;
  const float* bias;  // or nullptr
  float* y;
};
// Several matmuls of the same x (one weight dtype; e.g. q/k/v or gate/up) with the results of matmul() for
// each, but in one fork-join over the threads where the decode kernel runs (x is prepared once).
void matmul_multi(const float* x, int64_t M, int64_t K, DType wdt, const MatmulOut* outs, int count,
                  Bf16Dot bf16 = Bf16Dot::Exact);
// matmul_multi for decode steps: every row of y is bit-identical to what the row alone (M = 1) gives, for
// any M (the small-M kernels, never the prefill gemm; each block of weight rows is used by all M rows before
// the next is read, so the weights come from memory once per step). Below kGemmMinRows rows it is
// matmul_multi.
void matmul_rows(const float* x, int64_t M, int64_t K, DType wdt, const MatmulOut* outs, int count,
                 Bf16Dot bf16 = Bf16Dot::Exact);
// rows [rows, K] of block-quantised weights (Q8_0 .. Q6_K) to f32 y [rows, K] (value = d * q + m in f32).
void dequantize_rows(DType wdt, const void* w, int64_t K, int64_t rows, float* y);
// Row r of w [rows, K] (block-quantised, the _R8 forms too) dequantised to f32 y [K].
void dequantize_row_at(DType wdt, const void* w, int64_t K, int64_t r, float* y);
// The blocks of w [rows, K] (Q8_0 .. Q6_K as stored) as plain arrays, for devices that dequantise in their
// own programs: q [rows, K] the signed integers, scale [rows, K / quant_scale_group] (a value is q * scale +
// offset, one rounding each) and, where quant_has_offset, offset [rows, K / 32]; the values are
// dequantize_rows' up to that rounding. The group is 16 for Q6_K (a scale per 16 values), else 32; the
// offset formats are Q4_1, Q5_1, Q4_K and Q5_K (the others' integers are signed: q - 8, q - 16, q - 32).
int64_t quant_scale_group(DType wdt);
bool quant_has_offset(DType wdt);
void split_quant_rows(DType wdt, const void* w, int64_t K, int64_t rows, int8_t* q, float* scale,
                      float* offset);
// Rows interleaved by 8 (see kernels_quant.cpp): the _R8 form of a block-quantised dtype (Q4_K -> Q4_K_R8,
// Q6_K -> Q6_K_R8, Q4_0 -> Q4_0_R8, Q4_1 -> Q4_1_R8), or dt itself where there is none; stored_dtype is the
// inverse (dt itself for the others).
DType rows8_dtype(DType dt);
DType stored_dtype(DType dt);
// Rewrites w [N, K] of a dtype with an _R8 form (N a multiple of 8) in place into that form, over the pool's
// threads. The values are those of the input, bit for bit (only the bytes' places change).
void interleave_rows8(DType dt, void* w, int64_t N, int64_t K);
// Whether Bf16Dot::RoundX rounds x on the active instruction set.
bool matmul_rounds_bf16();
// AMX-BF16: whether this CPU has it and the OS grants this process tile data (asked once); whether the bf16
// prefill gemm (RoundX, M >= kGemmMinRows, the avx512bf16 level) runs on it now; set_use_amx(false) keeps it
// on vdpbf16ps and the int8 gemm on vpdpbusd (tests compare the two).
bool amx_supported();
bool amx_in_use();
void set_use_amx(bool use);
// AMX-INT8 likewise, for the int8 prefill gemm of block-quantised weights (with the Avx512Vnni integer dot:
// tdpbsud gives its integers, and the float steps after them are the same, so the same bits).
bool amx_int8_supported();
bool amx_int8_in_use();

// ---- normalisation ----
// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight   (weight f32 [dim]); x may equal y.
// weight nullptr: the normalisation alone (Gemma 4's v_norm and router norm).
void rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y);
// y = (x * w) * scale per element of x [rows, cols] (graph::Op::Scale): w [cols], or [1] (w_len 1), or none
// (nullptr); scale 1: none. Each product rounded to f32 in that order, as PyTorch computes x * w * s.
void scale_rows(const float* x, int64_t rows, int64_t cols, const float* w, int64_t w_len, float scale,
                float* y);

// ---- positions ----
// HF "rotate_half" RoPE in place on x [tokens, heads, head_dim]: the first rot_dim dims of each head are
// rotated (pairs (i, i + rot_dim/2)), angle = positions[t] * inv_freq[i] (inv_freq f32 [rot_dim/2]) computed
// in float32, then cos/sin in float32 as HF does. `row_tokens` > 0: inv_freq is [tokens / row_tokens,
// rot_dim/2], one table per step row of row_tokens tokens (longrope / dynamic rope).
void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rot_dim,
          const int32_t* positions, const float* inv_freq, float scale = 1.0f, int64_t row_tokens = 0);

// ---- attention ----
// Causal attention of one sequence over its static KV cache.
// q [T, nh, hd]; k, v caches [nkv, cache_len, kv_row_values(hd)] in kv_dtype: F32 or BF16 (widened exactly),
// or Q8_0 / F8_E4M3 (--kv-cache-dtype q8_0 / fp8: tiles of keys and values dequantised to f32 inside the
// kernel, each value exact, then the f32 path; so a quantised cache gives, bit for bit, what an f32 cache
// holding the dequantised values gives); scores and sums in f32 (GQA: query head h uses kv head h / (nh /
// nkv)); query t attends keys j with kv_begin <= j <= q_slot[t]; softmax(q·k * scale) in f32; out [T, nh *
// hd]. window > 0 (sliding-window attention): also j > q_slot[t] - window, i.e. the last `window` slots up to
// q_slot[t] (slots and positions differ by kv_begin alone, so this is Transformers' kv_pos > pos - window).
// A query with no key in range (q_slot[t] < kv_begin, e.g. a padding row) gets zeros. Slots past q_slot[t],
// and slots before the first window start of a block of queries, are never read.
// softcap > 0 (Gemma 2's attention logit soft-capping): each scaled score s becomes tanh(s / softcap) *
// softcap (f32, in that order, as Transformers' eager attention) before the softmax.
void attention(const float* q, int64_t T, int64_t nh, int64_t hd, const void* k, const void* v,
               DType kv_dtype, int64_t nkv, int64_t cache_len, const int32_t* q_slot, int32_t kv_begin,
               float scale, float* out, int64_t window = 0, float softcap = 0.0f,
               const float* sinks = nullptr);

// A cache row's values and bytes in a KV cache dtype (tessera/tensor.h).
using tessera::kv_row_bytes;
using tessera::kv_row_values;
// x [hd] f32 -> one cache row in kv_dtype: BF16 round-to-nearest-even, Q8_0 as llama.cpp's reference
// quantiser (per 32 values d = max|x| / 127 stored as f16, q = round(x / d); a last partial block padded with
// zeros), F8_E4M3 f32_to_f8e4m3 (scale 1).
void store_kv_row(DType kv_dtype, const float* x, int64_t hd, void* dst);
// rows cache rows of hd values in kv_dtype -> f32 y [rows, hd] (exact: each is what the row stands for).
void load_kv_rows(DType kv_dtype, const void* src, int64_t hd, int64_t rows, float* y);

// ---- elementwise ----
// y = silu(gate) * up, elementwise over n; silu(x) = x / (1 + exp(-x)) in f32 as PyTorch. y may alias inputs.
void swiglu(const float* gate, const float* up, int64_t n, float* y);
// The gate activation of a gated MLP (PyTorch's definitions):
//   Silu      x / (1 + exp(-x))
//   Gelu      x * Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2 (exact erf GELU; erfc to ~1e-7 relative)
//   GeluTanh  0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), evaluated as x / (1 + exp(-2u))
//   Relu      max(x, 0) (NaN stays NaN)
//   Sigmoid   1 / (1 + exp(-x)) (a gated attention output)
enum class GateAct : uint8_t { Silu, Gelu, GeluTanh, Relu, Sigmoid };
// y = act(gate) * up, elementwise over n, in f32; y may alias inputs.
void gated_act(GateAct act, const float* gate, const float* up, int64_t n, float* y);
// y[r, j] = act(gate[r]) * up[r, j] for rows x cols (one gate per row: a shared expert's gate); y may alias
// up.
void row_gated_act(GateAct act, const float* gate, const float* up, int64_t rows, int64_t cols, float* y);
// y = a + b over n; y may alias a or b.
void add(const float* a, const float* b, int64_t n, float* y);
// y = tanh(x / cap) * cap over n, in f32 (divide, tanh, multiply: PyTorch's order); y may alias x.
void softcap(const float* x, int64_t n, float cap, float* y);
// In-place softmax over each row of x [rows, n] (f32, max-subtracted).
void softmax(float* x, int64_t rows, int64_t n);

// ---- linear attention with a recurrent state (kernels_linear_attention.cpp) ----
// Gated DeltaNet (graph::Op::GatedDeltaNet): sizes, weights, and the step's rows.
struct DeltaNet {
  int64_t hk = 0, hv = 0, dk = 0, dv = 0, kernel = 0;  // key heads, value heads, their dims, conv width
  float eps = 0.f;                                     // the output RMSNorm's
  const float* conv = nullptr;                         // [C, K] (C = 2 * hk * dk + hv * dv)
  const float* a_log = nullptr;                        // [hv]
  const float* dt_bias = nullptr;                      // [hv]
  const float* norm = nullptr;                         // [dv]
  bool tiled = false;  // value head h reads key head h % hk (else h / (hv / hk))
  int64_t channels() const { return 2 * hk * dk + hv * dv; }
  // Floats of one cache row's state: the convolution's last K - 1 inputs [C, K - 1], then S [hv, dk, dv].
  int64_t state_floats() const { return channels() * (kernel - 1) + hv * dk * dv; }
};
// y [batch * seq, hv * dv] from qkv [batch * seq, C], z [.., hv * dv], b and a [.., hv]: step row r's tokens
// in order against the state of cache row `cache_row[r]` (state + cache_row[r] * state_floats()), updated in
// place; a token whose slot is kv_begin[r] starts from zero state, one below it (left padding) gives 0 and
// changes nothing. Step rows sharing a cache row run in step-row order. Parallel over channels, then heads.
void gated_delta_net(const DeltaNet& w, const float* qkv, const float* z, const float* b, const float* a,
                     int64_t batch, int64_t seq, const int64_t* cache_row, const int32_t* const* slots,
                     const int32_t* kv_begin, float* state, float* y);

// ---- mixture of experts (kernels_moe.cpp) ----
// How router logits become expert weights: SoftmaxTopK: softmax (f32) over all experts, the top_k kept;
// SoftmaxTopKNorm: ... divided by their sum (in top-k order); TopKSoftmax: softmax over the top_k logits.
// Ties go to the lower expert index.
enum class MoeRouting : uint8_t { SoftmaxTopK, SoftmaxTopKNorm, TopKSoftmax };
// route [rows, E]: each row's weights for its top_k experts, 0 for the others, from logits [rows, E].
void moe_route(const float* logits, int64_t rows, int64_t experts, int64_t top_k, MoeRouting routing,
               float* route);
// The experts of a sparse MLP block. Weights in wdt (as matmul takes them): gate_up [E, 2I, H] (expert e's
// gate rows, then its up rows), down [E, H, I]; biases (f32, or nullptr) [E, 2I] and [E, H].
struct MoeWeights {
  const void* gate_up;
  const void* down;
  DType gate_up_dtype, down_dtype;
  const float* gate_up_bias;
  const float* down_bias;
  int64_t experts, hidden, inter;
  // gpt-oss's clamped SwiGLU instead of `act`: g = min(gate, limit), u = clamp(up, -limit, limit),
  // (u + 1) * g * sigmoid(alpha * g) (Transformers' GptOssExperts._apply_gate, in f32).
  bool clamped_swiglu = false;
  float alpha = 0.f, limit = 0.f;
};
// y [rows, H] = for each row, the sum over its experts e (route[row, e] != 0) in ascending e of
// route[row, e] * down_e(act(gate_e x) * up_e x). Each expert's rows are gathered and multiplied together
// (its weights read once per call). row_invariant (decode steps): each row's result is bit-identical to the
// row alone (matmul_rows); otherwise matmul (the prefill gemm). y must not alias x.
void moe_experts(const float* x, int64_t rows, const float* route, const MoeWeights& w, GateAct act,
                 bool row_invariant, Bf16Dot bf16, float* y);
// Index of the largest value in x[0, n) (the first one on ties; NaN is never chosen unless all are NaN).
int64_t argmax(const float* x, int64_t n);

// ---- embedding ----
// y[i, :] = table[ids[i], :] converted to f32, times `scale` (an f32 multiply) unless it is 1; table [vocab,
// dim] in dt. ids outside [0, vocab) are an internal error (the caller validates).
void embedding(const int32_t* ids, int64_t n, const void* table, DType dt, int64_t vocab, int64_t dim,
               float* y, float scale = 1.0f);

}  // namespace tessera::cpu
