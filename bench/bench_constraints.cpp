// Constrained decoding's host costs (llguidance through include/tessera/constraint.h), on a real tokenizer:
//   build/bench_constraints --tokenizer DIR_OR_FILE --schemas tests/fixtures/schemas [--vocab N] [--json]
// - the vocabulary's build time (once per model);
// - schema compile time over the corpus (every schema compiled --repeat times), p50 / p99 / max;
// - mask time per token: each schema's example answer (a JSON instance, built from the schema below) is
//   tokenized and fed token by token to R matchers at once (R = 1 and 16, the rows of a step), timing the
//   masks of each step as the engine computes them (one thread, while the device step runs); p50 / p99 per
//   row-token and per step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "generation/constraint_state.h"
#include "tessera/auto_tokenizer.h"
#include "tessera/constraint.h"
#include "tessera/error.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5))];
}

// A small JSON value valid against `s` (the corpus's features: type, enum, const, properties/required,
// items/minItems, $ref into $defs, anyOf, pattern-free strings, numeric bounds).
nlohmann::json example(const nlohmann::json& s, const nlohmann::json& root, int depth = 0) {
  if (depth > 20) return nullptr;
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"].get<std::string>();
    const std::string name = ref.substr(ref.rfind('/') + 1);
    return example(root["$defs"][name], root, depth + 1);
  }
  if (s.contains("const")) return s["const"];
  if (s.contains("enum")) return s["enum"][0];
  if (s.contains("anyOf")) return example(s["anyOf"][0], root, depth + 1);
  std::string type = "object";
  if (s.contains("type"))
    type = s["type"].is_array() ? s["type"][0].get<std::string>() : s["type"].get<std::string>();
  if (type == "object") {
    nlohmann::json o = nlohmann::json::object();
    if (s.contains("properties"))
      for (const auto& [k, v] : s["properties"].items()) o[k] = example(v, root, depth + 1);
    return o;
  }
  if (type == "array") {
    nlohmann::json a = nlohmann::json::array();
    const int n = s.contains("minItems") ? s["minItems"].get<int>() : 1;
    for (int i = 0; i < std::max(n, 1); ++i)
      a.push_back(example(s.value("items", nlohmann::json::object()), root, depth + 1));
    return a;
  }
  if (type == "integer") return s.contains("minimum") ? s["minimum"].get<int64_t>() + 1 : 7;
  if (type == "number") return 0.5;
  if (type == "boolean") return true;
  if (type == "null") return nullptr;
  if (s.contains("format") && s["format"] == "date") return "2026-12-06";
  if (s.contains("format") && s["format"] == "email") return "ada@example.com";
  if (s.contains("pattern")) return nullptr;  // no generator for patterns: the schema is skipped
  return "Ada Lovelace";
}

bool has_pattern(const nlohmann::json& s) {
  if (s.is_object()) {
    if (s.contains("pattern")) return true;
    for (const auto& [k, v] : s.items())
      if (has_pattern(v)) return true;
  } else if (s.is_array()) {
    for (const auto& v : s)
      if (has_pattern(v)) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tok_path, schema_dir;
  int64_t vocab = 0;
  int repeat = 5;
  bool json_out = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokenizer" && i + 1 < argc)
      tok_path = argv[++i];
    else if (a == "--schemas" && i + 1 < argc)
      schema_dir = argv[++i];
    else if (a == "--vocab" && i + 1 < argc)
      vocab = std::stoll(argv[++i]);
    else if (a == "--repeat" && i + 1 < argc)
      repeat = std::stoi(argv[++i]);
    else if (a == "--json")
      json_out = true;
    else {
      std::fprintf(
          stderr,
          "usage: bench_constraints --tokenizer PATH --schemas DIR [--vocab N] [--repeat N] [--json]\n");
      return 2;
    }
  }
  if (tok_path.empty() || schema_dir.empty()) {
    std::fprintf(stderr, "bench_constraints: --tokenizer and --schemas are required\n");
    return 2;
  }
  try {
    if (std::string why; !ConstraintLibrary::available(&why)) fail(why);
    Tokenizer tok = AutoTokenizer::from_pretrained(tok_path);
    if (vocab == 0) vocab = tok.vocab_size();
    std::vector<int32_t> eos;
    if (auto e = tok.eos_token_id()) eos.push_back(*e);
    auto t0 = Clock::now();
    ConstraintVocabulary cv(tok, vocab, eos);
    const double vocab_ms = ms_since(t0);

    std::vector<std::pair<std::string, nlohmann::json>> schemas;
    for (const auto& e : fs::directory_iterator(schema_dir)) {
      const std::string name = e.path().filename().string();
      if (e.path().extension() != ".json" || name.rfind("unsupported_", 0) == 0) continue;
      std::ifstream f(e.path());
      schemas.emplace_back(name, nlohmann::json::parse(f));
    }
    std::sort(schemas.begin(), schemas.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<double> compile_ms;
    std::vector<std::shared_ptr<const Constraint>> compiled;
    for (int r = 0; r < repeat; ++r)
      for (const auto& [name, s] : schemas) {
        auto c = cv.compile(ConstraintKind::JsonSchema, s.dump());
        compile_ms.push_back(c->compile_seconds() * 1e3);
        if (r == 0) compiled.push_back(c);
      }

    nlohmann::ordered_json masks = nlohmann::ordered_json::array();
    for (int rows : {1, 16}) {
      std::vector<double> per_row_token, per_step;
      for (size_t k = 0; k < schemas.size(); ++k) {
        if (has_pattern(schemas[k].second)) continue;
        const std::vector<int32_t> ids =
            tok.encode(example(schemas[k].second, schemas[k].second).dump(), false);
        std::vector<std::unique_ptr<generation::ConstraintMatcher>> ms;
        for (int r = 0; r < rows; ++r)
          ms.push_back(std::make_unique<generation::ConstraintMatcher>(compiled[k]));
        for (int32_t id : ids) {
          const auto s0 = Clock::now();
          for (auto& m : ms) m->compute_mask();
          const double step = ms_since(s0);
          per_step.push_back(step);
          per_row_token.push_back(step / rows);
          for (auto& m : ms) m->consume(id);
        }
        if (!ms[0]->error().empty())
          fail(schemas[k].first, ": the example answer was refused: ", ms[0]->error());
      }
      masks.push_back({{"rows", rows},
                       {"tokens", per_step.size()},
                       {"per_row_token_us_p50", pct(per_row_token, 50) * 1e3},
                       {"per_row_token_us_p99", pct(per_row_token, 99) * 1e3},
                       {"per_step_ms_p50", pct(per_step, 50)},
                       {"per_step_ms_p99", pct(per_step, 99)}});
    }
    nlohmann::ordered_json out = {{"tokenizer", tok_path},
                                  {"vocab", vocab},
                                  {"llguidance", ConstraintLibrary::version()},
                                  {"vocabulary_build_ms", vocab_ms},
                                  {"schemas", schemas.size()},
                                  {"compiles", compile_ms.size()},
                                  {"compile_ms_p50", pct(compile_ms, 50)},
                                  {"compile_ms_p99", pct(compile_ms, 99)},
                                  {"compile_ms_max", pct(compile_ms, 100)},
                                  {"masks", masks}};
    if (json_out) {
      std::printf("%s\n", out.dump().c_str());
    } else {
      std::printf("vocabulary %lld ids (%s): built in %.1f ms; llguidance %s\n",
                  static_cast<long long>(vocab), tok_path.c_str(), vocab_ms,
                  ConstraintLibrary::version().c_str());
      std::printf("schema compile (%zu schemas x %d): p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
                  schemas.size(), repeat, pct(compile_ms, 50), pct(compile_ms, 99), pct(compile_ms, 100));
      for (const auto& m : masks)
        std::printf(
            "masks, %d row(s) a step (%d tokens): per row-token p50 %.1f us, p99 %.1f us; per step p50 %.3f "
            "ms, p99 %.3f ms\n",
            m["rows"].get<int>(), m["tokens"].get<int>(), m["per_row_token_us_p50"].get<double>(),
            m["per_row_token_us_p99"].get<double>(), m["per_step_ms_p50"].get<double>(),
            m["per_step_ms_p99"].get<double>());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_constraints: %s\n", e.what());
    return 1;
  }
  return 0;
}
