// Encode throughput of tessera::Tokenizer on one thread.
//   bench_tokenizer TOKENIZER_DIR_OR_GGUF CORPUS.jsonl [passes]
// CORPUS.jsonl: one {"text": ...} document per line (bench/tokenizer_corpus.py).
// Each document is encoded with one encode() call (no special tokens); one
// warm-up pass, then the best of `passes` timed passes is reported.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "tessera/error.h"
#include "tessera/tokenizer.h"
#include "tokenizer/gguf_vocab.h"

namespace {

tessera::Tokenizer load(const std::string& path) {
  if (path.size() > 5 && path.substr(path.size() - 5) == ".gguf") {
    return tessera::Tokenizer::from_gguf(tessera::gguf_tokenizer_data(*tessera::io::GgufFile::open(path)));
  }
  if (path.size() > 5 && path.substr(path.size() - 5) == ".json") return tessera::Tokenizer::from_json_file(path);
  return tessera::Tokenizer::from_dir(path);
}

std::vector<std::string> read_corpus(const std::string& path) {
  std::ifstream in(path);
  if (!in) tessera::fail(path, ": cannot open corpus");
  std::vector<std::string> docs;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) docs.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
  }
  return docs;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR_OR_GGUF CORPUS.jsonl [passes]\n", argv[0]);
    return 2;
  }
  try {
    const tessera::Tokenizer tok = load(argv[1]);
    const std::vector<std::string> docs = read_corpus(argv[2]);
    const int passes = argc > 3 ? std::max(1, std::atoi(argv[3])) : 5;
    size_t bytes = 0;
    for (const auto& d : docs) bytes += d.size();

    size_t tokens = 0;
    double best = 1e30;
    for (int p = 0; p <= passes; ++p) {  // pass 0 warms up (fills the word cache, as HF's)
      size_t n = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (const auto& d : docs) n += tok.encode(d).size();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (p > 0) best = std::min(best, s);
      tokens = n;
    }
    std::printf("tessera: %zu docs, %.2f MB, %zu tokens, best of %d: %.3f s, %.2f MB/s, %.0f tokens/s\n",
                docs.size(), bytes / 1e6, tokens, passes, best, bytes / 1e6 / best, tokens / best);
  } catch (const tessera::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
