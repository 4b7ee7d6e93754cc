// GGUF layout (little-endian): magic "GGUF", u32 version, u64 tensor_count,
// u64 kv_count, kv_count metadata entries, tensor_count tensor infos, padding
// to `general.alignment`, then the tensor data. Every count and length read
// from the file is checked against the bytes that remain before it is used.
#include "io/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <thread>

#include "io/gguf_quants.h"
#include "io/io_util.h"
#include "io/mapped_file.h"
#include "tessera/error.h"

namespace tessera::io {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace {

enum GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

const char* gguf_type_name(uint32_t t) {
  static const char* kNames[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                 "bool",  "string", "array",  "uint64", "int64",  "float64"};
  return t < 13 ? kNames[t] : "unknown";
}

bool is_int_type(uint32_t t) { return t <= kI32 || t == kU64 || t == kI64; }
bool is_float_type(uint32_t t) { return t == kF32 || t == kF64; }

// Smallest encoding of one value of type t (used to bound counts before allocating).
uint64_t min_value_bytes(uint32_t t) {
  switch (t) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    case kU64:
    case kI64:
    case kF64:
    case kString:
      return 8;
    case kArray:
      return 12;  // element type + count
    default:
      return 1;
  }
}

constexpr int kMaxArrayDepth = 4;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

}  // namespace

struct GgufValue {
  uint32_t type = 0;
  uint64_t bits = 0;  // integer/bool scalars; signed types sign-extended
  double f = 0;
  std::string s;
  // Arrays stay in the file image (validated, not copied): decoding them on request keeps the
  // memory a hostile file can make us allocate at parse time independent of its array counts.
  uint32_t elem_type = 0;
  uint64_t count = 0;
  uint64_t offset = 0;  // absolute offset of the first element
};

struct GgufFile::Impl {
  std::string path;
  std::shared_ptr<MappedFile> file;  // null for parse(): then the caller keeps the image alive
  const uint8_t* data = nullptr;
  size_t size = 0;
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_start = 0;
  std::map<std::string, GgufValue> kv;
  std::vector<GgufTensorInfo> tensors;  // file order
  std::map<std::string, size_t> by_name;

  const GgufValue* get(const std::string& key) const {
    auto it = kv.find(key);
    return it == kv.end() ? nullptr : &it->second;
  }
  [[noreturn]] void type_error(const std::string& key, const GgufValue& v, const char* expected) const {
    std::string got = gguf_type_name(v.type);
    if (v.type == kArray) got += std::string(" of ") + gguf_type_name(v.elem_type);
    fail(path, ": metadata key '", printable(key), "' is ", got, ", expected ", expected);
  }
};

namespace {

// Bounds-checked cursor over the file image.
class Reader {
 public:
  Reader(const uint8_t* d, size_t n, const std::string& name) : d_(d), n_(n), name_(name) {}
  size_t pos() const { return pos_; }
  uint64_t remaining() const { return n_ - pos_; }
  void need(uint64_t k, const std::string& what) const {
    if (k > remaining())
      fail(name_, ": truncated: ", what, " at offset ", pos_, " needs ", k, " bytes but only ", remaining(),
           " remain");
  }
  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, d_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const std::string& what) {
    const uint64_t len = read<uint64_t>(what + " length");
    need(len, what + " (length " + std::to_string(len) + ")");
    std::string s(reinterpret_cast<const char*>(d_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }
  void seek(size_t pos) { pos_ = pos; }
  void skip(uint64_t k, const std::string& what) {
    need(k, what);
    pos_ += static_cast<size_t>(k);
  }
  // Throws unless `count` items of at least `each` bytes can fit in what remains.
  void check_count(uint64_t count, uint64_t each, const std::string& what) const {
    if (each != 0 && count > remaining() / each)
      fail(name_, ": ", what, " count ", count, " cannot fit in the ", remaining(),
           " bytes left of the file");
  }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t pos_ = 0;
  const std::string& name_;
};

void read_value(Reader& r, uint32_t type, GgufValue* v, const std::string& what, int depth);

// Fixed size of one scalar of type t (0 for strings and arrays).
uint64_t scalar_bytes(uint32_t t) { return t == kString || t == kArray ? 0 : min_value_bytes(t); }

// Validates an array and moves past it; its elements are decoded later, on request.
void read_array(Reader& r, GgufValue* v, const std::string& what, int depth) {
  if (depth >= kMaxArrayDepth) fail(what, ": arrays nested deeper than ", kMaxArrayDepth);
  v->elem_type = r.read<uint32_t>(what + " element type");
  if (v->elem_type > kF64) fail(what, ": unknown array element type ", v->elem_type);
  v->count = r.read<uint64_t>(what + " element count");
  r.check_count(v->count, min_value_bytes(v->elem_type), what + " element");
  v->offset = r.pos();
  if (const uint64_t each = scalar_bytes(v->elem_type)) {
    r.skip(v->count * each, what + " elements");  // no overflow: check_count bounded count by the bytes left
  } else if (v->elem_type == kString) {
    for (uint64_t i = 0; i < v->count; ++i)
      r.skip(r.read<uint64_t>(what + " element length"), what + " element");
  } else {
    GgufValue inner;
    for (uint64_t i = 0; i < v->count; ++i) read_value(r, kArray, &inner, what, depth + 1);
  }
}

void read_value(Reader& r, uint32_t type, GgufValue* v, const std::string& what, int depth) {
  v->type = type;
  switch (type) {
    case kU8:
      v->bits = r.read<uint8_t>(what);
      break;
    case kI8:
      v->bits = static_cast<uint64_t>(static_cast<int64_t>(r.read<int8_t>(what)));
      break;
    case kU16:
      v->bits = r.read<uint16_t>(what);
      break;
    case kI16:
      v->bits = static_cast<uint64_t>(static_cast<int64_t>(r.read<int16_t>(what)));
      break;
    case kU32:
      v->bits = r.read<uint32_t>(what);
      break;
    case kI32:
      v->bits = static_cast<uint64_t>(static_cast<int64_t>(r.read<int32_t>(what)));
      break;
    case kU64:
      v->bits = r.read<uint64_t>(what);
      break;
    case kI64:
      v->bits = static_cast<uint64_t>(r.read<int64_t>(what));
      break;
    case kF32:
      v->f = r.read<float>(what);
      break;
    case kF64:
      v->f = r.read<double>(what);
      break;
    case kBool:
      v->bits = r.read<uint8_t>(what) != 0;
      break;
    case kString:
      v->s = r.str(what);
      break;
    case kArray:
      read_array(r, v, what, depth);
      break;
    default:
      fail(what, ": unknown value type ", type);
  }
}

void read_header(Reader& r, GgufFile::Impl& g, uint64_t* n_tensors, uint64_t* n_kv) {
  if (g.size < 4 || std::memcmp(g.data, "GGUF", 4) != 0) fail(g.path, ": not a GGUF file (bad magic)");
  r.read<uint32_t>("magic");
  g.version = r.read<uint32_t>("version");
  if (g.version != 2 && g.version != 3) {
    if (g.version != 0 && (g.version & 0xffff) == 0)
      fail(g.path, ": big-endian GGUF files are not supported");
    fail(g.path, ": unsupported GGUF version ", g.version, " (supported: 2, 3)");
  }
  *n_tensors = r.read<uint64_t>("tensor count");
  *n_kv = r.read<uint64_t>("metadata count");
  r.check_count(*n_kv, 13, "metadata key/value");  // key length + type + one byte
  r.check_count(*n_tensors, 32, "tensor info");    // name length, n_dims, one dim, type, offset
}

void read_metadata(Reader& r, GgufFile::Impl& g, uint64_t n_kv) {
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key = r.str(g.path + ": metadata key #" + std::to_string(i));
    const std::string what = g.path + ": metadata key '" + printable(key) + "'";
    const uint32_t type = r.read<uint32_t>(what + " type");
    GgufValue v;
    read_value(r, type, &v, what, 0);
    if (!g.kv.emplace(key, std::move(v)).second) fail(what, ": duplicate key");
  }
  if (const GgufValue* a = g.get("general.alignment")) {
    if (!is_int_type(a->type)) g.type_error("general.alignment", *a, "an integer");
    if (a->bits == 0 || (a->bits & (a->bits - 1)) != 0 || a->bits > (1u << 24))
      fail(g.path, ": general.alignment ", a->bits, " is not a power of two up to 2^24");
    g.alignment = a->bits;
  }
}

GgufTensorInfo read_tensor_info(Reader& r, const GgufFile::Impl& g, uint64_t i) {
  GgufTensorInfo t;
  t.name = r.str(g.path + ": tensor info #" + std::to_string(i) + " name");
  const std::string where = g.path + ": tensor '" + printable(t.name) + "'";
  const uint32_t n_dims = r.read<uint32_t>(where + " dimension count");
  if (n_dims == 0 || n_dims > kMaxDims)
    fail(where, ": ", n_dims, " dimensions (expected 1 to ", kMaxDims, ")");
  uint64_t ne[kMaxDims];
  uint64_t numel = 1,
           nonzero = 1;  // the product of the non-zero dims must fit too: shapes are multiplied in
                         // any order later ([0, 2^57, 2^30] would overflow int64 before reaching 0)
  for (uint32_t d = 0; d < n_dims; ++d) {
    ne[d] = r.read<uint64_t>(where + " dimension");
    constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (!mul_ok(numel, ne[d], &numel) || numel > kMax ||
        (ne[d] != 0 && (!mul_ok(nonzero, ne[d], &nonzero) || nonzero > kMax)))
      fail(where, ": dimensions overflow");
  }
  for (uint32_t d = n_dims; d-- > 0;) t.shape.push_back(static_cast<int64_t>(ne[d]));  // outermost first
  t.ggml_type = r.read<uint32_t>(where + " type");
  const GgmlTypeInfo* info = ggml_type_info(t.ggml_type);
  if (!info) fail(where, ": unknown GGML type id ", t.ggml_type);
  t.type_name = info->name;
  if (ne[0] % info->block_size != 0)
    fail(where, ": row length ", ne[0], " is not a multiple of the ", info->name, " block size ",
         info->block_size);
  if (!mul_ok(numel / info->block_size, info->type_size, &t.nbytes)) fail(where, ": size overflows");
  t.offset = r.read<uint64_t>(where + " offset");
  if (t.offset % g.alignment != 0)
    fail(where, ": data offset ", t.offset, " is not a multiple of the alignment ", g.alignment);
  return t;
}

// Places every tensor in the data section and checks it ends inside the file.
void place_tensors(GgufFile::Impl& g, size_t header_end) {
  uint64_t start;
  if (!add_ok(header_end, g.alignment - 1, &start)) fail(g.path, ": data offset overflows");
  g.data_start = start / g.alignment * g.alignment;
  const uint64_t avail = g.data_start <= g.size ? g.size - g.data_start : 0;
  for (auto& t : g.tensors) {
    uint64_t end;
    if (!add_ok(t.offset, t.nbytes, &end) || end > avail)
      fail(g.path, ": tensor '", printable(t.name), "' (", t.type_name, " ", shape_str(t.shape), ", ",
           t.nbytes, " bytes at data offset ", t.offset,
           ") extends past the end of the file (data section is ", avail, " bytes)");
    t.offset += g.data_start;
  }
}

void parse_into(GgufFile::Impl& g) {
  Reader r(g.data, g.size, g.path);
  uint64_t n_tensors = 0, n_kv = 0;
  read_header(r, g, &n_tensors, &n_kv);
  read_metadata(r, g, n_kv);
  r.check_count(n_tensors, 32, "tensor info");
  g.tensors.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    g.tensors.push_back(read_tensor_info(r, g, i));
    if (!g.by_name.emplace(g.tensors.back().name, i).second)
      fail(g.path, ": duplicate tensor '", printable(g.tensors.back().name), "'");
  }
  place_tensors(g, r.pos());
}

// Dequantises `nblocks` blocks into `dst` as `dtype`, in slices so the float
// scratch stays small, on a few threads for big tensors.
void dequantize_to(const GgmlTypeInfo& info, const uint8_t* src, uint64_t nblocks, DType dtype, void* dst) {
  const size_t per_chunk = std::max<size_t>(1, 8192 / info.block_size);  // blocks per scratch slice
  auto work = [&](uint64_t b0, uint64_t b1) {
    std::vector<float> tmp(per_chunk * info.block_size);  // [slice elements] f32 scratch
    for (uint64_t b = b0; b < b1; b += per_chunk) {
      const size_t nb = static_cast<size_t>(std::min<uint64_t>(per_chunk, b1 - b));
      const size_t elem0 = static_cast<size_t>(b * info.block_size);
      float* out = dtype == DType::F32 ? static_cast<float*>(dst) + elem0 : tmp.data();
      dequantize_blocks(info.id, src + b * info.type_size, out, nb);
      if (dtype != DType::F32)
        convert(tmp.data(), DType::F32, static_cast<uint8_t*>(dst) + elem0 * dtype_size(dtype), dtype,
                static_cast<int64_t>(nb * info.block_size));
    }
  };
  const uint64_t elems = nblocks * info.block_size;
  const unsigned hw = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  const unsigned nthreads = elems < (1u << 20) ? 1 : hw;
  if (nthreads == 1) return work(0, nblocks);
  std::vector<std::thread> pool;
  const uint64_t step = (nblocks + nthreads - 1) / nthreads;
  for (unsigned i = 0; i < nthreads; ++i) {
    const uint64_t b0 = std::min(nblocks, i * step), b1 = std::min(nblocks, b0 + step);
    if (b0 < b1) pool.emplace_back(work, b0, b1);
  }
  for (auto& t : pool) t.join();
}

}  // namespace

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::~GgufFile() = default;

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->file = MappedFile::open(path);
  impl->data = impl->file->data();
  impl->size = impl->file->size();
  parse_into(*impl);
  // Prefaulted when most bytes are block-quantised matrices, which stay views of the mapping; a file of
  // float matrices (F32 0, F16 1, BF16 30) is copied tensor by tensor at load, each copy handing its source
  // pages back, so faulting it all in first would only raise the load's peak by the file's size.
  uint64_t quantised = 0, total = 0;
  for (const GgufTensorInfo& t : impl->tensors) {
    total += t.nbytes;
    if (t.ggml_type != 0 && t.ggml_type != 1 && t.ggml_type != 30) quantised += t.nbytes;
  }
  if (2 * quantised >= total) impl->file->prefault();
  return std::make_shared<GgufFile>(std::move(impl));
}

std::shared_ptr<GgufFile> GgufFile::parse(const uint8_t* data, size_t size, const std::string& name) {
  auto impl = std::make_unique<Impl>();
  impl->path = name;
  impl->data = data;
  impl->size = size;
  parse_into(*impl);
  return std::make_shared<GgufFile>(std::move(impl));
}

const std::string& GgufFile::path() const { return impl_->path; }
uint32_t GgufFile::version() const { return impl_->version; }
uint64_t GgufFile::alignment() const { return impl_->alignment; }
uint64_t GgufFile::data_offset() const { return impl_->data_start; }
bool GgufFile::has(const std::string& key) const { return impl_->get(key) != nullptr; }

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : impl_->kv) out.push_back(k);
  return out;
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = impl_->get(key);
  if (!v) return std::nullopt;
  if (v->type != kString) impl_->type_error(key, *v, "a string");
  return v->s;
}

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = impl_->get(key);
  if (!v) return std::nullopt;
  if (!is_int_type(v->type)) impl_->type_error(key, *v, "an integer");
  if (v->type == kU64 && v->bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(impl_->path, ": metadata key '", printable(key), "' value ", v->bits, " does not fit in int64");
  return static_cast<int64_t>(v->bits);
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = impl_->get(key);
  if (!v) return std::nullopt;
  if (is_float_type(v->type)) return v->f;
  if (is_int_type(v->type)) return static_cast<double>(*get_int(key));
  impl_->type_error(key, *v, "a number");
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = impl_->get(key);
  if (!v) return std::nullopt;
  if (v->type != kBool) impl_->type_error(key, *v, "a bool");
  return v->bits != 0;
}

std::optional<std::vector<std::string>> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = impl_->get(key);
  if (!v) return std::nullopt;
  if (v->type != kArray || v->elem_type != kString) impl_->type_error(key, *v, "an array of strings");
  Reader r(impl_->data, impl_->size, impl_->path);
  r.seek(static_cast<size_t>(v->offset));
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(v->count));
  for (uint64_t i = 0; i < v->count; ++i) out.push_back(r.str(key));
  return out;
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = impl_->get(key);
  if (!v) return std::nullopt;
  if (v->type != kArray || !is_int_type(v->elem_type)) impl_->type_error(key, *v, "an array of integers");
  Reader r(impl_->data, impl_->size, impl_->path);
  r.seek(static_cast<size_t>(v->offset));
  std::vector<int64_t> out(static_cast<size_t>(v->count));
  GgufValue e;
  for (size_t i = 0; i < out.size(); ++i) {
    read_value(r, v->elem_type, &e, key, 1);
    if (v->elem_type == kU64 && e.bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(impl_->path, ": metadata key '", printable(key), "' element ", i, " value ", e.bits,
           " does not fit in int64");
    out[i] = static_cast<int64_t>(e.bits);
  }
  return out;
}

std::optional<std::vector<bool>> GgufFile::get_bool_array(const std::string& key) const {
  const GgufValue* v = impl_->get(key);
  if (!v) return std::nullopt;
  if (v->type != kArray || v->elem_type != kBool) impl_->type_error(key, *v, "an array of bools");
  Reader r(impl_->data, impl_->size, impl_->path);
  r.seek(static_cast<size_t>(v->offset));
  std::vector<bool> out(static_cast<size_t>(v->count));
  GgufValue e;
  for (size_t i = 0; i < out.size(); ++i) {
    read_value(r, v->elem_type, &e, key, 1);
    out[i] = e.bits != 0;
  }
  return out;
}

std::optional<std::vector<double>> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = impl_->get(key);
  if (!v) return std::nullopt;
  if (v->type != kArray || !(is_float_type(v->elem_type) || is_int_type(v->elem_type)))
    impl_->type_error(key, *v, "an array of numbers");
  Reader r(impl_->data, impl_->size, impl_->path);
  r.seek(static_cast<size_t>(v->offset));
  std::vector<double> out(static_cast<size_t>(v->count));
  const bool is_unsigned = v->elem_type == kU64;
  GgufValue e;
  for (size_t i = 0; i < out.size(); ++i) {
    read_value(r, v->elem_type, &e, key, 1);
    out[i] = is_float_type(v->elem_type) ? e.f
             : is_unsigned               ? static_cast<double>(e.bits)
                                         : static_cast<double>(static_cast<int64_t>(e.bits));
  }
  return out;
}

std::optional<uint64_t> GgufFile::array_size(const std::string& key) const {
  const GgufValue* v = impl_->get(key);
  if (!v) return std::nullopt;
  if (v->type != kArray) impl_->type_error(key, *v, "an array");
  return v->count;
}

const std::vector<GgufTensorInfo>& GgufFile::tensors() const { return impl_->tensors; }

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : &impl_->tensors[it->second];
}

Tensor GgufFile::load_tensor(const std::string& name, DType dtype) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t) fail(impl_->path, ": no tensor named '", printable(name), "'");
  const std::string where = impl_->path + ": tensor '" + printable(name) + "'";
  const GgmlTypeInfo& info = *ggml_type_info(t->ggml_type);
  if (is_quantized(dtype)) {
    if (block_dtype_of_ggml(info.name) != dtype)
      fail(where, ": stored as ", info.name, ", cannot be read as ", dtype_name(dtype));
    if (t->shape.empty() || t->shape.back() % dtype_block(dtype) != 0)
      fail(where, ": ", info.name, " tensor of shape ", shape_str(t->shape), " (rows not whole blocks)");
    const uint8_t* blocks = impl_->data + t->offset;
    if (impl_->file) return Tensor::view(dtype, t->shape, const_cast<uint8_t*>(blocks), impl_->file);
    Tensor out = Tensor::empty(dtype, t->shape);  // an in-memory image: a copy that owns its bytes
    std::memcpy(out.data, blocks, out.nbytes());
    return out;
  }
  require_float_dtype(dtype, where);
  if (!info.dequant)
    fail(where, ": GGML type ", info.name, " is not supported (supported: ", ggml_supported_types(), ")");
  const uint8_t* src = impl_->data + t->offset;  // [nbytes] raw blocks
  const bool same = (info.id == 0 && dtype == DType::F32) || (info.id == 1 && dtype == DType::F16) ||
                    (info.id == 30 && dtype == DType::BF16);
  if (same && impl_->file && reinterpret_cast<uintptr_t>(src) % dtype_size(dtype) == 0) {
    return Tensor::view(dtype, t->shape, const_cast<uint8_t*>(src), impl_->file);
  }
  Tensor out = Tensor::empty(dtype, t->shape);  // [shape] of dtype
  dequantize_to(info, src, t->nbytes / info.type_size, dtype, out.data);
  return out;
}

}  // namespace tessera::io
