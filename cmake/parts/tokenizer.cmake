# Tokenizer benchmark: encode throughput (MB/s, tokens/s) on one thread.
add_executable(bench_tokenizer ${CMAKE_SOURCE_DIR}/bench/bench_tokenizer.cpp)
target_include_directories(bench_tokenizer PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(bench_tokenizer PRIVATE tessera nlohmann_json::nlohmann_json)
