// The _tessera extension module: a thin layer over the public C++ API (tessera/model.h, auto_tokenizer.h).
// The Transformers-shaped API is the Python package around it (python/tessera/). Every engine call that
// computes releases the GIL; a token callback takes it back only for the Python call.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "backends/pjrt/pjrt_info.h"
#include "backends/registry.h"
#include "tessera/auto_tokenizer.h"
#include "tessera/error.h"
#include "tessera/generation.h"
#include "tessera/model.h"
#include "tessera/tokenizer.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using IdArray = nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using Rows = std::vector<std::vector<int32_t>>;

Rows to_rows(const IdArray& a) {
  Rows rows(a.shape(0));
  const size_t cols = a.shape(1);
  for (size_t r = 0; r < rows.size(); ++r) rows[r].assign(a.data() + r * cols, a.data() + (r + 1) * cols);
  return rows;
}

// A 2-D array that owns `v` (moved to the heap), freed when Python drops the array.
template <typename T>
nb::ndarray<nb::numpy, T, nb::ndim<2>> owned_array(std::vector<T>&& v, size_t rows, size_t cols) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T, nb::ndim<2>>(heap->data(), {rows, cols}, owner);
}

// GenerationOverrides from the keyword dict the Python layer passes (it has already refused unknown keys).
tessera::GenerationOverrides overrides_from(const nb::dict& d) {
  tessera::GenerationOverrides o;
  for (auto [key, value] : d) {
    const std::string k = nb::cast<std::string>(key);
    if (value.is_none()) continue;
    if (k == "max_new_tokens")
      o.max_new_tokens = nb::cast<int>(value);
    else if (k == "max_length")
      o.max_length = nb::cast<int>(value);
    else if (k == "top_k")
      o.top_k = nb::cast<int>(value);
    else if (k == "do_sample")
      o.do_sample = nb::cast<bool>(value);
    else if (k == "temperature")
      o.temperature = nb::cast<float>(value);
    else if (k == "top_p")
      o.top_p = nb::cast<float>(value);
    else if (k == "min_p")
      o.min_p = nb::cast<float>(value);
    else if (k == "repetition_penalty")
      o.repetition_penalty = nb::cast<float>(value);
    else if (k == "seed")
      o.seed = nb::cast<uint64_t>(value);
    else if (k == "eos_token_id")
      o.eos_token_id = nb::cast<std::vector<int32_t>>(value);
    else if (k == "pad_token_id")
      o.pad_token_id = nb::cast<int32_t>(value);
    else if (k == "bos_token_id")
      o.bos_token_id = nb::cast<int32_t>(value);
    else if (k == "cache_implementation")
      o.cache_implementation = nb::cast<std::string>(value);
    else if (k == "disable_compile")
      o.disable_compile = nb::cast<bool>(value);
    else if (k == "prompt_lookup_num_tokens")
      o.prompt_lookup_num_tokens = nb::cast<int>(value);
    else if (k == "max_matching_ngram_size")
      o.max_matching_ngram_size = nb::cast<int>(value);
    else if (k == "num_assistant_tokens")
      o.num_assistant_tokens = nb::cast<int>(value);
    else
      throw nb::value_error(("unknown generation setting '" + k + "'").c_str());
  }
  return o;
}

nb::dict config_dict(const tessera::GenerationConfig& c) {
  nb::dict d;
  d["max_new_tokens"] = c.max_new_tokens ? nb::cast(*c.max_new_tokens) : nb::none();
  d["max_length"] = c.max_length;
  d["do_sample"] = c.do_sample;
  d["temperature"] = c.temperature;
  d["top_k"] = c.top_k;
  d["top_p"] = c.top_p;
  d["min_p"] = c.min_p;
  d["repetition_penalty"] = c.repetition_penalty;
  d["eos_token_id"] = c.eos_token_id;
  d["pad_token_id"] = c.pad_token_id ? nb::cast(*c.pad_token_id) : nb::none();
  d["bos_token_id"] = c.bos_token_id ? nb::cast(*c.bos_token_id) : nb::none();
  d["cache_implementation"] = c.cache_implementation;
  d["disable_compile"] = c.disable_compile;
  d["prompt_lookup_num_tokens"] = c.prompt_lookup_num_tokens;
  d["max_matching_ngram_size"] = c.max_matching_ngram_size;
  d["num_assistant_tokens"] = c.num_assistant_tokens;
  return d;
}

tessera::GenerationConfig resolved_config(const tessera::CausalLM& lm, const nb::dict& overrides) {
  tessera::GenerationConfig cfg =
      tessera::GenerationConfig::merged(lm.generation_config(), overrides_from(overrides));
  if (auto bad = cfg.invalid_field()) throw nb::value_error((bad->first + ": " + bad->second).c_str());
  return cfg;
}

// The attention mask's rows (none without a mask), after checking it has the shape of the ids.
Rows mask_rows(const IdArray& ids, const std::optional<IdArray>& mask) {
  if (!mask) return {};
  if (mask->shape(0) != ids.shape(0) || mask->shape(1) != ids.shape(1))
    throw nb::value_error("attention_mask must have the shape of input_ids");
  return to_rows(*mask);
}

nb::object generate(tessera::CausalLM& lm, const IdArray& ids, std::optional<IdArray> mask,
                    const nb::dict& overrides, std::optional<nb::callable> on_token,
                    tessera::CausalLM* assistant) {
  Rows input = to_rows(ids);
  Rows attention = mask_rows(ids, mask);
  const tessera::GenerationConfig cfg = resolved_config(lm, overrides);
  tessera::GenerateOutput out;
  if (on_token) {
    // A Python exception in the callback stops every row; it is raised again once generate() returns.
    std::optional<nb::python_error> failure;
    std::optional<std::string> cast_failure;
    auto callback = [&](int row, int32_t token) -> bool {
      nb::gil_scoped_acquire gil;
      if (failure || cast_failure) return false;
      try {
        nb::object r = (*on_token)(row, token);
        return r.is_none() || nb::cast<bool>(r);
      } catch (nb::python_error& e) {
        failure.emplace(std::move(e));
      } catch (const std::exception& e) {
        cast_failure = std::string("token callback: ") + e.what();
      }
      return false;
    };
    {
      nb::gil_scoped_release release;
      out = assistant ? lm.generate(input, attention, cfg, callback, *assistant)
                      : lm.generate(input, attention, cfg, callback);
    }
    if (failure) throw std::move(*failure);
    if (cast_failure) throw std::runtime_error(*cast_failure);
  } else {
    nb::gil_scoped_release release;
    out = assistant ? lm.generate(input, attention, cfg, nullptr, *assistant)
                    : lm.generate(input, attention, cfg);
  }
  const size_t rows = out.sequences.size(), cols = rows ? out.sequences[0].size() : 0;
  std::vector<int64_t> flat;
  flat.reserve(rows * cols);
  for (const auto& row : out.sequences) flat.insert(flat.end(), row.begin(), row.end());
  nb::dict stats;
  stats["prompt_tokens"] = out.prompt_tokens;
  stats["new_tokens"] = out.new_tokens;
  stats["prefill_tokens_per_s"] = out.prefill_tokens_per_s;
  stats["decode_tokens_per_s"] = out.decode_tokens_per_s;
  stats["draft_tokens"] = out.draft_tokens;
  stats["accepted_tokens"] = out.accepted_tokens;
  std::vector<std::string> reasons;
  for (auto r : out.finish_reasons) reasons.emplace_back(tessera::finish_reason_name(r));
  stats["finish_reasons"] = reasons;
  return nb::make_tuple(owned_array(std::move(flat), rows, cols), stats);
}

nb::object forward(tessera::CausalLM& lm, const std::vector<int32_t>& ids) {
  std::vector<float> logits;
  {
    nb::gil_scoped_release release;
    logits = lm.forward(ids);
  }
  const size_t n = ids.size(), vocab = n ? logits.size() / n : 0;
  return nb::cast(owned_array(std::move(logits), n, vocab));
}

// Rows of equal length with an attention mask (left or right padding) in one step: [rows, len, vocab]
// float32, 0 at padding positions.
nb::object forward_batch(tessera::CausalLM& lm, const IdArray& ids, std::optional<IdArray> mask) {
  Rows input = to_rows(ids);
  Rows attention = mask_rows(ids, mask);
  std::vector<float> logits;
  {
    nb::gil_scoped_release release;
    logits = lm.forward(input, attention);
  }
  const size_t rows = input.size(), n = ids.shape(1), vocab = rows && n ? logits.size() / (rows * n) : 0;
  auto* heap = new std::vector<float>(std::move(logits));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, float, nb::ndim<3>>(heap->data(), {rows, n, vocab}, owner));
}

// `distributed`: DistributedConfig's fields as the Python layer resolved them from its arguments and the
// launcher's environment (tp_size, tp_plan [(pattern, style)], tp_plan_auto, world_size, rank, mpi,
// collective_timeout_s); empty for one process.
tessera::CausalLM load_model(const std::string& path, std::optional<std::string> dtype,
                             const std::string& device_map, const std::string& buckets,
                             const nb::dict& distributed, const std::string& kv_cache_dtype) {
  tessera::LoadOptions o;
  if (dtype) o.dtype = tessera::parse_load_dtype(*dtype);
  o.device_map = device_map;
  o.buckets = buckets;
  o.kv_cache_dtype = kv_cache_dtype;
  tessera::DistributedConfig& d = o.distributed;
  for (auto [key, value] : distributed) {
    const std::string k = nb::cast<std::string>(key);
    if (k == "tp_size")
      d.tp_size = nb::cast<int>(value);
    else if (k == "tp_plan")
      for (const auto& [pattern, style] : nb::cast<std::vector<std::pair<std::string, std::string>>>(value))
        d.tp_plan.push_back({pattern, style, "DistributedConfig.tp_plan"});
    else if (k == "tp_plan_auto")
      d.tp_plan_auto = nb::cast<bool>(value);
    else if (k == "world_size")
      d.world_size = nb::cast<int>(value);
    else if (k == "rank")
      d.rank = nb::cast<int>(value);
    else if (k == "mpi")
      d.mpi = nb::cast<bool>(value);
    else if (k == "collective_timeout_s")
      o.collective_timeout_s = nb::cast<double>(value);
    else
      throw nb::value_error(("unknown distributed setting '" + k + "'").c_str());
  }
  nb::gil_scoped_release release;
  return tessera::AutoModelForCausalLM::from_pretrained(path, o);
}

void set_plugin_search(const std::vector<std::string>& site_packages, const std::string& xla_cpu_plugin,
                       const std::string& tpu_plugin, const std::string& cuda_plugin) {
  tessera::pjrt::PjrtSettings s;
  s.site_packages = site_packages;
  s.xla_cpu_plugin = {xla_cpu_plugin, "$TESSERA_XLA_CPU_PLUGIN"};
  s.tpu_plugin = {tpu_plugin, "$TPU_LIBRARY_PATH"};
  s.cuda_plugin = {cuda_plugin, "$TESSERA_XLA_CUDA_PLUGIN"};
  tessera::pjrt::set_default_pjrt_settings(s);
}

// [(device, count)] for every device present here; count is 0 when the plugin is there but does not start.
std::vector<std::pair<std::string, int>> probe_devices() {
  std::vector<std::pair<std::string, int>> out;
  nb::gil_scoped_release release;
  for (const auto& name : tessera::backends::available_devices(tessera::pjrt::default_pjrt_settings())) {
    if (name == "cpu") {
      out.emplace_back(name, 1);
      continue;
    }
    int count = 0;
    for (const auto& p : tessera::pjrt::probe_platforms())
      if (p.device == name && p.info) count = static_cast<int>(p.info->devices.size());
    out.emplace_back(name, count);
  }
  return out;
}

}  // namespace

NB_MODULE(_tessera, m) {
  m.doc() = "Tessera's native runtime (the tessera package wraps it in Transformers' API)";
  nb::exception<tessera::Error>(m, "TesseraError", PyExc_Exception);

  m.def("set_hf_hub_dirs", &tessera::set_hf_hub_dirs, "dirs"_a);
  m.def("set_plugin_search", &set_plugin_search, "site_packages"_a, "xla_cpu_plugin"_a, "tpu_plugin"_a,
        "cuda_plugin"_a);
  m.def("available_devices", []() {
    nb::gil_scoped_release release;
    return tessera::backends::available_devices(tessera::pjrt::default_pjrt_settings());
  });
  m.def("probe_devices", &probe_devices);
  // The cpu backend's worker threads (the tessera command's --threads; ranks of one node share its cores).
  m.def("set_num_threads", [](int n) {
    if (n < 1 || n > 1024) throw nb::value_error("a thread count must be in [1, 1024]");
    tessera::cpu::ThreadPool::instance().set_num_threads(n);
  });
  m.def("num_threads", []() { return tessera::cpu::ThreadPool::instance().num_threads(); });

  nb::class_<tessera::Tokenizer>(m, "Tokenizer")
      .def_static("from_pretrained", &tessera::AutoTokenizer::from_pretrained, "path"_a,
                  nb::call_guard<nb::gil_scoped_release>())
      .def("encode", &tessera::Tokenizer::encode, "text"_a, "add_special_tokens"_a = false,
           nb::call_guard<nb::gil_scoped_release>())
      .def("decode", &tessera::Tokenizer::decode, "ids"_a, "skip_special_tokens"_a = false,
           nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("vocab_size", &tessera::Tokenizer::vocab_size)
      .def("token_to_id", [](const tessera::Tokenizer& t, const std::string& s) { return t.token_to_id(s); })
      .def("id_to_token", &tessera::Tokenizer::id_to_token)
      .def_prop_ro("bos_token_id", &tessera::Tokenizer::bos_token_id)
      .def_prop_ro("eos_token_id", &tessera::Tokenizer::eos_token_id)
      .def_prop_ro("pad_token_id", &tessera::Tokenizer::pad_token_id)
      .def_prop_ro("bos_token", &tessera::Tokenizer::bos_token)
      .def_prop_ro("eos_token", &tessera::Tokenizer::eos_token)
      .def_prop_ro("chat_template", &tessera::Tokenizer::chat_template)
      .def("is_special", &tessera::Tokenizer::is_special)
      .def("special_token_ids", &tessera::Tokenizer::special_token_ids)
      .def(
          "apply_chat_template",
          [](const tessera::Tokenizer& t, const std::string& messages_json, bool add_generation_prompt,
             const std::string& extra_json) {
            nlohmann::ordered_json messages, extra;
            try {
              messages = nlohmann::ordered_json::parse(messages_json);
              extra = nlohmann::ordered_json::parse(extra_json);
            } catch (const nlohmann::json::exception& e) {
              throw nb::value_error(e.what());
            }
            nb::gil_scoped_release release;
            return tessera::apply_chat_template(t, messages, add_generation_prompt, extra);
          },
          "messages_json"_a, "add_generation_prompt"_a, "extra_json"_a);

  nb::class_<tessera::StreamDecoder>(m, "StreamDecoder")
      .def(nb::init<const tessera::Tokenizer&, bool>(), "tokenizer"_a, "skip_special_tokens"_a,
           nb::keep_alive<1, 2>())
      .def("push", &tessera::StreamDecoder::push)
      .def("flush", &tessera::StreamDecoder::flush);

  nb::class_<tessera::CausalLM>(m, "CausalLM")
      .def_static("from_pretrained", &load_model, "path"_a, "dtype"_a = nb::none(), "device_map"_a = "cpu",
                  "buckets"_a = "auto", "distributed"_a = nb::dict(), "kv_cache_dtype"_a = "auto")
      .def("generate", &generate, "input_ids"_a, "attention_mask"_a = nb::none(), "overrides"_a = nb::dict(),
           "on_token"_a = nb::none(), "assistant"_a = nb::none())
      .def("forward", &forward, "ids"_a)
      .def("forward_batch", &forward_batch, "input_ids"_a, "attention_mask"_a = nb::none())
      .def("resolved_config",
           [](const tessera::CausalLM& lm, const nb::dict& overrides) {
             return config_dict(resolved_config(lm, overrides));
           })
      .def("generation_config",
           [](const tessera::CausalLM& lm) { return config_dict(lm.generation_config()); })
      .def("info", [](const tessera::CausalLM& lm) {
        const tessera::ModelInfo& i = lm.info();
        nb::dict d;
        d["architecture"] = i.architecture;
        d["origin"] = i.origin;
        d["device"] = i.device;
        d["dtype"] = std::string(tessera::dtype_name(i.dtype));
        nb::dict quantized;
        for (const auto& [format, count] : i.quantized_matrices) quantized[format.c_str()] = count;
        d["quantized_matrices"] = quantized;
        d["num_layers"] = i.num_layers;
        d["hidden_size"] = i.hidden_size;
        d["vocab_size"] = i.vocab_size;
        d["max_position_embeddings"] = i.max_position_embeddings;
        d["tp_rank"] = i.tp_rank;
        d["tp_size"] = i.tp_size;
        d["kv_bytes_per_token"] = i.kv_bytes_per_token;
        d["kv_cache_dtype"] = std::string(tessera::dtype_name(i.kv_cache_dtype));
        d["context_limit"] = i.context_limit;
        return d;
      });
}
