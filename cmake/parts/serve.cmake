# HTTP clients from Debian's cpp-httplib (libcpp-httplib-dev: a shared library plus its header; its pkg-config
# file carries the defines the library was built with, which the header must see too): `tessera chat --server`
# and the tests' client. The server itself is apps/http_server.cpp (Boost.Beast, CMakeLists.txt).
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
target_link_libraries(tessera_cli PRIVATE PkgConfig::HTTPLIB)
if(TARGET tessera_tests)
  # tests/serve_test_util.h (test_serve_http.cpp, test_serve_concurrent.cpp): a real client
  target_link_libraries(tessera_tests PRIVATE PkgConfig::HTTPLIB)
endif()
if(TARGET tessera_tests AND NOT TESSERA_TSAN)
  # Python clients (the pinned openai package; scripts/test.sh installs .venv-test) against the real server:
  # tests/SCRIPT --tessera build/tessera [ARGS...]; skipped (77) without .venv-test.
  set(_tessera_test_py ${CMAKE_SOURCE_DIR}/.venv-test/bin/python)
  function(tessera_serve_client_test name script)
    set(args "")
    foreach(a ${ARGN})
      string(APPEND args " '${a}'")
    endforeach()
    add_test(NAME ${name}
             COMMAND sh -c "if [ -x '${_tessera_test_py}' ]; then exec '${_tessera_test_py}' '${CMAKE_SOURCE_DIR}/tests/${script}' --tessera '$<TARGET_FILE:tessera_cli>'${args}; else echo 'SKIP: no .venv-test (scripts/test.sh makes it)'; exit 77; fi")
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
  endfunction()
  # Chat and completions, streamed and not, and curl.
  tessera_serve_client_test(Cli.ServeOpenAiPythonClientAndCurl serve_openai_client.py)
  # Structured output (response_format, structured_outputs), validated by jsonschema.
  tessera_serve_client_test(Cli.ServeStructuredOutputsOpenAiClient serve_structured_client.py
                            --schemas ${CMAKE_SOURCE_DIR}/tests/fixtures/schemas)
  # Tool calls (tools, tool_choice, streamed deltas, auto parsing).
  tessera_serve_client_test(Cli.ServeToolCallsOpenAiClient serve_tools_client.py)
  # The Responses API (POST /v1/responses) through responses.create, whole and streamed.
  tessera_serve_client_test(Cli.ServeResponsesApiOpenAiClient serve_responses_client.py)
endif()

# Constrained decoding's host costs (vocabulary build, schema compile, masks per token):
# build/bench_constraints --tokenizer DIR --schemas tests/fixtures/schemas (bench/constraint_bench.sh runs it).
add_executable(bench_constraints ${CMAKE_SOURCE_DIR}/bench/bench_constraints.cpp)
target_include_directories(bench_constraints PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(bench_constraints PRIVATE tessera nlohmann_json::nlohmann_json)
