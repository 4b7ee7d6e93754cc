#include "runtime/weight_loader.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "io/io_util.h"
#include "io/mapped_file.h"
#include "tessera/error.h"

namespace tessera::runtime {

namespace {

std::string join_names(const std::vector<std::string>& names, size_t limit) {
  std::ostringstream os;
  for (size_t i = 0; i < names.size() && i < limit; ++i) os << (i ? ", " : "") << names[i];
  if (names.size() > limit) os << ", ... (" << names.size() << " in all)";
  return os.str();
}

// "model.layers.<N>." -> N, or -1 for any other name (N capped, so a huge index cannot overflow).
int64_t layer_index(const std::string& name) {
  static const std::string kPrefix = "model.layers.";
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return -1;
  int64_t n = 0;
  size_t i = kPrefix.size();
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && i < kPrefix.size() + 12; ++i)
    n = n * 10 + (name[i] - '0');
  if (i == kPrefix.size() || i >= name.size() || name[i] != '.') return -1;
  return n;
}

void validate_checkpoint(const io::WeightSource& src, const models::Architecture& arch,
                         const models::DecoderConfig& c) {
  std::set<std::string> needed;
  for (const auto& w : arch.weights(c)) {
    needed.insert(w.name);
    const io::TensorMeta* m = src.find(w.name);
    if (!m) fail(src.origin(), ": missing tensor '", w.name, "' required by ", arch.name);
    if (m->shape != w.shape)
      fail(m->file, ": tensor '", w.name, "' has shape ", shape_str(m->shape), ", expected ",
           shape_str(w.shape), " from the config");
  }
  std::vector<std::string> unexpected;
  for (const auto& m : src.tensors()) {
    if (needed.count(m.name)) continue;
    if (m.name == "lm_head.weight" && c.tie_word_embeddings) continue;  // tied: the embedding is used
    bool ignorable = false;
    for (const auto& s : arch.ignorable_suffixes) ignorable = ignorable || io::ends_with(m.name, s);
    for (const auto& p : arch.ignorable_prefixes) ignorable = ignorable || m.name.rfind(p, 0) == 0;
    if (!ignorable) unexpected.push_back(m.name);
  }
  if (!unexpected.empty())
    fail(src.origin(), ": unexpected tensors for ", arch.name, ": ", join_names(unexpected, 5));
  // GGUF tensors with no Hugging Face counterpart change the model's math (e.g. rope_freqs.weight carries
  // Llama 3.1's rope scaling); running without them would be silently wrong.
  if (!src.unmapped_tensors().empty())
    fail(src.origin(), ": GGUF tensors not supported yet: ", join_names(src.unmapped_tensors(), 5));
}

}  // namespace

void check_checkpoint_matches_config(const io::WeightSource& src, const models::DecoderConfig& c) {
  int64_t layers = 0;  // 1 + the highest layer index with a tensor
  for (const auto& m : src.tensors()) layers = std::max(layers, layer_index(m.name) + 1);
  if (layers < c.num_layers)
    fail(src.origin(), ": missing tensor 'model.layers.", layers, ".*': the config says num_hidden_layers ",
         c.num_layers, ", the checkpoint has tensors for ", layers, " layer", layers == 1 ? "" : "s");
  if (layers > c.num_layers)
    fail(src.origin(), ": unexpected tensors 'model.layers.", c.num_layers,
         ".*': the config says num_hidden_layers ", c.num_layers, ", the checkpoint has tensors for ", layers,
         " layers");
  const io::TensorMeta* embed = src.find("model.embed_tokens.weight");
  if (!embed) fail(src.origin(), ": missing tensor 'model.embed_tokens.weight'");
  const Shape want{c.vocab_size, c.hidden_size};
  if (embed->shape != want)
    fail(embed->file, ": tensor 'model.embed_tokens.weight' has shape ", shape_str(embed->shape),
         ", expected ", shape_str(want), " from the config (vocab_size x hidden_size)");
}

namespace {

// A copy of t that owns its bytes. release: t is a view of a file mapping that the copy replaces, whose pages
// are then handed back (io::release_pages), so a GGUF whose matrices are stored as-is (bf16, f16, f32) peaks
// near one copy of its weights, not the prefaulted mapping plus every copy.
Tensor owned_copy(const Tensor& t, bool release = false) {
  Tensor copy = Tensor::empty(t.dtype, t.shape);
  std::memcpy(copy.data, t.data, t.nbytes());
  if (release) io::release_pages(t.data, t.nbytes());
  return copy;
}

// `name` quantised at load (--dtype q8_0 / q4_0 / q4_k): read as float32, then quantised row by row.
Tensor quantized_copy(const io::WeightSource& src, const std::string& name, DType q) {
  const Tensor f = src.load(name, DType::F32);
  Tensor out = Tensor::empty(q, f.shape);
  try {
    quantize_rows(f.ptr<float>(), f.numel() / f.shape.back(), f.shape.back(), q, out.data);
  } catch (const Error& e) {
    fail(src.find(name)->file, ": tensor '", name, "': ", e.what());
  }
  return out;
}

}  // namespace

Tensor apply_view(const Tensor& full, const graph::WeightView& v, const Shape& local, int rank,
                  bool zero_copy) {
  if (v.rank0_only && rank != 0) return Tensor::empty(full.dtype, local);
  if (v.offset != 0.f) {  // a float32 vector plus a constant (Gemma's 1 + weight), computed in float32
    TS_ASSERT(full.dtype == DType::F32 && full.shape.size() == 1 && local == full.shape && v.rows < 0 &&
                  v.split_dim < 0 && v.rope_head == 0,
              "offset view of ", shape_str(full.shape));
    Tensor out = Tensor::empty(DType::F32, local);
    for (int64_t i = 0; i < local[0]; ++i) out.ptr<float>()[i] = full.ptr<float>()[i] + v.offset;
    return out;
  }
  if (v.whole() || (v.rank0_only && v.rows < 0 && v.split_dim < 0 && v.rope_head == 0 && v.group == 0))
    return full;
  if (full.shape.size() == 3 || v.stacked) {
    // Stacked experts: the view of each expert's [out, in] matrix (or [N] vector), in order.
    TS_ASSERT(local.size() == full.shape.size() && local.size() >= 2 && local[0] == full.shape[0], "view of ",
              shape_str(full.shape), " as ", shape_str(local));
    const Shape matrix(full.shape.begin() + 1, full.shape.end()), part(local.begin() + 1, local.end());
    const size_t in_bytes = dtype_bytes(full.dtype, shape_numel(matrix));
    const size_t out_bytes = dtype_bytes(full.dtype, shape_numel(part));
    graph::WeightView each = v;
    each.stacked = false;
    Tensor out = Tensor::empty(full.dtype, local);
    for (int64_t e = 0; e < full.shape[0]; ++e) {
      const Tensor m =
          Tensor::view(full.dtype, matrix, static_cast<uint8_t*>(full.data) + e * in_bytes, full.owner);
      const Tensor p = apply_view(m, each, part, rank, false);
      std::memcpy(static_cast<uint8_t*>(out.data) + e * out_bytes, p.data, out_bytes);
    }
    return out;
  }
  const int64_t stored_cols = full.shape.size() > 1 ? full.shape[1] : 1;
  int64_t row0 = v.rows >= 0 ? v.row_begin : 0, col0 = 0;
  const int64_t rows = local[0], cols = local.size() > 1 ? local[1] : 1;
  // packed > 1: the selected rows form `packed` equal parts, each split; this rank's block of every part.
  const int64_t part_rows = rows / v.packed, part_stride = (v.rows >= 0 ? v.rows : full.shape[0]) / v.packed;
  TS_ASSERT(v.packed >= 1 && rows % v.packed == 0, "view of ", shape_str(full.shape), " in ", v.packed,
            " parts");
  if (v.split_dim == 0) row0 += rank * part_rows;
  if (v.split_dim == 1) col0 = rank * cols;
  TS_ASSERT(row0 >= 0 && row0 + (v.packed - 1) * part_stride + part_rows <= full.shape[0] && col0 >= 0 &&
                col0 + cols <= stored_cols,
            "view of ", shape_str(full.shape));
  // Byte offsets through dtype_bytes: block-quantised rows split only at whole blocks (the graph keeps a
  // column block that is not whole blocks in a float dtype).
  const int64_t blk = dtype_block(full.dtype);
  TS_ASSERT(col0 % blk == 0 && cols % blk == 0, "column block of ", dtype_name(full.dtype), " ",
            shape_str(full.shape), " at ", col0, " of ", cols);
  const size_t stored_row_bytes = dtype_bytes(full.dtype, stored_cols);
  auto* base = static_cast<uint8_t*>(full.data);
  const int64_t taken = v.taken_per_group(), groups = taken > 0 ? rows / taken : 0;
  bool takes_fit = true;
  for (const graph::WeightView::Take& t : v.takes) takes_fit = takes_fit && t.begin + t.rows <= v.group;
  TS_ASSERT(v.group == 0 || (v.split_dim < 0 && v.packed == 1 && v.rope_head == 0 && taken > 0 && takes_fit &&
                             rows % taken == 0 && row0 + groups * v.group <= full.shape[0]),
            "grouped view of ", shape_str(full.shape), " as ", shape_str(local));
  if (zero_copy && cols == stored_cols && v.rope_head == 0 && v.packed == 1 && v.group == 0)
    return Tensor::view(full.dtype, local, base + static_cast<size_t>(row0) * stored_row_bytes, full.owner);
  Tensor out = Tensor::empty(full.dtype, local);
  auto* dst = static_cast<uint8_t*>(out.data);
  const size_t row_bytes = dtype_bytes(full.dtype, cols);
  for (int64_t r = 0; r < rows; ++r) {
    // Interleaved rotary rows (2i, 2i+1) of each head's first rope_rot rows go to i and i + rope_rot / 2.
    int64_t src_r = r;
    if (v.packed > 1) src_r = (r / part_rows) * part_stride + r % part_rows;
    if (v.group > 0) src_r = v.grouped_row(r, groups);
    if (v.rope_head > 0) {
      const int64_t head = r / v.rope_head, j = r % v.rope_head, half = v.rope_rot / 2;
      if (j < v.rope_rot) src_r = head * v.rope_head + (j < half ? 2 * j : 2 * (j - half) + 1);
    }
    std::memcpy(dst + static_cast<size_t>(r) * row_bytes,
                base + static_cast<size_t>(row0 + src_r) * stored_row_bytes + dtype_bytes(full.dtype, col0),
                row_bytes);
  }
  return out;
}

backends::WeightMap load_weights(const io::WeightSource& src, const models::Architecture& arch,
                                 const models::DecoderConfig& c, DType dtype,
                                 const std::function<void(size_t, size_t)>& progress, size_t& bytes) {
  validate_checkpoint(src, arch, c);
  // What this rank's graphs read: every weight node of a small graph with the same tensor-parallel layout.
  graph::ShapeKey key{.phase = graph::Phase::Decode, .batch = 1, .seq = 1, .cache_len = 1, .dtype = dtype};
  key.tp_rank = c.tp.rank;
  key.tp_size = c.tp.size;
  const graph::Graph g = arch.build_graph(c, key);
  std::map<std::string, std::vector<const graph::Node*>>
      by_tensor;  // stored name -> its views, in graph order
  std::set<std::string> keys;
  std::vector<std::string> order;
  for (const auto& n : g.nodes) {
    if (n.op != graph::Op::Weight || !keys.insert(graph::weight_key(n)).second) continue;
    if (by_tensor[n.name].empty()) order.push_back(n.name);
    by_tensor[n.name].push_back(&n);
  }
  backends::WeightMap weights;
  bytes = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const std::string& name = order[i];
    const auto& views = by_tensor[name];
    const DType dt = views.front()->dtype;
    for (const auto* n : views)
      TS_ASSERT(n->dtype == dt, name, " read as ", dtype_name(dt), " and as ", dtype_name(n->dtype));
    // A GGUF's float tensors are converted copies but for a few stored as-is (norms); copying those too lets
    // the mapping go once loading is done instead of staying resident for them. Its block-quantised matrices
    // kept as blocks are most of the file: they stay views of the mapping (a copy would hold every byte twice
    // at the peak of the load, the copy and the page cache's mapped pages).
    const bool mapped = io::loads_as_stored(src.find(name)->stored_type, dt);
    const bool zero_copy = mapped && (!src.gguf() || is_quantized(dt));
    // A tensor read only as zeros (a row-parallel bias off rank 0) is never loaded.
    bool only_zeros = c.tp.rank != 0;
    for (const auto* n : views) only_zeros = only_zeros && n->view.rank0_only;
    Tensor full = only_zeros                    ? Tensor{dt, views.front()->view.stored, nullptr, nullptr}
                  : is_quantized(dt) && !mapped ? quantized_copy(src, name, dt)
                                                : src.load(name, dt);
    // When some node reads the whole tensor (a tied embedding), the others' row blocks alias it; from a GGUF
    // it is owned first, so they alias that copy and not the mapping.
    bool whole_kept = false;
    for (const auto* n : views) whole_kept = whole_kept || n->view.whole();
    const bool unmap =
        mapped && !zero_copy && !only_zeros;  // a GGUF tensor stored as-is: must not keep the mapping
    if (unmap && whole_kept) full = owned_copy(full, true);
    for (const auto* n : views) {
      Tensor t = apply_view(full, n->view, n->shape, c.tp.rank, zero_copy || whole_kept);
      if (unmap && !whole_kept && t.owner == full.owner)
        t = owned_copy(t, true);  // a view apply_view passed through
      const bool aliases = whole_kept && !n->view.whole() && t.owner == full.owner && full.owner;
      if (!aliases) bytes += t.nbytes();
      weights.emplace(graph::weight_key(*n), std::move(t));
    }
    if (progress) progress(i + 1, order.size());
  }
  return weights;
}

}  // namespace tessera::runtime
