// The default model lookup moved out of the library into the tessera command (apps/default_model.h,
// cli::find_default_model): the library reads no environment and bakes no path. This header keeps the old
// include and name, io::find_default_model, for test files that have not switched yet (test_tp.cpp); a test
// file's "io/model_files.h" finds this one beside it. Remove it once nothing includes it.
#pragma once
#include "default_model.h"

namespace tessera::io {
using cli::default_model_search_dirs;
using cli::find_default_model;
}  // namespace tessera::io
