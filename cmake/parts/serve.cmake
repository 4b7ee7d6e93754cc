# `tessera serve`: HTTP from Debian's cpp-httplib (libcpp-httplib-dev: a shared library plus its header; its
# pkg-config file carries the defines the library was built with, which the header must see too).
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
target_link_libraries(tessera_cli PRIVATE PkgConfig::HTTPLIB)
if(TARGET tessera_tests)
  target_link_libraries(tessera_tests PRIVATE PkgConfig::HTTPLIB)  # tests/test_serve_http.cpp: a real client
endif()
