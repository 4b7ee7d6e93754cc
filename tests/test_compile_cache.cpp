// Prompt buckets, warm-up, the recompile guard and the on-disk compile cache, through the public API.
// Two CausalLM objects loading the same model stand in for two processes (each has its own backend and
// in-memory cache; only the disk directory is shared).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "backends/pjrt/pjrt_info.h"
#include "cli_util.h"
#include "golden_util.h"
#include "pjrt_test_util.h"
#include "runtime/compile_cache.h"
#include "tessera/error.h"
#include "tessera/model.h"

using namespace tessera;
namespace golden = tessera::golden;
namespace fs = std::filesystem;

namespace {

CausalLM load(const std::string& device, const std::string& buckets = "auto", const std::string& disk = "",
              int max_recompiles = -1) {
  LoadOptions opt;
  opt.dtype = DType::F32;
  opt.device_map = device;
  opt.buckets = buckets;
  opt.compile_cache_dir = disk;
  opt.max_recompiles = max_recompiles;
  return AutoModelForCausalLM::from_pretrained(golden::model_path("qwen3_tied"), opt);
}

GenerationConfig greedy(int n) {
  GenerationConfig g;
  g.max_new_tokens = n;
  return g;
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "tessera_cc_" + name + "_" + std::to_string(::getpid());
  fs::remove_all(dir);
  return dir;
}

// 20 prompt lengths between 3 and 200.
std::vector<int> mixed_lengths() {
  return {3, 200, 17, 5, 31, 64, 65, 100, 9, 128, 12, 150, 33, 47, 190, 16, 70, 3, 99, 129};
}

std::vector<int32_t> prompt(int len) {
  std::vector<int32_t> ids(static_cast<size_t>(len));
  for (int i = 0; i < len; ++i) ids[static_cast<size_t>(i)] = 5 + (i * 7) % 400;
  return ids;
}

TEST(Buckets, ParsingAndPolicy) {
  CausalLM cpu = load("cpu");
  EXPECT_TRUE(cpu.prompt_buckets().empty()) << "native cpu: exact lengths by default";
  EXPECT_EQ(cpu.prompt_bucket(37), 37);
  CausalLM pow2 = load("cpu", "pow2");
  EXPECT_EQ(pow2.prompt_buckets(), (std::vector<int>{16, 32, 64, 128, 256}));
  EXPECT_EQ(pow2.prompt_bucket(3), 16);
  EXPECT_EQ(pow2.prompt_bucket(17), 32);
  EXPECT_EQ(pow2.prompt_bucket(256), 256);
  CausalLM list = load("cpu", "8,24");
  EXPECT_EQ(list.prompt_bucket(9), 24);
  EXPECT_EQ(list.prompt_bucket(30), 30) << "longer than the largest bucket: exact length";
  for (const char* bad : {"0", "16,8", "abc", "16,,32", "999"})
    EXPECT_THROW(load("cpu", bad), Error) << bad;
}

TEST(Buckets, PaddedPrefillGivesTheSameTokens) {
  CausalLM exact = load("cpu", "exact");
  CausalLM bucketed = load("cpu", "16,64");
  for (int len : {3, 16, 20}) {
    auto a = exact.generate({prompt(len)}, {}, greedy(12));
    auto b = bucketed.generate({prompt(len)}, {}, greedy(12));
    EXPECT_EQ(a.sequences, b.sequences) << "len " << len;
    EXPECT_EQ(b.prefill_len, len <= 16 ? 16 : 64);
    EXPECT_EQ(b.prompt_tokens, len);
  }
  ::testing::internal::CaptureStderr();
  auto c = bucketed.generate({prompt(70)}, {}, greedy(2));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(c.prefill_len, 70);
  EXPECT_NE(err.find("longer than the largest bucket (64)"), std::string::npos) << err;
}

TEST(RecompileGuard, AfterTheFirstGenerateANewShapeIsAnErrorNamingTheChange) {
  CausalLM m = load("cpu", "16,32", "", 0);
  m.generate({prompt(5)}, {}, greedy(4));
  m.generate({prompt(12)}, {}, greedy(4));  // same bucket, same shapes: fine
  try {
    m.generate({prompt(20)}, {}, greedy(4));
    FAIL() << "expected the recompile guard to fire";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("max-recompiles"), std::string::npos) << msg;
    EXPECT_NE(msg.find("seq 16 -> 32"), std::string::npos) << msg;
  }
  // Two allowed: one new bucket (its prefill and decode) passes, the next fails.
  CausalLM one = load("cpu", "16,32,64", "", 2);
  one.generate({prompt(5)}, {}, greedy(4));
  EXPECT_NO_THROW(one.generate({prompt(20)}, {}, greedy(4)));
  EXPECT_THROW(one.generate({prompt(40)}, {}, greedy(4)), Error);
}

TEST(RecompileGuard, WarmupCompilesEveryBucketThenNothingIsNew) {
  CausalLM m = load("cpu", "16,32,64", "", 0);
  EXPECT_EQ(m.warmup(1, 8), 6);  // prefill + decode per bucket
  for (int len : {3, 17, 33, 64, 10}) {
    auto out = m.generate({prompt(len)}, {}, greedy(8));
    EXPECT_EQ(out.compiles.compiles, 0) << len;
  }
  EXPECT_THROW(m.generate({prompt(5)}, {}, greedy(9)), Error) << "max_new_tokens changes the cache length";
}

// The library takes LoadOptions::max_recompiles and reads no environment; the tessera command fills it from
// --max-recompiles, else $TESSERA_MAX_RECOMPILES. After --warmup (buckets 16 and 32, a static cache of 3 new
// tokens) a dynamic-cache generation needs new shapes: allowed without a limit, an error with the limit 0.
TEST(RecompileGuard, EnvironmentVariableSetsTheLimit) {
  const std::string gen = "generate " + golden::model_path("qwen3_tied") +
                          " --dtype float32 --buckets 16,32 --warmup --max-new-tokens 3 --cache-implementation "
                          "dynamic --input-ids 5,6,7 -q";
  ::unsetenv("TESSERA_MAX_RECOMPILES");
  auto r = tessera::testing::run_cli(gen);
  EXPECT_EQ(r.code, 0) << r.err;
  ::setenv("TESSERA_MAX_RECOMPILES", "0", 1);
  r = tessera::testing::run_cli(gen);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("max-recompiles"), std::string::npos) << r.err;
  EXPECT_EQ(tessera::testing::run_cli(gen + " --max-recompiles 5").code, 0) << "the flag wins over the variable";
  ::setenv("TESSERA_MAX_RECOMPILES", "many", 1);
  r = tessera::testing::run_cli(gen);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("TESSERA_MAX_RECOMPILES='many'"), std::string::npos) << r.err;
  ::unsetenv("TESSERA_MAX_RECOMPILES");
}

// Issue 4 item 7: 20 prompts of lengths 3..200 compile at most one prefill per bucket plus one decode per
// bucket; a second "process" with the on-disk cache compiles nothing.
TEST(DiskCache, MixedWorkloadColdThenWarm) {
  REQUIRE_XLA_CPU();
  const std::string dir = fresh_dir("mixed");
  std::set<int> buckets;
  std::vector<std::vector<int32_t>> cold_out;
  {
    CausalLM m = load("xla-cpu", "auto", dir);
    for (int len : mixed_lengths()) {
      buckets.insert(m.prompt_bucket(len));
      cold_out.push_back(m.generate({prompt(len)}, {}, greedy(6)).sequences[0]);
    }
    const CompileReport r = m.compile_stats();
    EXPECT_EQ(r.compiles, 2 * static_cast<int>(buckets.size())) << "one prefill + one decode per bucket";
    EXPECT_EQ(r.disk_hits, 0);
    std::printf("[ compile cache ] cold: 20 prompts, %zu buckets, %d compiles (%.2f s, first %.2f s)\n",
                buckets.size(), r.compiles, r.compile_seconds, r.first_compile_seconds);
  }
  CausalLM warm = load("xla-cpu", "auto", dir);
  std::vector<std::vector<int32_t>> warm_out;
  for (int len : mixed_lengths()) warm_out.push_back(warm.generate({prompt(len)}, {}, greedy(6)).sequences[0]);
  const CompileReport r = warm.compile_stats();
  EXPECT_EQ(r.compiles, 0) << "the second process compiles nothing";
  EXPECT_EQ(r.disk_hits, 2 * static_cast<int>(buckets.size()));
  EXPECT_EQ(warm_out, cold_out);
  std::printf("[ compile cache ] warm: %d compiles, %d loaded from disk in %.2f s\n", r.compiles, r.disk_hits,
              r.load_seconds);
  fs::remove_all(dir);
}

// Corrupt, foreign and other-plugin entries are ignored with a reason (never a crash) and rewritten.
TEST(DiskCache, CorruptForeignAndOtherPluginEntriesRecompile) {
  REQUIRE_XLA_CPU();
  const std::string dir = fresh_dir("corrupt");
  const auto ids = prompt(5);
  std::vector<int32_t> expect;
  {
    CausalLM m = load("xla-cpu", "16", dir);
    expect = m.generate({ids}, {}, greedy(1)).sequences[0];  // one prefill entry
  }
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(dir)) entries.push_back(e.path());
  ASSERT_EQ(entries.size(), 1u);
  const fs::path entry = entries[0];
  std::string bytes;
  {
    std::ifstream in(entry, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto run_with = [&](const std::string& content, const fs::path& where, const char* expect_reason,
                      bool expect_warning) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(where, std::ios::binary) << content;
    CausalLM m = load("xla-cpu", "16", dir);
    ::testing::internal::CaptureStderr();
    auto out = m.generate({ids}, {}, greedy(1));
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(out.sequences[0], expect);
    EXPECT_EQ(out.compiles.compiles, 1) << expect_reason;
    EXPECT_EQ(out.compiles.disk_hits, 0) << expect_reason;
    ASSERT_EQ(out.compiles.misses.size(), 1u);
    EXPECT_NE(out.compiles.misses[0].find(expect_reason), std::string::npos) << out.compiles.misses[0];
    EXPECT_EQ(err.find("tessera: warning: compile cache: ignoring") != std::string::npos, expect_warning) << err;
    // The entry was rewritten: a third process loads it.
    CausalLM again = load("xla-cpu", "16", dir);
    auto hit = again.generate({ids}, {}, greedy(1));
    EXPECT_EQ(hit.compiles.disk_hits, 1) << expect_reason;
    EXPECT_EQ(hit.sequences[0], expect);
  };
  std::string flipped = bytes;
  flipped[flipped.size() - 100] ^= 0x5a;
  run_with(flipped, entry, "entry corrupt (payload checksum mismatch)", true);
  run_with(bytes.substr(0, bytes.size() / 2), entry, "entry corrupt (payload is", true);
  run_with("garbage", entry, "entry corrupt", true);
  std::string foreign = bytes;
  foreign.replace(foreign.find("compiler ") + 9, 8, "xxxxxxxx");  // another compiler's header
  run_with(foreign, entry, "foreign entry", true);
  // Same program, another compiler: the file name's compiler hash differs.
  const std::string name = entry.filename().string();
  run_with(bytes, entry.parent_path() / (name.substr(0, name.find('-') + 1) + "0000000000000000.tsx"),
           "plugin changed", false);
  fs::remove_all(dir);
}

TEST(DiskCache, NativeCpuSaysItKeepsNoDiskCacheAndUnwritableDirOnlyWarns) {
  CausalLM m = load("cpu", "auto", fresh_dir("cpu"));
  auto out = m.generate({prompt(4)}, {}, greedy(2));
  ASSERT_FALSE(out.compiles.misses.empty());
  EXPECT_NE(out.compiles.misses[0].find("keeps no on-disk cache"), std::string::npos) << out.compiles.misses[0];
  if (!tessera::testing::xla_cpu_plugin_available()) return;
  CausalLM x = load("xla-cpu", "16", "/proc/tessera_no_such_dir");
  ::testing::internal::CaptureStderr();
  auto y = x.generate({prompt(4)}, {}, greedy(1));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(y.compiles.compiles, 1);
  EXPECT_NE(err.find("compile cache: not saved"), std::string::npos) << err;
}

}  // namespace
