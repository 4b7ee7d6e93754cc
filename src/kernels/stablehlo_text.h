// The StableHLO (MLIR text) of a kernel package's PJRT implementation, read just enough to splice it into
// Tessera's own module: its func.func definitions (what jax.export's mlir_module() or a hand-written file
// holds), their signatures, and the symbols they define, renamed with a prefix so that several packages and
// Tessera's @main never collide. No MLIR library: the text is scanned with brackets and string literals
// balanced, and the plugin's own parser checks the result when the program is compiled.
#pragma once
#include <string>
#include <vector>

namespace tessera::kernels {

struct StablehloFunction {
  std::string name;                       // as defined (before renaming), e.g. "main"
  bool is_public = true;                  // not declared `private`: callable from a spliced call
  std::vector<std::string> arg_types;     // e.g. "tensor<16x64xf32>" (whitespace removed)
  std::vector<std::string> result_types;  // likewise
  std::string text;                       // the whole definition, renamed and made private
};

struct StablehloKernelText {
  std::vector<StablehloFunction> functions;  // in file order
  std::vector<std::string> aliases;          // top-level attribute alias lines ("#loc1 = ...")
  bool tpu_custom_call = false;              // holds stablehlo.custom_call @tpu_custom_call (Pallas on TPU)
  std::string prefix;                        // prepended to every symbol the file defines
};

// Parses `text` (from `file`, for errors), renaming every symbol it defines to prefix + name. Throws Error
// (one line naming the file) when no function is found or a signature cannot be read.
StablehloKernelText parse_stablehlo_kernel(const std::string& text, const std::string& file,
                                           const std::string& prefix);

// "(t1, t2) -> r" of a signature, for messages.
std::string signature_text(const std::vector<std::string>& args, const std::vector<std::string>& results);

}  // namespace tessera::kernels
