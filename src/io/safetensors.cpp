#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>

#include "io/io_util.h"
#include "io/json_util.h"
#include "tessera/error.h"

namespace tessera::io {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation also caps at 100 MB
// Tensors one file may list. The most tensor-heavy released checkpoints (MoE models with per-expert weights)
// hold under 100k tensors in all, split over many shards; 2^18 in one file is generous and keeps parsing,
// sorting and validating a hostile header well under a second.
constexpr size_t kMaxTensorsPerFile = size_t{1} << 18;

// "file: tensor 'name'" for messages, built only when one is thrown (headers can hold 10^5+ entries).
struct Where {
  const std::string& file;
  const std::string& name;
};
std::ostream& operator<<(std::ostream& os, const Where& w) {
  return os << w.file << ": tensor '" << printable(w.name) << "'";
}

// Reads a non-negative integer from a JSON value; throws with `what` on anything else.
uint64_t json_uint(const json& j, const Where& where, const char* what) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer()) fail(where, ": ", what, " is negative (", j.get<int64_t>(), ")");
  fail(where, ": ", what, " is not a non-negative integer (got ", j.type_name(), ")");
}

SafetensorsEntry parse_entry(const std::string& tname, const json& j, const std::string& file) {
  const Where where{file, tname};
  if (!j.is_object()) fail(where, ": header entry is a JSON ", j.type_name(), ", expected an object");
  SafetensorsEntry e;
  e.name = tname;
  auto dt = j.find("dtype");
  if (dt == j.end()) fail(where, ": missing 'dtype'");
  if (!dt->is_string()) fail(where, ": 'dtype' is a JSON ", dt->type_name(), ", expected a string");
  e.dtype = dt->get<std::string>();
  const size_t esize = safetensors_dtype_size(e.dtype);
  if (esize == 0) fail(where, ": unknown dtype '", printable(e.dtype), "'");

  auto sh = j.find("shape");
  if (sh == j.end()) fail(where, ": missing 'shape'");
  if (!sh->is_array()) fail(where, ": 'shape' is a JSON ", sh->type_name(), ", expected an array");
  if (sh->size() > 8) fail(where, ": shape has ", sh->size(), " dimensions (at most 8 supported)");
  uint64_t numel = 1,
           nonzero = 1;  // the non-zero dims' product must fit too (shapes are multiplied in any order)
  for (const json& d : *sh) {
    const uint64_t v = json_uint(d, where, "shape dimension");
    constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (v > kMax || !mul_ok(numel, v, &numel) || numel > kMax ||
        (v != 0 && (!mul_ok(nonzero, v, &nonzero) || nonzero > kMax)))
      fail(where, ": shape ", sh->dump(), " has too many elements");
    e.shape.push_back(static_cast<int64_t>(v));
  }

  auto off = j.find("data_offsets");
  if (off == j.end()) fail(where, ": missing 'data_offsets'");
  if (!off->is_array() || off->size() != 2) fail(where, ": 'data_offsets' must be an array [begin, end]");
  e.begin = json_uint((*off)[0], where, "data_offsets begin");
  e.end = json_uint((*off)[1], where, "data_offsets end");
  if (e.end < e.begin) fail(where, ": data_offsets [", e.begin, ", ", e.end, "] end before they begin");
  uint64_t expected = 0;
  if (!mul_ok(numel, esize, &expected)) fail(where, ": shape ", shape_str(e.shape), " is too large");
  if (e.end - e.begin != expected)
    fail(where, ": data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin, " bytes but ", e.dtype,
         " ", shape_str(e.shape), " needs ", expected);
  return e;
}

void parse_metadata(const json& j, const std::string& file, std::map<std::string, std::string>* out) {
  if (!j.is_object()) fail(file, ": '__metadata__' is a JSON ", j.type_name(), ", expected an object");
  for (const auto& [k, v] : j.items()) {
    // The format says string -> string; other values are kept in their JSON form.
    (*out)[k] = v.is_string() ? v.get<std::string>() : v.dump();
  }
}

// Tensors must not share bytes (zero-sized ones hold none).
void check_overlaps(const SafetensorsHeader& h, const std::string& file) {
  std::vector<const SafetensorsEntry*> by_begin;
  for (const auto& e : h.tensors)
    if (e.end > e.begin) by_begin.push_back(&e);
  std::sort(by_begin.begin(), by_begin.end(),
            [](auto* a, auto* b) { return a->begin != b->begin ? a->begin < b->begin : a->name < b->name; });
  const SafetensorsEntry* reach = nullptr;  // the entry reaching furthest so far
  for (const auto* e : by_begin) {
    if (reach && e->begin < reach->end)
      fail(file, ": tensor '", printable(e->name), "': data_offsets [", e->begin, ", ", e->end,
           "] overlap tensor '", printable(reach->name), "' [", reach->begin, ", ", reach->end, "]");
    if (!reach || e->end > reach->end) reach = e;
  }
}

// Streams the header: each top-level value (one tensor entry, or __metadata__) is built as a small
// JSON value, handed to `on_value`, and freed, so the header is never held as one DOM (a 600k-entry
// header as a DOM took ~500 MB and seconds to build and free).
template <typename OnValue>  // void(const std::string& key, json& value)
class HeaderSax {
 public:
  HeaderSax(const std::string& file, OnValue on_value) : file_(file), on_value_(std::move(on_value)) {}

  bool null() { return scalar(json(nullptr)); }
  bool boolean(bool v) { return scalar(json(v)); }
  bool number_integer(json::number_integer_t v) { return scalar(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return scalar(json(v)); }
  bool number_float(json::number_float_t v, const std::string&) { return scalar(json(v)); }
  bool string(std::string& v) { return scalar(json(std::move(v))); }
  bool binary(json::binary_t&) { return scalar(json(nullptr)); }  // not produced by the JSON parser
  bool start_object(std::size_t) {
    if (!top_started_) {
      top_started_ = true;
      return true;
    }
    open(json::object());
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t) {
    if (!top_started_) fail(file_, ": header is a JSON array, expected an object");
    open(json::array());
    return true;
  }
  bool end_array() { return close(); }
  bool key(std::string& k) {
    if (stack_.empty())
      top_key_ = std::move(k);
    else
      inner_key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    fail(file_, ": header is not valid JSON (", printable(json_error_text(e), 300), ")");
  }

 private:
  json* add(json v) {
    // Bound what one value may make us build before it is checked: an entry needs 6 JSON values, and
    // metadata maps strings to strings (a 100 MB array as one value would otherwise become a ~1.6 GB DOM).
    if (top_key_ == "__metadata__") {
      if (stack_.size() == 1 && (v.is_array() || v.is_object()))
        fail(file_, ": '__metadata__' value '", printable(inner_key_), "' is a JSON ", v.type_name(),
             ", expected a string");
      if (stack_.empty() && !v.is_object())
        fail(file_, ": '__metadata__' is a JSON ", v.type_name(), ", expected an object");
    } else if (++values_ > kMaxEntryValues) {
      fail(file_, ": tensor '", printable(top_key_), "': header entry holds more than ", kMaxEntryValues,
           " JSON values (a tensor entry is {dtype, shape, data_offsets})");
    }
    if (stack_.empty()) {
      value_ = std::move(v);
      return &value_;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    return &(parent[inner_key_] = std::move(v));
  }
  bool scalar(json v) {
    if (!top_started_) fail(file_, ": header is a JSON ", v.type_name(), ", expected an object");
    add(std::move(v));
    if (stack_.empty()) finish();
    return true;
  }
  void finish() {
    on_value_(top_key_, value_);
    value_ = nullptr;
    values_ = 0;
  }
  void open(json v) { stack_.push_back(add(std::move(v))); }
  bool close() {
    if (stack_.empty()) return true;  // the end of the top-level object
    stack_.pop_back();
    if (stack_.empty()) finish();
    return true;
  }

  static constexpr int kMaxEntryValues = 64;
  const std::string& file_;
  OnValue on_value_;
  int values_ = 0;  // JSON values in the entry being built
  bool top_started_ = false;
  std::string top_key_, inner_key_;
  json value_;                // the top-level value being built
  std::vector<json*> stack_;  // its open containers, innermost last
};

// Sorts by name in place; of entries sharing a name the last in the file wins, as when the header is read
// into a map. Sorts indices and permutes once, so no second copy of the entries is made.
void sort_unique_by_name(std::vector<SafetensorsEntry>& v) {
  std::vector<uint32_t> order(v.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  auto less = [&](uint32_t a, uint32_t b) {  // one three-way compare; ties by file position
    const int c = v[a].name.compare(v[b].name);
    return c != 0 ? c < 0 : a < b;
  };
  if (!std::is_sorted(order.begin(), order.end(), less)) std::sort(order.begin(), order.end(), less);
  // Drop all but the last of each name, then move entries into place following the permutation's cycles.
  size_t n = 0;
  for (size_t i = 0; i < order.size(); ++i)
    if (i + 1 == order.size() || v[order[i + 1]].name != v[order[i]].name) order[n++] = order[i];
  order.resize(n);
  std::vector<SafetensorsEntry> out;
  if (n == v.size()) {  // a permutation: apply it in place
    std::vector<uint8_t> done(n, 0);
    for (size_t i = 0; i < n; ++i) {
      if (done[i] || order[i] == i) continue;
      SafetensorsEntry tmp = std::move(v[i]);
      size_t j = i;
      while (order[j] != i) {
        v[j] = std::move(v[order[j]]);
        done[j] = 1;
        j = order[j];
      }
      v[j] = std::move(tmp);
      done[j] = 1;
    }
    return;
  }
  out.reserve(n);  // duplicates were dropped (rare): rebuild
  for (uint32_t i : order) out.push_back(std::move(v[i]));
  v = std::move(out);
}

}  // namespace

size_t safetensors_dtype_size(const std::string& dt) {
  static const std::map<std::string, size_t> kSizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},  {"I32", 4},     {"I16", 2},    {"I8", 1},
      {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = kSizes.find(dt);
  return it == kSizes.end() ? 0 : it->second;
}

const SafetensorsEntry* SafetensorsHeader::find(const std::string& name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const SafetensorsEntry& e, const std::string& n) { return e.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& file) {
  if (size < 8) fail(file, ": file is ", size, " bytes, too short for a safetensors header");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];  // little-endian
  if (n > size - 8)
    fail(file, ": header length ", n, " extends past the end of the file (size ", size,
         "); truncated or not a safetensors file");
  if (n > kMaxHeaderBytes) fail(file, ": header length ", n, " exceeds the 100 MB limit");
  if (n < 2) fail(file, ": header length ", n, " is too small for a JSON object");

  const std::string_view text(reinterpret_cast<const char*>(data) + 8, static_cast<size_t>(n));
  // No depth pre-scan needed: the SAX parser does not recurse, and HeaderSax builds at most 64 values per
  // entry and no containers inside __metadata__, so nothing deep is ever built, dumped or walked.
  SafetensorsHeader h;
  h.data_start = 8 + n;
  h.data_size = size - h.data_start;
  // Each entry is an object: reserving for the count of '{' (an upper bound, capped by the ~40 bytes of JSON
  // an entry needs) avoids the vector's doubling, which briefly holds 3x the entries, on huge headers.
  const auto braces = static_cast<size_t>(std::count(text.begin(), text.end(), '{'));
  h.tensors.reserve(std::min<size_t>(braces, text.size() / 40 + 1));
  auto on_value = [&](const std::string& k, json& v) {
    if (k == "__metadata__") {
      parse_metadata(v, file, &h.metadata);
      return;
    }
    if (h.tensors.size() == kMaxTensorsPerFile)
      fail(file, ": header lists more than ", kMaxTensorsPerFile,
           " tensors (no checkpoint file holds that many)");
    SafetensorsEntry e = parse_entry(k, v, file);
    if (e.end > h.data_size)
      fail(file, ": tensor '", printable(k), "': data_offsets [", e.begin, ", ", e.end,
           "] extend past the end of the data (size ", h.data_size, ")");
    h.tensors.push_back(std::move(e));
  };
  HeaderSax<decltype(on_value)> sax(file, on_value);
  json::sax_parse(text.begin(), text.end(), &sax);
  sort_unique_by_name(h.tensors);
  check_overlaps(h, file);
  return h;
}

namespace {

bool stored_float_dtype(const std::string& s, DType* out) {
  if (s == "F32")
    *out = DType::F32;
  else if (s == "BF16")
    *out = DType::BF16;
  else if (s == "F16")
    *out = DType::F16;
  else
    return false;
  return true;
}

}  // namespace

Tensor load_safetensors_tensor(const uint8_t* data, const SafetensorsHeader& header,
                               const SafetensorsEntry& e, DType dtype, const std::shared_ptr<void>& owner,
                               const std::string& file) {
  const std::string where = file + ": tensor '" + printable(e.name) + "'";
  if (dtype == DType::I8) {  // the bytes of a U8 / I8 tensor as they are (MXFP4 blocks and scales)
    if (e.dtype != "U8" && e.dtype != "I8") fail(where, ": stored as ", e.dtype, ", expected bytes (U8)");
    return Tensor::view(DType::I8, e.shape, const_cast<uint8_t*>(data + header.data_start + e.begin), owner);
  }
  require_float_dtype(dtype, where);
  DType stored;
  if (!stored_float_dtype(e.dtype, &stored))
    fail(where, ": stored as ", e.dtype, ", which cannot be loaded as ", dtype_name(dtype),
         " (supported: F32, BF16, F16)");
  const uint8_t* src = data + header.data_start + e.begin;  // [numel] of `stored`
  const bool aligned = reinterpret_cast<uintptr_t>(src) % dtype_size(stored) == 0;
  if (stored == dtype && aligned) return Tensor::view(dtype, e.shape, const_cast<uint8_t*>(src), owner);
  Tensor out = Tensor::empty(dtype, e.shape);  // [shape] of `dtype`
  if (aligned) {
    convert(src, stored, out.data, dtype, out.numel());
  } else {  // rare: realign through a copy so the conversion reads aligned elements
    Tensor tmp = Tensor::empty(stored, e.shape);
    std::memcpy(tmp.data, src, tmp.nbytes());
    convert(tmp.data, stored, out.data, dtype, out.numel());
  }
  return out;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto f = std::make_shared<SafetensorsFile>();
  f->file_ = MappedFile::open(path);
  f->header_ = parse_safetensors_header(f->file_->data(), f->file_->size(), path);
  f->file_->prefault();
  return f;
}

Tensor SafetensorsFile::load(const std::string& name, DType dtype) const {
  const SafetensorsEntry* e = header_.find(name);
  if (!e) fail(path(), ": no tensor named '", printable(name), "'");
  return load_safetensors_tensor(file_->data(), header_, *e, dtype, file_, path());
}

}  // namespace tessera::io
