# Micro-benchmark of the CPU kernels: build/bench_kernels [--quick] [--threads N] [--isa scalar|avx2|avx512]
add_executable(bench_kernels ${CMAKE_SOURCE_DIR}/bench/bench_kernels.cpp)
target_include_directories(bench_kernels PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(bench_kernels PRIVATE tessera_bench tessera)
