# Kernel packages (src/kernels/package.h): the example native cpu package built into
# <build>/kernels/rms_norm_cpu/ (its kernel.json beside its library), and for the tests two broken builds of the
# same source (another ABI version; no tessera_register_kernels) and a wrong one (output scaled, to
# show the loaded kernel is the one that runs) in <build>/kernel_tests/.
set(_tessera_kernel_src ${CMAKE_SOURCE_DIR}/examples/kernels/rms_norm_cpu)
set(_tessera_kernel_out ${CMAKE_BINARY_DIR}/kernels/rms_norm_cpu)
add_library(tessera_kernel_rms_norm_cpu MODULE ${_tessera_kernel_src}/rms_norm.c)
target_include_directories(tessera_kernel_rms_norm_cpu PRIVATE ${CMAKE_SOURCE_DIR}/include)
target_link_libraries(tessera_kernel_rms_norm_cpu PRIVATE m)
# As the library's ISO C++ (no a * b + c contracted into an FMA), so the kernels sum as the built-in ones do.
target_compile_options(tessera_kernel_rms_norm_cpu PRIVATE -ffp-contract=off)
set_target_properties(tessera_kernel_rms_norm_cpu PROPERTIES OUTPUT_NAME rms_norm_cpu C_VISIBILITY_PRESET hidden
                      LIBRARY_OUTPUT_DIRECTORY ${_tessera_kernel_out})
configure_file(${_tessera_kernel_src}/kernel.json ${_tessera_kernel_out}/kernel.json COPYONLY)

if(TARGET tessera_tests)
  foreach(variant abi99 nosym wrong)
    set(_target tessera_kernel_test_${variant})
    add_library(${_target} MODULE ${_tessera_kernel_src}/rms_norm.c)
    target_include_directories(${_target} PRIVATE ${CMAKE_SOURCE_DIR}/include)
    target_link_libraries(${_target} PRIVATE m)
    target_compile_options(${_target} PRIVATE -ffp-contract=off)
    set_target_properties(${_target} PROPERTIES C_VISIBILITY_PRESET hidden
                          LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/kernel_tests)
    add_dependencies(tessera_tests ${_target})
  endforeach()
  target_compile_definitions(tessera_kernel_test_abi99 PRIVATE EXAMPLE_ABI_VERSION=99)
  target_compile_definitions(tessera_kernel_test_nosym PRIVATE EXAMPLE_NO_REGISTER)
  target_compile_definitions(tessera_kernel_test_wrong PRIVATE EXAMPLE_OUTPUT_SCALE=1.5f)
  add_dependencies(tessera_tests tessera_kernel_rms_norm_cpu)
  target_compile_definitions(tessera_tests PRIVATE
    TESSERA_EXAMPLE_KERNELS_DIR="${CMAKE_BINARY_DIR}/kernels"
    TESSERA_KERNEL_TEST_ABI99="$<TARGET_FILE:tessera_kernel_test_abi99>"
    TESSERA_KERNEL_TEST_NOSYM="$<TARGET_FILE:tessera_kernel_test_nosym>"
    TESSERA_KERNEL_TEST_WRONG="$<TARGET_FILE:tessera_kernel_test_wrong>")
endif()
