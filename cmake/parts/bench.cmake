# The benchmark harness's CI smoke run: bench/compare.sh --quick (tiny fixture, Tessera only, no thresholds).
if(TESSERA_TESTS)
  add_test(NAME bench_compare_quick
           COMMAND ${CMAKE_SOURCE_DIR}/bench/compare.sh --quick --out ${CMAKE_BINARY_DIR}/bench-quick.md)
  set_tests_properties(bench_compare_quick PROPERTIES
    ENVIRONMENT "TESSERA=$<TARGET_FILE:tessera_cli>;BENCH_RESULTS=${CMAKE_BINARY_DIR}/bench-results"
    TIMEOUT 120)
endif()
