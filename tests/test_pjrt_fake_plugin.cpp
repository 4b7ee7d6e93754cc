// Header/plugin version skew, tested with fake plugins. This one file is two things:
//  - built with TESSERA_FAKE_PJRT_VARIANT (cmake/parts/pjrt.cmake makes three tiny shared libraries from it):
//    a fake PJRT plugin whose API version and function-table size are chosen per variant;
//  - built into tessera_tests: the tests that load those fakes through the real loader.
// Variants: "old"   = API 0.40 with a table that ends before PJRT_Client_Create (an older plugin);
//           "newer" = API 0.(header + 5) with a table larger than ours, whose Client_Create fails
//                     (a newer plugin; checks that its error is converted and destroyed);
//           "major" = API 1.x (incompatible).
#if defined(TESSERA_FAKE_PJRT_VARIANT)

#include <pjrt_c_api.h>

#include <cstddef>
#include <string>

struct PJRT_Error {
  std::string message;
  PJRT_Error_Code code;
};

namespace {

int live_errors = 0;

void error_destroy(PJRT_Error_Destroy_Args* a) {
  if (!a->error) return;
  delete a->error;
  --live_errors;
}
void error_message(PJRT_Error_Message_Args* a) {
  a->message = a->error->message.data();
  a->message_size = a->error->message.size();
}
PJRT_Error* error_get_code(PJRT_Error_GetCode_Args* a) {
  a->code = a->error->code;
  return nullptr;
}
PJRT_Error* initialize(PJRT_Plugin_Initialize_Args*) { return nullptr; }
PJRT_Error* attributes(PJRT_Plugin_Attributes_Args* a) {
  a->attributes = nullptr;
  a->num_attributes = 0;
  return nullptr;
}
PJRT_Error* client_create(PJRT_Client_Create_Args*) {
  ++live_errors;
  return new PJRT_Error{"fake plugin has no devices", PJRT_Error_Code_UNAVAILABLE};
}

PJRT_Api make_api() {
  PJRT_Api api{};
  api.pjrt_api_version.struct_size = PJRT_Api_Version_STRUCT_SIZE;
  api.PJRT_Error_Destroy = error_destroy;
  api.PJRT_Error_Message = error_message;
  api.PJRT_Error_GetCode = error_get_code;
  api.PJRT_Plugin_Initialize = initialize;
  api.PJRT_Plugin_Attributes = attributes;
  api.PJRT_Client_Create = client_create;
#if TESSERA_FAKE_PJRT_VARIANT == 1  // old
  api.struct_size = offsetof(PJRT_Api, PJRT_Client_Create);
  api.pjrt_api_version.major_version = 0;
  api.pjrt_api_version.minor_version = 40;
#elif TESSERA_FAKE_PJRT_VARIANT == 2  // newer: claims a longer table than this header knows
  api.struct_size = sizeof(PJRT_Api) + 8 * sizeof(void*);
  api.pjrt_api_version.major_version = PJRT_API_MAJOR;
  api.pjrt_api_version.minor_version = PJRT_API_MINOR + 5;
#else  // major
  api.struct_size = sizeof(PJRT_Api);
  api.pjrt_api_version.major_version = PJRT_API_MAJOR + 1;
  api.pjrt_api_version.minor_version = 0;
#endif
  return api;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int fake_pjrt_live_errors() { return live_errors; }

extern "C" __attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi() {
  static const PJRT_Api api = make_api();
  return &api;
}

#else  // the tests

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "backends/pjrt/pjrt_backend.h"
#include "tessera/error.h"

namespace {

using namespace tessera;

#ifdef TESSERA_FAKE_PJRT_OLD
#define REQUIRE_FAKES()                                     \
  if (!pjrt::built_with_pjrt())                             \
  GTEST_SKIP() << "built without PJRT (no pjrt_c_api.h)"

std::string error_of(const std::string& device) {
  try {
    backends::make_pjrt_backend(device);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(PjrtVersionSkew, OlderPluginLackingAFunctionIsAnError) {
  REQUIRE_FAKES();
  const std::string err = error_of(std::string("pjrt:") + TESSERA_FAKE_PJRT_OLD);
  EXPECT_TRUE(contains(err, "(PJRT API 0.40) lacks PJRT_Client_Create")) << err;
}

TEST(PjrtVersionSkew, NewerPluginIsAcceptedAndItsErrorsAreConvertedAndDestroyed) {
  REQUIRE_FAKES();
  const std::string err = error_of(std::string("pjrt:") + TESSERA_FAKE_PJRT_NEWER);
  EXPECT_TRUE(contains(err, "PJRT_Client_Create failed (UNAVAILABLE): fake plugin has no devices")) << err;
  // The loader keeps the library open; look up the fake's counter of live PJRT_Error objects.
  void* h = ::dlopen(TESSERA_FAKE_PJRT_NEWER, RTLD_LOCAL | RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr);
  auto live = reinterpret_cast<int (*)()>(::dlsym(h, "fake_pjrt_live_errors"));
  ASSERT_NE(live, nullptr);
  EXPECT_EQ(live(), 0) << "a PJRT_Error was not destroyed";
  ::dlclose(h);
}

TEST(PjrtVersionSkew, OtherMajorVersionIsRefused) {
  REQUIRE_FAKES();
  const std::string err = error_of(std::string("pjrt:") + TESSERA_FAKE_PJRT_MAJOR);
  EXPECT_TRUE(contains(err, "incompatible")) << err;
}
#endif

}  // namespace

#endif
