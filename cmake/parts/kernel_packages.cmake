# Kernel packages (src/kernels/package.h): the example native cpu packages built into <build>/kernels/<name>/
# (rms_norm_cpu and matmul_cpu, each kernel.json beside its library), and for the tests broken builds of the
# same sources (another ABI version; no tessera_register_kernels) and wrong ones (output scaled, to show the
# loaded kernel is the one that runs) in <build>/kernel_tests/.
function(tessera_example_cpu_kernel name source)
  set(_src ${CMAKE_SOURCE_DIR}/examples/kernels/${name})
  add_library(tessera_kernel_${name} MODULE ${_src}/${source})
  target_include_directories(tessera_kernel_${name} PRIVATE ${CMAKE_SOURCE_DIR}/include)
  target_link_libraries(tessera_kernel_${name} PRIVATE m)
  # As the library's ISO C++ (no a * b + c contracted into an FMA), so the kernels sum as the built-in ones do.
  target_compile_options(tessera_kernel_${name} PRIVATE -ffp-contract=off)
  set_target_properties(tessera_kernel_${name} PROPERTIES OUTPUT_NAME ${name} C_VISIBILITY_PRESET hidden
                        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/kernels/${name})
  configure_file(${_src}/kernel.json ${CMAKE_BINARY_DIR}/kernels/${name}/kernel.json COPYONLY)
endfunction()
tessera_example_cpu_kernel(rms_norm_cpu rms_norm.c)
tessera_example_cpu_kernel(matmul_cpu matmul.c)

if(TARGET tessera_tests)
  # Test variants: <target suffix> <example> <source> <definition>.
  set(_tessera_kernel_variants
      abi99 rms_norm_cpu rms_norm.c EXAMPLE_ABI_VERSION=99
      abi1 rms_norm_cpu rms_norm.c EXAMPLE_ABI_VERSION=1
      nosym rms_norm_cpu rms_norm.c EXAMPLE_NO_REGISTER
      wrong rms_norm_cpu rms_norm.c EXAMPLE_OUTPUT_SCALE=1.5f
      matmul_abi1 matmul_cpu matmul.c EXAMPLE_ABI_VERSION=1
      matmul_nosym matmul_cpu matmul.c EXAMPLE_NO_REGISTER
      matmul_wrong matmul_cpu matmul.c EXAMPLE_OUTPUT_SCALE=1.5f)
  while(_tessera_kernel_variants)
    list(POP_FRONT _tessera_kernel_variants _variant _example _source _define)
    set(_target tessera_kernel_test_${_variant})
    add_library(${_target} MODULE ${CMAKE_SOURCE_DIR}/examples/kernels/${_example}/${_source})
    target_include_directories(${_target} PRIVATE ${CMAKE_SOURCE_DIR}/include)
    target_link_libraries(${_target} PRIVATE m)
    target_compile_options(${_target} PRIVATE -ffp-contract=off)
    target_compile_definitions(${_target} PRIVATE ${_define})
    set_target_properties(${_target} PROPERTIES C_VISIBILITY_PRESET hidden
                          LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/kernel_tests)
    add_dependencies(tessera_tests ${_target})
    string(TOUPPER ${_variant} _upper)
    target_compile_definitions(tessera_tests PRIVATE TESSERA_KERNEL_TEST_${_upper}="$<TARGET_FILE:${_target}>")
  endwhile()
  add_dependencies(tessera_tests tessera_kernel_rms_norm_cpu tessera_kernel_matmul_cpu)
  target_compile_definitions(tessera_tests PRIVATE TESSERA_EXAMPLE_KERNELS_DIR="${CMAKE_BINARY_DIR}/kernels")
endif()

# The example XLA FFI package (examples/kernels/rms_norm_ffi): a typed FFI handler built against the XLA FFI
# headers of the jaxlib wheel (scripts/requirements-kernel-headers.txt, installed into .venv by
# scripts/setup.sh; only its headers are used) into <build>/kernels/rms_norm_ffi/ beside its kernel.json and
# StableHLO. -DTESSERA_XLA_FFI_INCLUDE_DIR=<dir holding xla/ffi/api/ffi.h> overrides the lookup. Without the
# headers the package is not built and its tests skip, saying so.
set(TESSERA_XLA_FFI_INCLUDE_DIR "" CACHE PATH "Directory holding xla/ffi/api/ffi.h (default: jaxlib in .venv)")
if(NOT TESSERA_XLA_FFI_INCLUDE_DIR)
  file(GLOB _tessera_ffi_headers ${CMAKE_SOURCE_DIR}/.venv/lib/python3*/site-packages/jaxlib/include/xla/ffi/api/ffi.h)
  if(_tessera_ffi_headers)
    list(GET _tessera_ffi_headers 0 _tessera_ffi_header)
    get_filename_component(_tessera_ffi_dir ${_tessera_ffi_header} DIRECTORY)  # .../include/xla/ffi/api
    get_filename_component(_tessera_ffi_dir ${_tessera_ffi_dir}/../../.. ABSOLUTE)
    set(TESSERA_XLA_FFI_INCLUDE_DIR ${_tessera_ffi_dir} CACHE PATH
        "Directory holding xla/ffi/api/ffi.h (default: jaxlib in .venv)" FORCE)
  endif()
endif()
if(TESSERA_XLA_FFI_INCLUDE_DIR AND EXISTS ${TESSERA_XLA_FFI_INCLUDE_DIR}/xla/ffi/api/ffi.h)
  message(STATUS "XLA FFI: using ${TESSERA_XLA_FFI_INCLUDE_DIR}/xla/ffi/api/ffi.h (example FFI kernel package)")
  set(_tessera_ffi_src ${CMAKE_SOURCE_DIR}/examples/kernels/rms_norm_ffi)
  set(_tessera_ffi_out ${CMAKE_BINARY_DIR}/kernels/rms_norm_ffi)
  add_library(tessera_kernel_rms_norm_ffi MODULE ${_tessera_ffi_src}/rms_norm_ffi.cc)
  # Third-party C++ headers: system headers, so our warnings-as-errors do not apply to them.
  target_include_directories(tessera_kernel_rms_norm_ffi SYSTEM PRIVATE ${TESSERA_XLA_FFI_INCLUDE_DIR})
  target_compile_options(tessera_kernel_rms_norm_ffi PRIVATE -ffp-contract=off)
  set_target_properties(tessera_kernel_rms_norm_ffi PROPERTIES OUTPUT_NAME rms_norm_ffi
                        LIBRARY_OUTPUT_DIRECTORY ${_tessera_ffi_out})
  configure_file(${_tessera_ffi_src}/kernel.json ${_tessera_ffi_out}/kernel.json COPYONLY)
  configure_file(${_tessera_ffi_src}/rms_norm_ffi.mlir ${_tessera_ffi_out}/rms_norm_ffi.mlir COPYONLY)
  if(TARGET tessera_tests)
    # Test variants of the same source: the handler exported under another name ("missing symbol"), declaring
    # the headers' own FFI API version (0.3, newer than xla-cpu-pjrt 0.0.1's runtime), and a wrong one (output
    # scaled, to show the registered handler is what runs).
    set(_tessera_ffi_variants nosym "EXAMPLE_FFI_SYMBOL=some_other_handler" api3 "EXAMPLE_FFI_API_MINOR=-1"
        wrong "EXAMPLE_OUTPUT_SCALE=1.5f")
    while(_tessera_ffi_variants)
      list(POP_FRONT _tessera_ffi_variants _variant _define)
      set(_target tessera_kernel_test_ffi_${_variant})
      add_library(${_target} MODULE ${_tessera_ffi_src}/rms_norm_ffi.cc)
      target_include_directories(${_target} SYSTEM PRIVATE ${TESSERA_XLA_FFI_INCLUDE_DIR})
      target_compile_definitions(${_target} PRIVATE ${_define})
      target_compile_options(${_target} PRIVATE -ffp-contract=off)
      set_target_properties(${_target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/kernel_tests)
      add_dependencies(tessera_tests ${_target})
      string(TOUPPER ${_variant} _upper)
      target_compile_definitions(tessera_tests PRIVATE TESSERA_KERNEL_TEST_FFI_${_upper}="$<TARGET_FILE:${_target}>")
    endwhile()
    add_dependencies(tessera_tests tessera_kernel_rms_norm_ffi)
    target_compile_definitions(tessera_tests PRIVATE TESSERA_HAVE_FFI_EXAMPLE=1)
  endif()
else()
  message(STATUS "XLA FFI: xla/ffi/api/ffi.h not found (scripts/setup.sh installs jaxlib's headers into .venv); "
                 "the example FFI kernel package is not built and its tests are skipped")
endif()
