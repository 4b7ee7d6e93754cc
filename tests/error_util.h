// Checking the tessera::Error a call throws. Header-only; tests only.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "tessera/error.h"

namespace tessera::testing {

// The message of the tessera::Error that f() throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// f() must throw a tessera::Error whose message contains `needle`.
inline void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace tessera::testing
