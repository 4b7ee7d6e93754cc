# PJRT backend: the C API header comes from the installed xla-cpu-pjrt wheel (never committed).
# -DTESSERA_PJRT_INCLUDE_DIR=<dir with pjrt_c_api.h> overrides the lookup.
set(TESSERA_PJRT_INCLUDE_DIR "" CACHE PATH "Directory containing pjrt_c_api.h (default: the xla-cpu-pjrt wheel in .venv)")
if(NOT TESSERA_PJRT_INCLUDE_DIR)
  file(GLOB _tessera_pjrt_headers
       ${CMAKE_SOURCE_DIR}/.venv/lib/python3*/site-packages/xla_plugins/xla_cpu_pjrt/include/pjrt_c_api.h)
  if(_tessera_pjrt_headers)
    list(GET _tessera_pjrt_headers 0 _tessera_pjrt_header)
    get_filename_component(_tessera_pjrt_dir ${_tessera_pjrt_header} DIRECTORY)
    set(TESSERA_PJRT_INCLUDE_DIR ${_tessera_pjrt_dir} CACHE PATH
        "Directory containing pjrt_c_api.h (default: the xla-cpu-pjrt wheel in .venv)" FORCE)
  endif()
endif()

if(TESSERA_PJRT_INCLUDE_DIR AND EXISTS ${TESSERA_PJRT_INCLUDE_DIR}/pjrt_c_api.h)
  message(STATUS "PJRT: using ${TESSERA_PJRT_INCLUDE_DIR}/pjrt_c_api.h")
  # The header is third-party C: treat it as a system header so our -Werror does not apply to it.
  target_include_directories(tessera SYSTEM PRIVATE ${TESSERA_PJRT_INCLUDE_DIR})
  target_compile_definitions(tessera PUBLIC TESSERA_HAVE_PJRT=1)
else()
  message(STATUS "PJRT: pjrt_c_api.h not found (run scripts/setup.sh to install xla-cpu-pjrt); "
                 "the PJRT backend is built as a stub that reports this at run time")
  target_compile_definitions(tessera PUBLIC TESSERA_HAVE_PJRT=0)
endif()

# Fake plugins for the version-skew and start-up tests (tests/test_pjrt_fake_plugin.cpp built four ways).
if(TARGET tessera_tests AND TESSERA_PJRT_INCLUDE_DIR AND EXISTS ${TESSERA_PJRT_INCLUDE_DIR}/pjrt_c_api.h)
  set(_tessera_fake_variants old newer major blocking)
  set(_tessera_fake_index 1)
  foreach(variant ${_tessera_fake_variants})
    set(_target tessera_fake_pjrt_${variant})
    add_library(${_target} MODULE ${CMAKE_SOURCE_DIR}/tests/test_pjrt_fake_plugin.cpp)
    target_include_directories(${_target} SYSTEM PRIVATE ${TESSERA_PJRT_INCLUDE_DIR})
    target_compile_definitions(${_target} PRIVATE TESSERA_FAKE_PJRT_VARIANT=${_tessera_fake_index})
    set_target_properties(${_target} PROPERTIES CXX_VISIBILITY_PRESET hidden)
    add_dependencies(tessera_tests ${_target})
    string(TOUPPER ${variant} _upper)
    target_compile_definitions(tessera_tests PRIVATE TESSERA_FAKE_PJRT_${_upper}="$<TARGET_FILE:${_target}>")
    math(EXPR _tessera_fake_index "${_tessera_fake_index} + 1")
  endforeach()
endif()
