// The one way untrusted JSON (config.json, generation_config.json, tokenizer
// files, safetensors headers) becomes nlohmann::json: read from a regular file
// of bounded size, nesting depth bounded before parsing (nlohmann's dump() and
// every walk over a value recurse once per level, so 100k-deep legal JSON would
// overflow the stack), and every error one line naming the file.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tessera::io {

// Deepest nesting accepted. Real configs and tokenizer files nest < 10 levels;
// 128 leaves room for odd-but-legal files and keeps recursion trivially safe.
inline constexpr int kMaxJsonDepth = 128;

// Size caps for reading whole files into memory (checked with fstat before reading).
// config.json / generation_config.json / tokenizer_config.json / *.index.json /
// chat_template.jinja are kilobytes; the largest safetensors indexes (MoE models with
// ~100k tensors) are ~10 MB. 64 MiB is generous for all of them.
inline constexpr size_t kMaxConfigFileBytes = size_t{64} << 20;
// tokenizer.json: real ones are 2-35 MB (Gemma 3's is ~33 MB); 128 MiB leaves room.
inline constexpr size_t kMaxTokenizerFileBytes = size_t{128} << 20;

// Parses `text`; `name` (usually the path) prefixes every error. Throws Error when the text
// is not JSON or nests deeper than `max_depth`.
nlohmann::json parse_json(std::string_view text, const std::string& name, int max_depth = kMaxJsonDepth);
// The same, keeping object keys in file order.
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& name,
                                          int max_depth = kMaxJsonDepth);

// Throws Error when `text` nests arrays/objects deeper than `max_depth` (strings are skipped
// correctly; on malformed input the count is an upper bound, so this never lets depth through).
void check_json_depth(std::string_view text, const std::string& name, int max_depth = kMaxJsonDepth);

// Reads the whole regular file `path` (symlinks followed), refusing FIFOs, devices,
// directories and files over `max_bytes` before reading anything. Errors name the path.
std::string read_regular_file(const std::string& path, size_t max_bytes);

// read_regular_file + parse_json (capped at kMaxConfigFileBytes unless told otherwise).
nlohmann::json read_json_file(const std::string& path, size_t max_bytes = kMaxConfigFileBytes);
// read_json_file that also requires a JSON object at the top level.
nlohmann::json read_json_object_file(const std::string& path, size_t max_bytes = kMaxConfigFileBytes);

// The message of a nlohmann exception without its "[json.exception.xxx.nnn] " prefix.
std::string json_error_text(const std::exception& e);

}  // namespace tessera::io
