// Mixture-of-experts checkpoints in the layout Transformers 5 computes with: per layer one router
// `mlp.gate.weight` [E, H] and the experts stacked, `mlp.experts.gate_up_proj` [E, 2I, H] (each expert's gate
// rows, then its up rows) and `mlp.experts.down_proj` [E, H, I]. The hub's files (and save_pretrained, which
// writes the original format by default) store one tensor per expert instead:
//   Qwen2/Qwen3-MoE: mlp.experts.<e>.gate_proj / up_proj / down_proj .weight
//   Mixtral:         block_sparse_moe.experts.<e>.w1 (gate) / w3 (up) / w2 (down) .weight, and the router
//                    block_sparse_moe.gate.weight
// This view presents such a checkpoint in the fused layout: the per-expert tensors are hidden and each
// stacked tensor is assembled at load (converted to the dtype asked, block-quantised rows copied as they
// are).
#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <regex>

#include "io/weight_source.h"
#include "tessera/error.h"

namespace tessera::io {

namespace {

struct Stack {
  // Pieces per expert: for gate_up, {gate, up}; for down, {down}.
  std::vector<std::vector<std::string>> pieces;
};

class ExpertLayoutSource : public WeightSource {
 public:
  ExpertLayoutSource(std::unique_ptr<WeightSource> inner, std::vector<TensorMeta> metas,
                     std::map<std::string, Stack> stacks, std::map<std::string, std::string> renamed)
      : inner_(std::move(inner)),
        metas_(std::move(metas)),
        stacks_(std::move(stacks)),
        renamed_(std::move(renamed)) {}

  const std::vector<TensorMeta>& tensors() const override { return metas_; }
  const TensorMeta* find(const std::string& name) const override {
    auto it = std::lower_bound(metas_.begin(), metas_.end(), name,
                               [](const TensorMeta& m, const std::string& n) { return m.name < n; });
    return it != metas_.end() && it->name == name ? &*it : nullptr;
  }
  Tensor load(const std::string& name, DType dtype) const override {
    if (auto r = renamed_.find(name); r != renamed_.end()) return inner_->load(r->second, dtype);
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
  const std::string& config_json() const override { return inner_->config_json(); }
  const std::string& generation_config_json() const override { return inner_->generation_config_json(); }
  const std::string& origin() const override { return inner_->origin(); }
  const std::vector<std::string>& unmapped_tensors() const override { return inner_->unmapped_tensors(); }
  std::shared_ptr<const GgufFile> gguf() const override { return inner_->gguf(); }

 private:
  std::unique_ptr<WeightSource> inner_;
  std::vector<TensorMeta> metas_;
  std::map<std::string, Stack> stacks_;
  std::map<std::string, std::string> renamed_;  // fused-layout name -> stored name
};

}  // namespace

std::unique_ptr<WeightSource> with_fused_experts(std::unique_ptr<WeightSource> src) {
  // <layer prefix>(mlp|block_sparse_moe).experts.<e>.<proj>.weight
  static const std::regex kExpert(
      R"(^(model\.layers\.\d+\.)(mlp|block_sparse_moe)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj|w1|w2|w3)\.weight$)");
  static const std::regex kRouter(R"(^(model\.layers\.\d+\.)block_sparse_moe\.gate\.weight$)");
  // layer prefix -> kind (0 gate, 1 up, 2 down) -> expert -> tensor
  std::map<std::string, std::array<std::map<int64_t, const TensorMeta*>, 3>> found;
  std::map<std::string, std::string> renamed;
  std::vector<TensorMeta> metas;
  for (const TensorMeta& m : src->tensors()) {
    std::smatch g;
    if (m.name.find(".experts.") != std::string::npos && std::regex_match(m.name, g, kExpert)) {
      const std::string proj = g[4];
      const int kind = proj == "gate_proj" || proj == "w1" ? 0 : proj == "up_proj" || proj == "w3" ? 1 : 2;
      const std::string e = g[3];
      if (e.size() > 6) fail(m.file, ": tensor '", m.name, "': expert index out of range");
      found[g[1].str() + "mlp."][static_cast<size_t>(kind)][std::stoll(e)] = &m;
      continue;
    }
    if (m.name.find("block_sparse_moe.gate.") != std::string::npos && std::regex_match(m.name, g, kRouter)) {
      TensorMeta r = m;
      r.name = g[1].str() + "mlp.gate.weight";
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
