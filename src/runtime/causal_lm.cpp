// CausalLM: the public methods of a loaded model. Loading is in loading.cpp, the generate loop in
// src/generation/generate.cpp, the step API in src/generation/slot_batch.cpp.
#include <algorithm>
#include <memory>

#include "generation/generate.h"
#include "runtime/model_core.h"
#include "sampling/sampler.h"
#include "tessera/error.h"
#include "tessera/model.h"

namespace tessera {

using backends::StepInputs;
using graph::Phase;
using graph::ShapeKey;

CausalLM::CausalLM(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CausalLM::CausalLM(CausalLM&&) noexcept = default;
CausalLM& CausalLM::operator=(CausalLM&&) noexcept = default;
CausalLM::~CausalLM() = default;

const GenerationConfig& CausalLM::generation_config() const { return impl_->gen_defaults; }
const ModelInfo& CausalLM::info() const { return impl_->info; }

CompileReport CausalLM::compile_stats() const { return runtime::compile_report({}, impl_->compile_stats()); }

int CausalLM::prompt_bucket(int len) const { return impl_->bucket_for(len, false); }
const std::vector<int>& CausalLM::prompt_buckets() const { return impl_->buckets; }

int CausalLM::warmup(int batch, int max_new_tokens, bool do_sample, int max_prompt) {
  Impl& m = *impl_;
  if (batch < 1) fail("warmup: batch must be >= 1, got ", batch);
  if (max_new_tokens < 0) fail("warmup: max_new_tokens must be >= 0, got ", max_new_tokens);
  const graph::Sampling sampling = m.sampling_for(true, do_sample);
  const runtime::CompileStats before = m.compile_stats();
  auto build = [&m](const ShapeKey& k) { return m.build(k); };
  for (int bucket : m.buckets) {
    if (max_prompt > 0 && bucket > m.bucket_for(max_prompt, false)) break;
    const int cache_len = bucket + max_new_tokens;
    m.cache->get({.phase = Phase::Prefill,
                  .batch = batch,
                  .seq = bucket,
                  .cache_len = cache_len,
                  .dtype = m.info.dtype,
                  .sampling = sampling},
                 build);
    if (max_new_tokens > 1)
      m.cache->get({.phase = Phase::Decode,
                    .batch = batch,
                    .seq = 1,
                    .cache_len = cache_len,
                    .dtype = m.info.dtype,
                    .sampling = sampling},
                   build);
  }
  m.cache->arm_guard();
  const runtime::CompileStats after = m.compile_stats();
  return after.compiles + after.disk_hits - before.compiles - before.disk_hits;
}

std::vector<float> CausalLM::forward(const std::vector<int32_t>& ids) {
  Impl& m = *impl_;
  if (ids.empty()) fail("forward: empty input");
  m.check_ids(ids);
  const int n = static_cast<int>(ids.size());
  if (n > m.config.context_limit()) fail("forward: ", n, " tokens exceed ", m.config.context_limit_str());
  ShapeKey key{.phase = Phase::Prefill,
               .batch = 1,
               .seq = n,
               .cache_len = n,
               .dtype = m.info.dtype,
               .all_logits = true};
  auto lock = m.step_lock();
  std::unique_ptr<backends::Executable> scratch;
  const auto& exe = m.executable(key, false, scratch);
  auto cache = m.make_cache(1, n);
  StepInputs in;
  in.ids = ids;
  for (int i = 0; i < n; ++i) {
    in.positions.push_back(i);
    in.slots.push_back(i);
  }
  in.kv_begin = {0};
  std::vector<float> logits;
  exe.run(in, *cache, logits);
  const int64_t vocab = m.config.vocab_size;
  if (const int64_t i = sampling::first_non_finite(logits.data(), static_cast<int64_t>(logits.size()));
      i >= 0)
    fail("forward: the model produced a non-finite logit (", logits[static_cast<size_t>(i)], ") at position ",
         i / vocab, ", vocabulary index ", i % vocab);
  return logits;
}

std::vector<float> CausalLM::forward(const std::vector<std::vector<int32_t>>& input_ids,
                                     const std::vector<std::vector<int32_t>>& attention_mask) {
  Impl& m = *impl_;
  if (input_ids.empty() || input_ids[0].empty()) fail("forward: empty input");
  const size_t len = input_ids[0].size();
  if (!attention_mask.empty() && attention_mask.size() != input_ids.size())
    fail("forward: attention_mask has ", attention_mask.size(), " rows, input_ids has ", input_ids.size());
  // Per row: [begin, end) holds the real tokens; the mask is 0s, then 1s, then 0s.
  std::vector<int32_t> begin, end;
  for (size_t b = 0; b < input_ids.size(); ++b) {
    if (input_ids[b].size() != len)
      fail("forward: input_ids row ", b, " has length ", input_ids[b].size(), ", row 0 has ", len);
    m.check_ids(input_ids[b]);
    size_t p = 0, q = len;
    if (!attention_mask.empty()) {
      const auto& mask = attention_mask[b];
      if (mask.size() != len)
        fail("forward: attention_mask row ", b, " has length ", mask.size(), ", input_ids rows have ", len);
      for (int32_t v : mask)
        if (v != 0 && v != 1) fail("forward: attention_mask row ", b, " holds ", v, " (only 0 and 1)");
      while (p < len && mask[p] == 0) ++p;
      if (p == len) fail("forward: attention_mask row ", b, " masks every token");
      while (mask[q - 1] == 0) --q;
      for (size_t i = p; i < q; ++i)
        if (mask[i] != 1)
          fail("forward: attention_mask row ", b, " has a 0 at ", i,
               " between real tokens (only left or right padding)");
    }
    begin.push_back(static_cast<int32_t>(p));
    end.push_back(static_cast<int32_t>(q));
  }
  const int batch = static_cast<int>(input_ids.size()), n = static_cast<int>(len);
  if (n > m.config.context_limit()) fail("forward: ", n, " tokens exceed ", m.config.context_limit_str());
  ShapeKey key{.phase = Phase::Prefill,
               .batch = batch,
               .seq = n,
               .cache_len = n,
               .dtype = m.info.dtype,
               .all_logits = true};
  auto lock = m.step_lock();
  std::unique_ptr<backends::Executable> scratch;
  const auto& exe = m.executable(key, false, scratch);
  auto cache = m.make_cache(batch, n);
  StepInputs in;
  for (int b = 0; b < batch; ++b) {
    const auto& row = input_ids[static_cast<size_t>(b)];
    in.ids.insert(in.ids.end(), row.begin(), row.end());
    for (int s = 0; s < n; ++s) {
      const int pos = s - begin[static_cast<size_t>(b)];
      in.positions.push_back(pos < 0 ? 1 : pos);  // left padding is masked; position 1 as in generate()
    }
  }
  for (int s = 0; s < n; ++s) in.slots.push_back(s);
  in.kv_begin = begin;
  std::vector<float> logits;
  exe.run(in, *cache, logits);
  const int64_t vocab = m.config.vocab_size;
  for (int b = 0; b < batch; ++b)
    for (int s = 0; s < n; ++s) {
      float* at = logits.data() + (static_cast<int64_t>(b) * n + s) * vocab;
      if (s < begin[static_cast<size_t>(b)] || s >= end[static_cast<size_t>(b)]) {
        std::fill(at, at + vocab, 0.0f);
      } else if (const int64_t i = sampling::first_non_finite(at, vocab); i >= 0) {
        fail("forward: the model produced a non-finite logit (", at[i], ") in row ", b, " at position ", s,
             ", vocabulary index ", i);
      }
    }
  return logits;
}

GenerateOutput CausalLM::generate(const std::vector<std::vector<int32_t>>& input_ids,
                                  const std::vector<std::vector<int32_t>>& attention_mask,
                                  const GenerationConfig& cfg) {
  return generate(input_ids, attention_mask, cfg, nullptr);
}

GenerateOutput CausalLM::generate(const std::vector<std::vector<int32_t>>& input_ids,
                                  const std::vector<std::vector<int32_t>>& attention_mask,
                                  const GenerationConfig& cfg, const TokenCallback& on_token) {
  if (!impl_) fail("generate: the model was moved from");
  if (generation::speculative_generate_applies(*impl_, cfg) ||
      generation::longrope_batch_applies(*impl_, input_ids, attention_mask, cfg))
    return generation::generate_speculative(*this, *impl_, input_ids, attention_mask, cfg, on_token);
  return generation::generate(*impl_, input_ids, attention_mask, cfg, on_token);
}

GenerateOutput CausalLM::generate(const std::vector<std::vector<int32_t>>& input_ids,
                                  const std::vector<std::vector<int32_t>>& attention_mask,
                                  const GenerationConfig& cfg, const TokenCallback& on_token,
                                  CausalLM& assistant) {
  if (!impl_) fail("generate: the model was moved from");
  if (!assistant.impl_) fail("generate: the assistant model was moved from");
  if (cfg.disable_compile || cfg.cache_implementation == "dynamic")
    fail(
        "generate: an assistant model runs compiled steps over a static cache (not disable_compile, not "
        "cache_implementation \"dynamic\")");
  return generation::generate_speculative(*this, *impl_, input_ids, attention_mask, cfg, on_token,
                                          &assistant);
}

}  // namespace tessera
