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
  # The openai Python client and curl against the real server (scripts/test.sh installs .venv-test).
  set(_tessera_test_py ${CMAKE_SOURCE_DIR}/.venv-test/bin/python)
  add_test(NAME Cli.ServeOpenAiPythonClientAndCurl
           COMMAND sh -c "if [ -x '${_tessera_test_py}' ]; then exec '${_tessera_test_py}' '${CMAKE_SOURCE_DIR}/tests/serve_openai_client.py' --tessera '$<TARGET_FILE:tessera_cli>'; else echo 'SKIP: no .venv-test (scripts/test.sh makes it)'; exit 77; fi")
  set_tests_properties(Cli.ServeOpenAiPythonClientAndCurl PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
  # Structured output (response_format, structured_outputs) through the openai client, validated by jsonschema.
  add_test(NAME Cli.ServeStructuredOutputsOpenAiClient
           COMMAND sh -c "if [ -x '${_tessera_test_py}' ]; then exec '${_tessera_test_py}' '${CMAKE_SOURCE_DIR}/tests/serve_structured_client.py' --tessera '$<TARGET_FILE:tessera_cli>' --schemas '${CMAKE_SOURCE_DIR}/tests/fixtures/schemas'; else echo 'SKIP: no .venv-test (scripts/test.sh makes it)'; exit 77; fi")
  set_tests_properties(Cli.ServeStructuredOutputsOpenAiClient PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
  # Tool calls (tools, tool_choice, streamed deltas, auto parsing) through the openai client.
  add_test(NAME Cli.ServeToolCallsOpenAiClient
           COMMAND sh -c "if [ -x '${_tessera_test_py}' ]; then exec '${_tessera_test_py}' '${CMAKE_SOURCE_DIR}/tests/serve_tools_client.py' --tessera '$<TARGET_FILE:tessera_cli>'; else echo 'SKIP: no .venv-test (scripts/test.sh makes it)'; exit 77; fi")
  set_tests_properties(Cli.ServeToolCallsOpenAiClient PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
  # The Responses API (POST /v1/responses) through the openai client's responses.create, whole and streamed.
  add_test(NAME Cli.ServeResponsesApiOpenAiClient
           COMMAND sh -c "if [ -x '${_tessera_test_py}' ]; then exec '${_tessera_test_py}' '${CMAKE_SOURCE_DIR}/tests/serve_responses_client.py' --tessera '$<TARGET_FILE:tessera_cli>'; else echo 'SKIP: no .venv-test (scripts/test.sh makes it)'; exit 77; fi")
  set_tests_properties(Cli.ServeResponsesApiOpenAiClient PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()

# Constrained decoding's host costs (vocabulary build, schema compile, masks per token):
# build/bench_constraints --tokenizer DIR --schemas tests/fixtures/schemas (bench/constraint_bench.sh runs it).
add_executable(bench_constraints ${CMAKE_SOURCE_DIR}/bench/bench_constraints.cpp)
target_include_directories(bench_constraints PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(bench_constraints PRIVATE tessera nlohmann_json::nlohmann_json)
