// Mixture-of-experts checkpoints in the layout Transformers 5 computes with: per layer one router
// `mlp.gate.weight` [E, H] and the experts stacked, `mlp.experts.gate_up_proj` [E, 2I, H] (each expert's gate
// rows, then its up rows) and `mlp.experts.down_proj` [E, H, I]. The hub's files (and save_pretrained, which
// writes the original format by default) store one tensor per expert instead:
//   Qwen2/Qwen3-MoE: mlp.experts.<e>.gate_proj / up_proj / down_proj .weight
//   Mixtral:         block_sparse_moe.experts.<e>.w1 (gate) / w3 (up) / w2 (down) .weight, and the router
//                    block_sparse_moe.gate.weight
// This view presents such a checkpoint in the fused layout: the per-expert tensors are hidden and each
// stacked tensor is assembled at load (converted to the dtype asked, block-quantised rows copied as they
// are). gpt-oss (GptOssForCausalLM) multiplies x @ W: its mlp.experts.gate_up_proj is [E, H, 2I] with gate
// and up interleaved in the columns (gate at even ones), gate_up_proj_bias [E, 2I] likewise, down_proj
// [E, I, H]; they are presented transposed and de-interleaved: [E, 2I, H] (gate rows, then up rows), [E, 2I],
// [E, H, I].
#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <optional>

#include "io/gguf_quants.h"
#include "io/io_util.h"
#include "io/weight_source.h"
#include "tessera/error.h"

namespace tessera::io {

namespace {

struct Stack {
  // Pieces per expert: for gate_up, {gate, up}; for down, {down}.
  std::vector<std::vector<std::string>> pieces;
};

// A gpt-oss expert tensor rearranged into the fused layout (see above).
enum class OssKind : uint8_t { GateUp, GateUpBias, Down, GateUpBlocks, DownBlocks };
struct OssTensor {
  std::string stored;  // the MXFP4 kinds: <proj>_blocks; scales: <proj>_scales
  OssKind kind;
  std::string scales = {};
};

// Column r of the de-interleaved gate/up (gate rows [0, I), up rows [I, 2I)) in gpt-oss's interleaved order.
int64_t oss_column(int64_t r, int64_t I) { return r < I ? 2 * r : 2 * (r - I) + 1; }

Tensor oss_rearranged(const Tensor& in, OssKind kind, const Shape& out_shape) {
  Tensor out = Tensor::empty(in.dtype, out_shape);
  const size_t es = dtype_size(in.dtype);
  const auto* src = static_cast<const uint8_t*>(in.data);
  auto* dst = static_cast<uint8_t*>(out.data);
  const int64_t E = out_shape[0];
  if (kind == OssKind::GateUpBias) {  // [E, 2I] -> [E, 2I]
    const int64_t N = out_shape[1], I = N / 2;
    for (int64_t e = 0; e < E; ++e)
      for (int64_t r = 0; r < N; ++r)
        std::memcpy(dst + static_cast<size_t>(e * N + r) * es,
                    src + static_cast<size_t>(e * N + oss_column(r, I)) * es, es);
    return out;
  }
  // GateUp: [E, H, 2I] -> [E, 2I, H]; Down: [E, I, H] -> [E, H, I] (a transpose of each expert's matrix).
  const int64_t rows = out_shape[1], cols = out_shape[2];  // of the output; the input is [cols, rows]
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t c_in = kind == OssKind::GateUp ? oss_column(r, rows / 2) : r;
      for (int64_t c = 0; c < cols; ++c)
        std::memcpy(dst + static_cast<size_t>((e * rows + r) * cols + c) * es,
                    src + static_cast<size_t>((e * cols + c) * rows + c_in) * es, es);
    }
  return out;
}

// MXFP4 experts (see above) as GGML blocks [E, N, K] (gate_up: rows de-interleaved), from the blocks and
// scales as stored.
Tensor mxfp4_experts(const Tensor& blocks, const Tensor& scales, bool gate_up, const Shape& shape) {
  const int64_t E = shape[0], N = shape[1], nb = shape[2] / 32;
  Tensor out = Tensor::empty(DType::MXFP4, shape);
  const auto* qs = static_cast<const uint8_t*>(blocks.data);
  const auto* sc = static_cast<const uint8_t*>(scales.data);
  auto* dst = static_cast<uint8_t*>(out.data);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < N; ++r) {
      const int64_t src_row = e * N + (gate_up ? oss_column(r, N / 2) : r);
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* in = qs + static_cast<size_t>(src_row * nb + b) * 16;
        uint8_t* o = dst + static_cast<size_t>((e * N + r) * nb + b) * 17;
        o[0] = sc[src_row * nb + b];
        const auto value = [&](int i) { return i % 2 == 0 ? in[i / 2] & 0xf : in[i / 2] >> 4; };
        for (int j = 0; j < 16; ++j) o[1 + j] = static_cast<uint8_t>(value(j) | value(j + 16) << 4);
      }
    }
  return out;
}

class ExpertLayoutSource : public DerivedSource {
 public:
  ExpertLayoutSource(std::unique_ptr<WeightSource> inner, std::vector<TensorMeta> metas,
                     std::map<std::string, Stack> stacks, std::map<std::string, std::string> renamed,
                     std::map<std::string, OssTensor> oss = {})
      : DerivedSource(std::move(inner)),
        metas_(std::move(metas)),
        stacks_(std::move(stacks)),
        renamed_(std::move(renamed)),
        oss_(std::move(oss)) {}

  const std::vector<TensorMeta>& tensors() const override { return metas_; }
  const TensorMeta* find(const std::string& name) const override { return find_sorted(metas_, name); }
  Tensor load(const std::string& name, DType dtype) const override {
    if (auto r = renamed_.find(name); r != renamed_.end()) return inner_->load(r->second, dtype);
    if (auto o = oss_.find(name); o != oss_.end()) {
      const OssTensor& t = o->second;
      if (t.kind == OssKind::GateUpBlocks || t.kind == OssKind::DownBlocks) {
        Tensor q = mxfp4_experts(inner_->load(t.stored, DType::I8), inner_->load(t.scales, DType::I8),
                                 t.kind == OssKind::GateUpBlocks, find(name)->shape);
        if (dtype == DType::MXFP4) return q;
        if (is_quantized(dtype))
          fail(origin(), ": tensor '", name, "' is stored as MXFP4 blocks and cannot be loaded as ",
               dtype_name(dtype), " (load it as stored, or as float32, bfloat16 or float16)");
        Tensor f = Tensor::empty(DType::F32, q.shape);
        dequantize_blocks(ggml_type_id(DType::MXFP4), static_cast<const uint8_t*>(q.data), f.ptr<float>(),
                          static_cast<size_t>(f.numel() / 32));  // blocks of 32
        return dtype == DType::F32 ? f : to_dtype(f, dtype);
      }
      return oss_rearranged(inner_->load(t.stored, dtype), t.kind, find(name)->shape);
    }
    auto s = stacks_.find(name);
    if (s == stacks_.end()) {
      if (!find(name)) fail(origin(), ": missing tensor '", name, "'");
      return inner_->load(name, dtype);
    }
    const TensorMeta& m = *find(name);
    Tensor out = Tensor::empty(dtype, m.shape);
    auto* dst = static_cast<uint8_t*>(out.data);
    for (const auto& expert : s->second.pieces)
      for (const std::string& piece : expert) {
        const Tensor t = inner_->load(piece, dtype);
        std::memcpy(dst, t.data, t.nbytes());
        dst += t.nbytes();
      }
    TS_ASSERT(dst == static_cast<uint8_t*>(out.data) + out.nbytes(), name, ": assembled ",
              dst - static_cast<uint8_t*>(out.data), " bytes of ", out.nbytes());
    return out;
  }

 private:
  std::vector<TensorMeta> metas_;
  std::map<std::string, Stack> stacks_;
  std::map<std::string, std::string> renamed_;  // fused-layout name -> stored name
  std::map<std::string, OssTensor> oss_;        // gpt-oss expert tensors, rearranged at load
};

// gpt-oss: its expert tensors in the fused layout, dequantised ones rearranged, MXFP4 ones paired.
std::unique_ptr<WeightSource> gpt_oss_experts(std::unique_ptr<WeightSource> src) {
  std::vector<TensorMeta> metas;
  std::map<std::string, OssTensor> oss;
  for (const TensorMeta& m : src->tensors()) {
    const bool experts = m.name.find(".mlp.experts.") != std::string::npos;
    if (experts && ends_with(m.name, "_scales")) {  // read with its blocks
      if (!src->find(m.name.substr(0, m.name.size() - 7) + "_blocks"))
        fail(m.file, ": tensor '", m.name, "' has no '", m.name.substr(0, m.name.size() - 7),
             "_blocks' beside it (MXFP4 experts are stored as blocks and scales)");
      continue;
    }
    TensorMeta out = m;
    if (experts && ends_with(m.name, "_blocks")) {
      const std::string proj = m.name.substr(0, m.name.size() - 7), scales_name = proj + "_scales";
      const bool gate_up = ends_with(proj, ".gate_up_proj");
      if (!gate_up && !ends_with(proj, ".down_proj"))
        fail(m.file, ": tensor '", m.name, "': MXFP4 blocks of an unknown expert projection");
      const TensorMeta* sc = src->find(scales_name);
      if (!sc) fail(m.file, ": tensor '", m.name, "' has no '", scales_name, "' beside it");
      if (m.stored_type != "U8" || sc->stored_type != "U8")
        fail(m.file, ": tensors '", m.name, "' / '", scales_name, "' are ", m.stored_type, " / ",
             sc->stored_type, "; MXFP4 blocks and scales are U8");
      if (m.shape.size() != 4 || m.shape[3] != 16 || sc->shape != Shape{m.shape[0], m.shape[1], m.shape[2]} ||
          (gate_up && m.shape[1] % 2 != 0))
        fail(m.file, ": tensors '", m.name, "' ", shape_str(m.shape), " and '", scales_name, "' ",
             shape_str(sc->shape), ": expected [E, N, K / 32, 16] and [E, N, K / 32]",
             gate_up ? " (N even: gate and up interleaved)" : "");
      out.name = proj;
      out.shape = {m.shape[0], m.shape[1], m.shape[2] * 32};
      out.stored_type = "MXFP4";
      oss.emplace(proj,
                  OssTensor{m.name, gate_up ? OssKind::GateUpBlocks : OssKind::DownBlocks, scales_name});
    } else if (experts && m.shape.size() == 3 && ends_with(m.name, ".gate_up_proj")) {
      if (m.shape[2] % 2 != 0)
        fail(m.file, ": tensor '", m.name, "' has shape ", shape_str(m.shape),
             ": gate and up interleaved need an even last dimension");
      out.shape = {m.shape[0], m.shape[2], m.shape[1]};
      oss.emplace(m.name, OssTensor{m.name, OssKind::GateUp});
    } else if (experts && m.shape.size() == 2 && ends_with(m.name, ".gate_up_proj_bias")) {
      if (m.shape[1] % 2 != 0)
        fail(m.file, ": tensor '", m.name, "' has shape ", shape_str(m.shape),
             ": gate and up interleaved need an even last dimension");
      oss.emplace(m.name, OssTensor{m.name, OssKind::GateUpBias});
    } else if (experts && m.shape.size() == 3 && ends_with(m.name, ".down_proj")) {
      out.shape = {m.shape[0], m.shape[2], m.shape[1]};
      oss.emplace(m.name, OssTensor{m.name, OssKind::Down});
    }
    metas.push_back(std::move(out));
  }
  // "<proj>" sorts before "<proj>_bias", but the blocks were listed where "<proj>_blocks" sorts.
  std::sort(metas.begin(), metas.end(),
            [](const TensorMeta& a, const TensorMeta& b) { return a.name < b.name; });
  for (size_t i = 1; i < metas.size(); ++i)
    if (metas[i].name == metas[i - 1].name)
      fail(metas[i].file, ": tensor '", metas[i].name, "' is stored both as MXFP4 blocks and dequantised");
  if (oss.empty()) return src;
  return std::make_unique<ExpertLayoutSource>(std::move(src), std::move(metas),
                                              std::map<std::string, Stack>{},
                                              std::map<std::string, std::string>{}, std::move(oss));
}

}  // namespace

namespace {

// "model.layers.<l>." at the start of `name`: its length, or 0.
size_t layer_prefix_length(const std::string& name) {
  static const std::string kLayers = "model.layers.";
  if (name.compare(0, kLayers.size(), kLayers) != 0) return 0;
  size_t i = kLayers.size();
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  return i > kLayers.size() && i < name.size() && name[i] == '.' ? i + 1 : 0;
}

// <layer prefix>(mlp|block_sparse_moe).experts.<e>.<proj>.weight, proj one of gate_proj / up_proj / down_proj
// (Qwen-MoE) or w1 / w3 / w2 (Mixtral).
struct PerExpert {
  std::string prefix;  // "model.layers.<l>."
  int kind;            // 0 gate, 1 up, 2 down
  int64_t expert;      // -1: too many digits
};
std::optional<PerExpert> per_expert_name(const std::string& name) {
  const size_t p = layer_prefix_length(name);
  if (p == 0) return std::nullopt;
  size_t i = p;
  for (const char* block : {"mlp.experts.", "block_sparse_moe.experts."}) {
    const std::string b = block;
    if (name.compare(p, b.size(), b) == 0) i = p + b.size();
  }
  if (i == p) return std::nullopt;
  const size_t digits = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  if (i == digits || i >= name.size() || name[i] != '.') return std::nullopt;
  const std::string rest = name.substr(i + 1);
  static const std::pair<const char*, int> kProjs[] = {{"gate_proj.weight", 0}, {"w1.weight", 0},
                                                       {"up_proj.weight", 1},   {"w3.weight", 1},
                                                       {"down_proj.weight", 2}, {"w2.weight", 2}};
  for (const auto& [proj, kind] : kProjs)
    if (rest == proj)
      return PerExpert{name.substr(0, p), kind,
                       i - digits > 6 ? int64_t{-1} : std::stoll(name.substr(digits, i - digits))};
  return std::nullopt;
}

// <layer prefix>block_sparse_moe.gate.weight (Mixtral's router): the prefix.
std::optional<std::string> mixtral_router_prefix(const std::string& name) {
  const size_t p = layer_prefix_length(name);
  if (p == 0 || name.compare(p, std::string::npos, "block_sparse_moe.gate.weight") != 0) return std::nullopt;
  return name.substr(0, p);
}

}  // namespace

std::unique_ptr<WeightSource> with_fused_experts(std::unique_ptr<WeightSource> src) {
  // gpt-oss's layout is told apart by its architecture ([E, H, 2I] could read as [E, 2I, H] when H = 2I).
  if (src->config_json().find("\"GptOssForCausalLM\"") != std::string::npos)
    return gpt_oss_experts(std::move(src));
  // layer prefix -> kind (0 gate, 1 up, 2 down) -> expert -> tensor
  std::map<std::string, std::array<std::map<int64_t, const TensorMeta*>, 3>> found;
  std::map<std::string, std::string> renamed;
  std::vector<TensorMeta> metas;
  for (const TensorMeta& m : src->tensors()) {
    if (const auto e = per_expert_name(m.name)) {
      if (e->expert < 0) fail(m.file, ": tensor '", m.name, "': expert index out of range");
      found[e->prefix + "mlp."][static_cast<size_t>(e->kind)][e->expert] = &m;
      continue;
    }
    if (const auto prefix = mixtral_router_prefix(m.name)) {
      TensorMeta r = m;
      r.name = *prefix + "mlp.gate.weight";
      renamed[r.name] = m.name;
      metas.push_back(std::move(r));
      continue;
    }
    metas.push_back(m);
  }
  if (found.empty() && renamed.empty()) return src;
  std::map<std::string, Stack> stacks;
  static const char* const kKind[] = {"gate_proj (w1)", "up_proj (w3)", "down_proj (w2)"};
  for (const auto& [prefix, kinds] : found) {
    const int64_t experts = static_cast<int64_t>(kinds[0].size());
    const TensorMeta* first[3] = {};
    for (int k = 0; k < 3; ++k) {
      const auto& by_e = kinds[static_cast<size_t>(k)];
      if (by_e.empty())
        fail(src->origin(), ": layer '", prefix, "' stores experts one tensor each but has no expert ",
             kKind[k]);
      for (int64_t e = 0; e < static_cast<int64_t>(by_e.size()); ++e)
        if (!by_e.count(e))
          fail(src->origin(), ": missing tensor '", prefix, "experts.", e, ".", kKind[k],
               ".weight' (the layer stores experts 0 to ", by_e.rbegin()->first, " one tensor each)");
      if (static_cast<int64_t>(by_e.size()) != experts)
        fail(src->origin(), ": layer '", prefix, "' has ", experts, " expert gate tensors but ", by_e.size(),
             " expert ", kKind[k], " tensors");
      first[k] = by_e.begin()->second;
      for (const auto& [e, m] : by_e) {
        if (m->shape.size() != 2 || m->shape != first[k]->shape)
          fail(m->file, ": tensor '", m->name, "' has shape ", shape_str(m->shape), ", expert 0's has ",
               shape_str(first[k]->shape));
        if (m->stored_type != first[k]->stored_type)
          fail(m->file, ": tensor '", m->name, "' is stored as ", m->stored_type, ", expert 0's as ",
               first[k]->stored_type, " (the experts are stacked into one tensor)");
      }
    }
    const int64_t I = first[0]->shape[0], H = first[0]->shape[1];
    if (first[1]->shape != first[0]->shape)
      fail(first[1]->file, ": tensor '", first[1]->name, "' has shape ", shape_str(first[1]->shape),
           ", the gate's is ", shape_str(first[0]->shape));
    if (first[2]->shape != Shape{H, I})
      fail(first[2]->file, ": tensor '", first[2]->name, "' has shape ", shape_str(first[2]->shape),
           ", expected ", shape_str(Shape{H, I}), " (the gate's transposed)");
    if (first[1]->stored_type != first[0]->stored_type || first[2]->stored_type != first[0]->stored_type)
      fail(src->origin(), ": layer '", prefix, "' stores its experts' gate, up and down in different types (",
           first[0]->stored_type, ", ", first[1]->stored_type, ", ", first[2]->stored_type, ")");
    Stack gate_up, down;
    for (int64_t e = 0; e < experts; ++e) {
      gate_up.pieces.push_back({kinds[0].at(e)->name, kinds[1].at(e)->name});
      down.pieces.push_back({kinds[2].at(e)->name});
    }
    const std::string gu = prefix + "experts.gate_up_proj", dn = prefix + "experts.down_proj";
    metas.push_back({gu, {experts, 2 * I, H}, first[0]->stored_type, first[0]->file});
    metas.push_back({dn, {experts, H, I}, first[0]->stored_type, first[2]->file});
    stacks.emplace(gu, std::move(gate_up));
    stacks.emplace(dn, std::move(down));
  }
  std::sort(metas.begin(), metas.end(),
            [](const TensorMeta& a, const TensorMeta& b) { return a.name < b.name; });
  for (size_t i = 1; i < metas.size(); ++i)
    if (metas[i].name == metas[i - 1].name)
      fail(src->origin(), ": tensor '", metas[i].name, "' is stored both fused and one expert at a time");
  return std::make_unique<ExpertLayoutSource>(std::move(src), std::move(metas), std::move(stacks),
                                              std::move(renamed));
}

}  // namespace tessera::io
