// The PJRT backend on the XLA CPU plugin (xla-cpu-pjrt in .venv): plugin loading and versions, devices,
// forward logits against the Transformers goldens, greedy decode against the native backend, bytes moved
// per step, cache donation. Every test that needs the plugin is skipped (with the reason) without it.
// Tolerance: float32 logits within 1e-4 absolute of Transformers' float32, as for the native backend.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

#include "backends/backend.h"
#include "backends/pjrt/pjrt_backend.h"
#include "backends/pjrt/pjrt_info.h"
#include "cli_env.h"
#include "default_model.h"
#include "golden_util.h"
#include "runtime/weight_loader.h"
#include "pjrt_test_util.h"
#include "io/weight_source.h"
#include "models/architecture.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
namespace golden = tessera::golden;
using backends::StepInputs;
using graph::Phase;
using graph::ShapeKey;

namespace {

// A tiny model loaded the way CausalLM does (config -> architecture -> weights), for driving a backend
// directly through the Backend interface.
struct TinyModel {
  models::DecoderConfig config;
  const models::Architecture* arch = nullptr;
  backends::WeightMap weights;

  // `name`: a tiny model under tests/fixtures/models, or a checkpoint path.
  explicit TinyModel(const std::string& name, DType dtype = DType::F32) {
    auto src = io::open_checkpoint(name.find('/') == std::string::npos ? golden::model_path(name) : name);
    auto cj = nlohmann::json::parse(src->config_json());
    arch = &models::find_architecture(cj["architectures"][0].get<std::string>(), name);
    config = arch->parse_config(cj, name);
    size_t bytes = 0;
    weights = runtime::load_weights(*src, *arch, config, dtype, {}, bytes);
  }
  graph::Graph graph(const ShapeKey& key) const { return arch->build_graph(config, key); }
  std::unique_ptr<backends::DeviceCache> cache(backends::Backend& be, int batch, int len) const {
    return be.create_cache(config.num_layers, batch, config.num_kv_heads, len, config.head_dim);
  }
};

std::vector<int32_t> to32(const nlohmann::json& j) {
  auto v = golden::ids(j);
  return {v.begin(), v.end()};
}

int32_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return static_cast<int32_t>(best);
}

// Greedy generation over left-padded rows, the same step inputs CausalLM::generate sends.
// Returns the new tokens of each row; `per_step` is called after every decode step.
std::vector<std::vector<int32_t>> greedy(backends::Backend& be, const TinyModel& m,
                                         const std::vector<std::vector<int32_t>>& ids,
                                         const std::vector<std::vector<int32_t>>& mask, int new_tokens,
                                         const std::function<void(int, backends::DeviceCache&)>& per_step = {}) {
  const int batch = static_cast<int>(ids.size()), seq = static_cast<int>(ids[0].size());
  const int cache_len = seq + new_tokens;
  std::vector<int32_t> pads;
  for (const auto& row : mask) {
    int p = 0;
    while (row[static_cast<size_t>(p)] == 0) ++p;
    pads.push_back(p);
  }
  auto cache = m.cache(be, batch, cache_len);
  StepInputs in;
  for (int b = 0; b < batch; ++b)
    for (int s = 0; s < seq; ++s) {
      in.ids.push_back(ids[static_cast<size_t>(b)][static_cast<size_t>(s)]);
      int pos = s - pads[static_cast<size_t>(b)];
      in.positions.push_back(pos < 0 ? 1 : pos);
    }
  for (int s = 0; s < seq; ++s) in.slots.push_back(s);
  in.kv_begin = pads;
  auto prefill = be.compile(m.graph({.phase = Phase::Prefill, .batch = batch, .seq = seq, .cache_len = cache_len,
                                     .dtype = DType::F32}));
  auto decode = be.compile(
      m.graph({.phase = Phase::Decode, .batch = batch, .seq = 1, .cache_len = cache_len, .dtype = DType::F32}));
  std::vector<float> logits;
  prefill->run(in, *cache, logits);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(batch));
  for (int step = 0; step < new_tokens; ++step) {
    in.ids.clear();
    in.positions.clear();
    for (int b = 0; b < batch; ++b) {
      int32_t tok = argmax(logits.data() + static_cast<int64_t>(b) * m.config.vocab_size, m.config.vocab_size);
      out[static_cast<size_t>(b)].push_back(tok);
      in.ids.push_back(tok);
      in.positions.push_back(seq - pads[static_cast<size_t>(b)] + step);
    }
    if (step + 1 == new_tokens) break;
    in.slots = {seq + step};
    decode->run(in, *cache, logits);
    if (per_step) per_step(step, *cache);
  }
  return out;
}

// One backend per process for each tiny model keeps the number of XLA compiles (and the run time) small.
backends::PjrtBackend& xla_cpu_for(const std::string& model) {
  static std::map<std::string, std::unique_ptr<backends::PjrtBackend>> backends;
  auto& be = backends[model];
  if (!be) {
    be = backends::make_pjrt_backend("xla-cpu");
    be->bind_weights(TinyModel(model).weights);
  }
  return *be;
}

// ---------------------------------------------------------------------------------------------------------
// Plugin, versions, devices

TEST(PjrtPlugin, LoadsAndReportsVersionAndDevices) {
  REQUIRE_XLA_CPU();
  pjrt::PlatformInfo info = pjrt::describe_platform("xla-cpu", 1);
  EXPECT_EQ(info.platform_name, "cpu");
  EXPECT_EQ(info.api_version.rfind("0.", 0), 0u) << info.api_version;
  EXPECT_EQ(info.header_api_version.rfind("0.", 0), 0u);
  ASSERT_EQ(info.devices.size(), 1u);
  EXPECT_FALSE(info.devices[0].kind.empty());
  bool has_stablehlo_version = false;
  for (const auto& [k, v] : info.attributes) has_stablehlo_version |= k == "stablehlo_current_version";
  EXPECT_TRUE(has_stablehlo_version) << "PJRT_Plugin_Attributes should report the StableHLO version";
  std::printf("[ pjrt ] %s: plugin API %s, header %s, platform %s %s, %zu device(s), kind '%s'\n",
              info.plugin_path.c_str(), info.api_version.c_str(), info.header_api_version.c_str(),
              info.platform_name.c_str(), info.platform_version.c_str(), info.devices.size(),
              info.devices[0].kind.c_str());
}

TEST(PjrtPlugin, CpuDeviceCountIsHonoured) {
  REQUIRE_XLA_CPU();
  for (int n : {2, 4}) EXPECT_EQ(pjrt::describe_platform("xla-cpu", n).devices.size(), static_cast<size_t>(n));
}

TEST(PjrtPlugin, MissingPluginSaysWhereItLooked) {
  try {
    pjrt::find_plugin("pjrt:/nonexistent/libfoo.so");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/libfoo.so"), std::string::npos) << e.what();
  }
  ::setenv("TPU_LIBRARY_PATH", "/nonexistent/libtpu.so", 1);
  try {
    pjrt::find_plugin("tpu", cli::pjrt_settings_from_env());  // the tessera command's settings
    // A libtpu wheel may be installed on this machine; then there is nothing to check.
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TPU_LIBRARY_PATH=/nonexistent/libtpu.so"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("libtpu/libtpu.so"), std::string::npos) << e.what();
  }
  ::unsetenv("TPU_LIBRARY_PATH");
  EXPECT_THROW(pjrt::find_plugin("gpu0"), Error);
  EXPECT_THROW(backends::make_pjrt_backend("cpu"), Error);
}

TEST(PjrtPlugin, NonPluginLibraryIsAnError) {
  if (!pjrt::built_with_pjrt()) GTEST_SKIP() << "built without PJRT";
  // A file that is not a shared library, and a shared library without GetPjrtApi.
  EXPECT_THROW(backends::make_pjrt_backend(std::string("pjrt:") + TESSERA_SOURCE_DIR + "/CMakeLists.txt"), Error);
  for (const char* lib : {"/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1"}) {
    if (FILE* f = std::fopen(lib, "rb")) {
      std::fclose(f);
      try {
        backends::make_pjrt_backend(std::string("pjrt:") + lib);
        FAIL() << "expected an error";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("GetPjrtApi"), std::string::npos) << e.what();
      }
      break;
    }
  }
}

TEST(PjrtPlugin, BuildWithoutPjrtSaysHowToGetIt) {
  if (pjrt::built_with_pjrt()) GTEST_SKIP() << "this build has PJRT";
  try {
    backends::make_pjrt_backend("xla-cpu");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no PJRT support: run scripts/setup.sh"), std::string::npos) << e.what();
  }
}

TEST(PjrtPlugin, ProbeListsEveryPlatform) {
  auto probes = pjrt::probe_platforms();
  ASSERT_EQ(probes.size(), 3u);
  for (const auto& p : probes) EXPECT_TRUE(p.info.has_value() || !p.error.empty()) << p.device;
  if (tessera::testing::xla_cpu_plugin_available()) {
    EXPECT_EQ(probes[2].device, "xla-cpu");
    EXPECT_TRUE(probes[2].info.has_value()) << probes[2].error;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Forward logits vs Transformers (fp32)

class PjrtForward : public ::testing::TestWithParam<const char*> {};

TEST_P(PjrtForward, Float32LogitsMatchTransformers) {
  REQUIRE_XLA_CPU();
  const std::string name = GetParam();
  auto j = golden::load_model_golden(name);
  TinyModel m(name);
  auto& be = xla_cpu_for(name);
  for (const auto& c : j["forward"]) {
    auto expect = golden::matrix(c["logits"]);
    const std::vector<int32_t> ids = to32(c["input_ids"]);
    const int n = static_cast<int>(ids.size());
    auto t0 = std::chrono::steady_clock::now();
    auto exe = be.compile(m.graph(
        {.phase = Phase::Prefill, .batch = 1, .seq = n, .cache_len = n, .dtype = DType::F32, .all_logits = true}));
    const double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto cache = m.cache(be, 1, n);
    StepInputs in;
    in.ids = ids;
    for (int i = 0; i < n; ++i) {
      in.positions.push_back(i);
      in.slots.push_back(i);
    }
    in.kv_begin = {0};
    std::vector<float> logits;
    exe->run(in, *cache, logits);
    auto d = golden::max_abs_diff(logits, expect.data);
    std::printf("[ pjrt ] %s forward len %d: max |xla-cpu - transformers| = %.3g, compile %.2f s\n", name.c_str(), n,
                d.max_abs, compile_s);
    EXPECT_LE(d.max_abs, 1e-4) << name << " len " << n << " worst index " << d.index;
  }
}

// bf16/f16 weights: both backends round only the weights and compute in f32 (the native backend with
// exact_bf16_matmul: by default it rounds bf16 matmul inputs on AVX512-BF16 CPUs), so they agree to f32 noise.
TEST(PjrtForwardHalf, HalfPrecisionWeightsMatchNative) {
  REQUIRE_XLA_CPU();
  for (auto [name, dt] : {std::pair{"qwen3_untied", DType::BF16}, std::pair{"llama_gqa", DType::F16}}) {
    TinyModel m(name, dt);
    auto ids = to32(golden::load_model_golden(name)["forward"][1]["input_ids"]);
    const int n = static_cast<int>(ids.size());
    const ShapeKey key{.phase = Phase::Prefill, .batch = 1, .seq = n, .cache_len = n, .dtype = dt, .all_logits = true};
    StepInputs in{ids, {}, {}, {0}, {}, {}};
    for (int i = 0; i < n; ++i) {
      in.positions.push_back(i);
      in.slots.push_back(i);
    }
    std::vector<float> native, xla;
    auto cpu = backends::make_cpu_backend(nullptr, {.exact_bf16_matmul = true});
    cpu->bind_weights(m.weights);
    cpu->compile(m.graph(key))->run(in, *m.cache(*cpu, 1, n), native);
    auto be = backends::make_pjrt_backend("xla-cpu");
    be->bind_weights(m.weights);
    be->compile(m.graph(key))->run(in, *m.cache(*be, 1, n), xla);
    auto d = golden::max_abs_diff(xla, native);
    std::printf("[ pjrt ] %s %s weights: max |xla-cpu - native| = %.3g\n", name, dtype_name(dt), d.max_abs);
    EXPECT_LE(d.max_abs, 1e-4) << name << " " << dtype_name(dt);
  }
}

INSTANTIATE_TEST_SUITE_P(TinyModels, PjrtForward,
                         ::testing::Values("qwen3_tied", "qwen3_untied", "llama_gqa", "llama_bias"));

// ---------------------------------------------------------------------------------------------------------
// Greedy decode, transfer accounting, donation

TEST(PjrtDecode, GreedyEqualsNativeAndTransformersFor32Steps) {
  REQUIRE_XLA_CPU();
  const std::string name = "qwen3_tied";
  auto j = golden::load_model_golden(name)["greedy"][0];
  TinyModel m(name);
  const std::vector<int32_t> prompt = to32(j["input_ids"]);
  const int n_new = j["max_new_tokens"].get<int>();
  const std::vector<std::vector<int32_t>> mask = {std::vector<int32_t>(prompt.size(), 1)};

  auto cpu = backends::make_cpu_backend();
  cpu->bind_weights(m.weights);
  auto native = greedy(*cpu, m, {prompt}, mask, n_new);

  auto& be = xla_cpu_for(name);
  be.reset_transfer_stats();
  std::vector<backends::TransferStats> per_step;
  std::vector<uintptr_t> addresses_before;
  bool in_place = true;
  std::vector<std::chrono::steady_clock::time_point> times;
  const int compiles_before = be.compile_timing().compiles;
  const double compile_s_before = be.compile_timing().compile_seconds;
  auto pjrt_tokens = greedy(be, m, {prompt}, mask, n_new, [&](int step, backends::DeviceCache& cache) {
    times.push_back(std::chrono::steady_clock::now());
    auto now = be.cache_addresses(cache);
    if (step > 0 && now != addresses_before) in_place = false;
    addresses_before = now;
    per_step.push_back(be.transfer_stats());
  });
  EXPECT_EQ(be.compile_timing().compiles - compiles_before, 2) << "one prefill and one decode compile";
  std::printf("[ pjrt ] %s greedy: 2 compiles in %.2f s; decode step %.3f ms (incl. test bookkeeping)\n",
              name.c_str(), be.compile_timing().compile_seconds - compile_s_before,
              1e3 * std::chrono::duration<double>(times.back() - times.front()).count() /
                  static_cast<double>(times.size() - 1));

  std::vector<int32_t> expected(j["output_ids"].begin() + static_cast<long>(prompt.size()), j["output_ids"].end());
  EXPECT_EQ(pjrt_tokens[0], native[0]) << "xla-cpu and native greedy tokens differ";
  EXPECT_EQ(pjrt_tokens[0], expected) << "xla-cpu greedy tokens differ from Transformers";

  // Per decode step: ids + positions + slots + kv_begin (4 int32 for batch 1) up, one logits row down.
  ASSERT_GE(per_step.size(), 2u);
  for (size_t i = 1; i < per_step.size(); ++i) {
    EXPECT_EQ(per_step[i].h2d_bytes - per_step[i - 1].h2d_bytes, 4 * sizeof(int32_t)) << "step " << i;
    EXPECT_EQ(per_step[i].d2h_bytes - per_step[i - 1].d2h_bytes, m.config.vocab_size * sizeof(float)) << "step " << i;
    EXPECT_EQ(per_step[i].cache_copy_bytes, 0u);
    EXPECT_EQ(per_step[i].setup_h2d_bytes, per_step[0].setup_h2d_bytes) << "no cache/weight upload during decode";
  }
  EXPECT_TRUE(in_place) << "the donated cache buffers moved: the step copied the cache instead of aliasing it";
}

TEST(PjrtDecode, LeftPaddedBatchMatchesTransformers) {
  REQUIRE_XLA_CPU();
  const std::string name = "llama_gqa";
  auto j = golden::load_model_golden(name)["batched"];
  TinyModel m(name);
  std::vector<std::vector<int32_t>> ids, mask;
  for (const auto& r : j["input_ids"]) ids.push_back(to32(r));
  for (const auto& r : j["attention_mask"]) mask.push_back(to32(r));
  const int n_new = j["max_new_tokens"].get<int>();
  auto got = greedy(xla_cpu_for(name), m, ids, mask, n_new);
  for (size_t b = 0; b < ids.size(); ++b) {
    std::vector<int32_t> expected(j["output_ids"][b].begin() + static_cast<long>(ids[b].size()),
                                  j["output_ids"][b].end());
    EXPECT_EQ(got[b], expected) << "row " << b;
  }
}

// The real default model (SmolLM2-135M, GGUF dequantised to float32): 32 greedy steps on xla-cpu equal the
// native backend and Transformers. Skipped when the GGUF is not installed.
TEST(PjrtSmolLM2, GreedyEqualsNativeAndTransformersFor32Steps) {
  REQUIRE_XLA_CPU();
  std::string path;
  try {
    path = cli::find_default_model();
  } catch (const Error&) {
    GTEST_SKIP() << "SmolLM2 GGUF not installed (scripts/setup.sh installs it)";
  }
  auto j = golden::load_json(golden::model_path("smollm2_golden.json"))["prompts"][0];
  const std::vector<int32_t> prompt = to32(j["input_ids"]);
  const auto& g = j["greedy_no_eos"];
  const int n_new = g["max_new_tokens"].get<int>();
  TinyModel m(path, DType::F32);
  const std::vector<std::vector<int32_t>> mask = {std::vector<int32_t>(prompt.size(), 1)};
  auto cpu = backends::make_cpu_backend();
  cpu->bind_weights(m.weights);
  std::vector<std::chrono::steady_clock::time_point> times, native_times;
  auto native = greedy(*cpu, m, {prompt}, mask, n_new,
                       [&](int, backends::DeviceCache&) { native_times.push_back(std::chrono::steady_clock::now()); });

  auto be = backends::make_pjrt_backend("xla-cpu");
  be->bind_weights(m.weights);
  auto got = greedy(*be, m, {prompt}, mask, n_new,
                    [&](int, backends::DeviceCache&) { times.push_back(std::chrono::steady_clock::now()); });
  auto rate = [](const std::vector<std::chrono::steady_clock::time_point>& ts) {
    return static_cast<double>(ts.size() - 1) / std::chrono::duration<double>(ts.back() - ts.front()).count();
  };
  const auto t = be->compile_timing();
  const auto stats = be->transfer_stats();
  std::printf("[ pjrt ] SmolLM2 f32: %d compiles, %.2f s compiling (emit %.3f s); decode %.1f tokens/s (native cpu "
              "%.1f); %.1f bytes up and %.1f bytes down per step\n",
              t.compiles, t.compile_seconds, t.emit_seconds, rate(times), rate(native_times),
              static_cast<double>(stats.h2d_bytes) / static_cast<double>(stats.runs),
              static_cast<double>(stats.d2h_bytes) / static_cast<double>(stats.runs));
  std::vector<int32_t> expected(g["output_ids"].begin() + static_cast<long>(prompt.size()), g["output_ids"].end());
  EXPECT_EQ(got[0], native[0]);
  EXPECT_EQ(got[0], expected);
}

// Groundwork for the on-disk cache: a serialized step loads into a fresh backend without compiling and
// computes the same logits; bytes that are not a serialized executable are an Error, not a crash.
TEST(PjrtSerialize, RoundTripGivesSameLogitsWithoutCompiling) {
  REQUIRE_XLA_CPU();
  TinyModel m("qwen3_tied");
  auto& be = xla_cpu_for("qwen3_tied");
  const ShapeKey key{.phase = Phase::Prefill, .batch = 1, .seq = 3, .cache_len = 8, .dtype = DType::F32};
  StepInputs in{{5, 6, 7}, {0, 1, 2}, {0, 1, 2}, {0}, {}, {}};
  std::vector<float> a, b;
  auto exe = be.compile(m.graph(key));
  exe->run(in, *m.cache(be, 1, 8), a);
  const std::string bytes = be.serialize(*exe);
  EXPECT_GT(bytes.size(), 1000u);

  auto fresh = backends::make_pjrt_backend("xla-cpu");
  fresh->bind_weights(m.weights);
  auto t0 = std::chrono::steady_clock::now();
  auto loaded = fresh->load_serialized(m.graph(key), bytes);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  loaded->run(in, *m.cache(*fresh, 1, 8), b);
  EXPECT_EQ(fresh->compile_timing().compiles, 0);
  EXPECT_EQ(a, b);
  std::printf("[ pjrt ] serialized executable: %zu bytes, loaded in %.3f s (compile took %.2f s)\n", bytes.size(),
              load_s, be.compile_timing().last_compile_seconds);

  EXPECT_THROW(fresh->load_serialized(m.graph(key), "not an executable"), Error);
  std::string truncated = bytes.substr(0, bytes.size() / 2);
  EXPECT_THROW(fresh->load_serialized(m.graph(key), truncated), Error);
}

TEST(PjrtDecode, NonContiguousSlotsAreRejected) {
  REQUIRE_XLA_CPU();
  TinyModel m("qwen3_tied");
  auto& be = xla_cpu_for("qwen3_tied");
  auto exe = be.compile(m.graph({.phase = Phase::Prefill, .batch = 1, .seq = 2, .cache_len = 4, .dtype = DType::F32}));
  auto cache = m.cache(be, 1, 4);
  StepInputs in{{5, 6}, {0, 1}, {0, 2}, {0}, {}, {}};
  std::vector<float> logits;
  EXPECT_THROW(exe->run(in, *cache, logits), Error);
  in.slots = {3, 4};  // past the end of the cache
  EXPECT_THROW(exe->run(in, *cache, logits), Error);
  in.ids = {5};
  in.slots = {0, 1};
  EXPECT_THROW(exe->run(in, *cache, logits), Error);
}

}  // namespace

namespace {

// disable_compile on PJRT: op by op, each distinct single-op program compiled once and shared by every
// layer and step; same logits as the fused program and the same greedy tokens as Transformers.
TEST(PjrtOpByOp, MatchesTheFusedProgramAndCompilesEachOpOnce) {
  REQUIRE_XLA_CPU();
  const std::string name = "llama_gqa";
  TinyModel m(name);
  auto be = backends::make_pjrt_backend("xla-cpu");
  be->bind_weights(m.weights);
  const ShapeKey key{.phase = Phase::Prefill, .batch = 1, .seq = 4, .cache_len = 8, .dtype = DType::F32};
  StepInputs in{{5, 6, 7, 8}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0}, {}, {}};
  std::vector<float> fused, ops, again;
  be->compile(m.graph(key))->run(in, *m.cache(*be, 1, 8), fused);
  be->compile_op_by_op(m.graph(key))->run(in, *m.cache(*be, 1, 8), ops);
  const int compiled = be->op_compiles();
  be->compile_op_by_op(m.graph(key))->run(in, *m.cache(*be, 1, 8), again);
  EXPECT_EQ(be->op_compiles(), compiled) << "a second run compiles nothing new";
  const size_t nodes = m.graph(key).nodes.size();
  EXPECT_LT(static_cast<size_t>(compiled), nodes / 2) << "layers share single-op programs";
  EXPECT_LE(golden::max_abs_diff(ops, fused).max_abs, 1e-5);
  EXPECT_EQ(ops, again);
  std::printf("[ pjrt ] op by op: %d single-op programs for a %zu-node graph\n", compiled, nodes);
}

TEST(PjrtOpByOp, GenerateWithDisableCompileMatchesTransformers) {
  REQUIRE_XLA_CPU();
  auto j = golden::load_model_golden("qwen3_tied")["greedy"][0];
  LoadOptions opt;
  opt.dtype = DType::F32;
  opt.device_map = "xla-cpu";
  CausalLM model = AutoModelForCausalLM::from_pretrained(golden::model_path("qwen3_tied"), opt);
  GenerationConfig g;
  g.max_new_tokens = j["max_new_tokens"].get<int>();
  g.disable_compile = true;
  auto out = model.generate({to32(j["input_ids"])}, {}, g);
  EXPECT_EQ(out.sequences[0], to32(j["output_ids"]));
  EXPECT_FALSE(out.device_sampling);
}

}  // namespace
