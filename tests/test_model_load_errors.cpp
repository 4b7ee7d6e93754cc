// Bad checkpoints: each gets one clear error naming the file and the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "golden_util.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

// A scratch copy of a fixture model that a test may damage.
class ScratchModel {
 public:
  explicit ScratchModel(const std::string& fixture) {
    dir_ = fs::temp_directory_path() /
           ("tessera_model_" + std::to_string(::getpid()) + "_" + fixture + "_" + std::to_string(counter_++));
    fs::remove_all(dir_);
    fs::copy(golden::model_path(fixture), dir_, fs::copy_options::recursive);
    config_ = nlohmann::json::parse(std::ifstream(dir_ / "config.json"));
  }
  ~ScratchModel() { fs::remove_all(dir_); }
  nlohmann::json& config() { return config_; }
  void save_config() { std::ofstream(dir_ / "config.json") << config_.dump(2); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  std::string path() const { return dir_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
  nlohmann::json config_;
};

std::string load_error(const std::string& path) {
  try {
    LoadOptions opt;
    opt.dtype = DType::F32;
    AutoModelForCausalLM::from_pretrained(path, opt);
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "error spans lines: " << msg;
    return msg;
  }
  return "no error";
}

#define EXPECT_HAS(hay, needle) EXPECT_NE((hay).find(needle), std::string::npos) << (hay)

TEST(ModelLoadErrors, UnknownArchitectureListsSupported) {
  ScratchModel m("qwen3_tied");
  m.config()["architectures"] = {"MambaForCausalLM"};
  m.save_config();
  std::string e = load_error(m.path());
  EXPECT_HAS(e, "MambaForCausalLM");
  EXPECT_HAS(e, "Qwen3ForCausalLM");
  EXPECT_HAS(e, "LlamaForCausalLM");
}

TEST(ModelLoadErrors, MissingConfigField) {
  ScratchModel m("qwen3_tied");
  m.config().erase("num_hidden_layers");
  m.save_config();
  std::string e = load_error(m.path());
  EXPECT_HAS(e, "num_hidden_layers");
  EXPECT_HAS(e, "config");
}

TEST(ModelLoadErrors, MalformedConfigJson) {
  ScratchModel m("qwen3_tied");
  m.write("config.json", "{\"architectures\": [\"Qwen3ForCausalLM\",");
  EXPECT_HAS(load_error(m.path()), "config.json");
}

TEST(ModelLoadErrors, ConfigShapeDisagreesWithTensors) {
  ScratchModel m("qwen3_tied");
  m.config()["intermediate_size"] = 96;
  m.save_config();
  std::string e = load_error(m.path());
  EXPECT_HAS(e, "mlp.gate_proj.weight");
  EXPECT_HAS(e, "[96, 64]");
  EXPECT_HAS(e, "model.safetensors");
}

TEST(ModelLoadErrors, MoreLayersThanTheCheckpointHas) {
  ScratchModel m("qwen3_tied");
  m.config()["num_hidden_layers"] = 3;
  m.config()["layer_types"] = {"full_attention", "full_attention", "full_attention"};  // consistent with 3
  m.save_config();
  std::string e = load_error(m.path());
  EXPECT_HAS(e, "missing tensor 'model.layers.2.");
}

TEST(ModelLoadErrors, FewerLayersReportsUnexpectedTensors) {
  ScratchModel m("qwen3_tied");
  m.config()["num_hidden_layers"] = 1;
  m.config()["layer_types"] = {"full_attention"};  // consistent with 1
  m.save_config();
  EXPECT_HAS(load_error(m.path()), "unexpected tensors");
}

TEST(ModelLoadErrors, UnsupportedDtypeAndRopeType) {
  ScratchModel m("llama_gqa");
  m.config()["torch_dtype"] = "float8_e4m3fn";
  m.save_config();
  EXPECT_HAS(load_error(m.path()), "float8_e4m3fn");
  ScratchModel r("llama_gqa");
  r.config()["rope_scaling"]["rope_type"] = "dynamic";
  r.save_config();
  EXPECT_HAS(load_error(r.path()), "dynamic");
}

TEST(ModelLoadErrors, HeadsNotDivisibleByKvHeads) {
  ScratchModel m("llama_gqa");
  m.config()["num_key_value_heads"] = 4;
  m.save_config();
  EXPECT_HAS(load_error(m.path()), "num_key_value_heads");
}

TEST(ModelLoadErrors, MissingDirectorySaysWhereItLooked) {
  std::string e = load_error("no-such-org/no-such-model");
  EXPECT_HAS(e, "no-such-org/no-such-model");
}

TEST(ModelLoad, BfloatCheckpointLoadsAsBfloat16) {
  // qwen3_untied is stored in bfloat16 (the zero-copy mapping itself is checked in test_io_*).
  LoadOptions opt;
  opt.dtype = DType::BF16;
  CausalLM m = AutoModelForCausalLM::from_pretrained(golden::model_path("qwen3_untied"), opt);
  EXPECT_EQ(m.info().dtype, DType::BF16);
  EXPECT_EQ(m.info().architecture, "Qwen3ForCausalLM");
}

}  // namespace
