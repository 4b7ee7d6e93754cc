# The Python package's extension module (python/, built by scikit-build-core: `pip install ./python`). Off by
# default: the plain build is unchanged. The static library is compiled position-independent so that it can be
# linked into the shared `_tessera` module; nanobind is found through the Python that runs the build.
option(TESSERA_PYTHON "Build the _tessera Python extension module (python/)" OFF)
if(TESSERA_PYTHON)
  # Hidden visibility: the library is linked whole into one module, which need export nothing but its init
  # function; default-visibility symbols in a shared object are interposable (calls between the library's
  # functions through the PLT, and no inlining of them), as they are not in the command's executable.
  set_target_properties(tessera PROPERTIES POSITION_INDEPENDENT_CODE ON CXX_VISIBILITY_PRESET hidden
                                           C_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
  # Asked on every configure: pip's isolated build environment (and so nanobind's path) is new each time.
  execute_process(COMMAND ${Python_EXECUTABLE} -m nanobind --cmake_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                  OUTPUT_VARIABLE _tessera_nb_dir RESULT_VARIABLE _tessera_nb_rc)
  if(NOT _tessera_nb_rc EQUAL 0)
    message(FATAL_ERROR "TESSERA_PYTHON: nanobind is not installed for ${Python_EXECUTABLE}")
  endif()
  set(nanobind_DIR ${_tessera_nb_dir} CACHE PATH "nanobind's CMake directory" FORCE)
  find_package(nanobind CONFIG REQUIRED)
  file(GLOB TESSERA_PYTHON_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/python/src/*.cpp)
  nanobind_add_module(_tessera NB_STATIC ${TESSERA_PYTHON_SOURCES})
  # src/ for the device table (backends/registry.h), which the public headers do not offer yet.
  target_include_directories(_tessera PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(_tessera PRIVATE tessera nlohmann_json::nlohmann_json)
  install(TARGETS _tessera LIBRARY DESTINATION tessera COMPONENT python)
endif()
