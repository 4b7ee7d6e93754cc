#include "generation/rows.h"

#include <algorithm>
#include <future>
#include <span>
#include <thread>

#include "graph/graph.h"
#include "sampling/sampler.h"
#include "tessera/error.h"

namespace tessera {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::None:
      return "running";
    case FinishReason::Eos:
      return "eos";
    case FinishReason::Length:
      return "length";
    case FinishReason::Stopped:
      return "stopped";
    case FinishReason::Error:
      return "error";
  }
  return "?";
}

namespace generation {

void RowState::start(const GenerationConfig& cfg, uint64_t seed, const std::vector<int32_t>& prompt,
                     size_t padding, int new_token_budget) {
  params = SamplingParams::from_config(cfg, seed);
  seen.assign(prompt.begin() + static_cast<long>(std::min(padding, prompt.size())), prompt.end());
  eos = cfg.eos_token_id;
  budget = new_token_budget;
  produced = 0;
  constraint.reset();
  if (cfg.constraint) {
    constraint = std::make_unique<ConstraintMatcher>(cfg.constraint);
    constraint->compute_mask();  // the first token's, while nothing else runs yet
  }
  finish = budget > 0 ? FinishReason::None : FinishReason::Length;
}

int32_t host_token(const RowState& row, float* logits, int64_t vocab, std::string& why) {
  if (const int64_t v = first_non_finite(logits, vocab); v >= 0) {
    why = detail::concat(logits[v], " at vocabulary index ", v);
    return -1;
  }
  apply_repetition_penalty(logits, vocab, std::span<const int32_t>(row.seen), row.params.repetition_penalty);
  if (row.constraint) {
    row.constraint->apply(logits, vocab);
    // An error state allows nothing: the row ends at its eos rather than take an unconstrained token.
    if (!row.constraint->allows_any()) {
      if (!row.eos.empty()) return row.eos.front();
      why = "its constraint allows no token (" + row.constraint->error() + ") and it has no eos id";
      return -1;
    }
  }
  return choose_token(logits, vocab, row.params, static_cast<uint32_t>(row.produced));
}

bool constraint_step(RowState& row, int32_t token) {
  if (!row.constraint) return true;
  row.constraint->consume(token);
  return !row.constraint->done();
}

namespace {
// The masks of `matchers`, several threads at once when there are many (each matcher is used by one thread;
// llguidance's matchers share nothing mutable).
void compute_masks(const std::vector<ConstraintMatcher*>& matchers) {
  const size_t threads =
      std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), (matchers.size() + 3) / 4);
  if (threads <= 1) {
    for (ConstraintMatcher* c : matchers) c->compute_mask();
    return;
  }
  std::vector<std::future<void>> parts;
  for (size_t t = 1; t < threads; ++t)
    parts.push_back(std::async(std::launch::async, [&, t] {
      for (size_t i = t; i < matchers.size(); i += threads) matchers[i]->compute_mask();
    }));
  for (size_t i = 0; i < matchers.size(); i += threads) matchers[i]->compute_mask();
  for (auto& p : parts) p.get();
}
}  // namespace

std::vector<int32_t> step_token_masks(const std::vector<const RowState*>& rows, int64_t vocab) {
  std::vector<ConstraintMatcher*> matchers;  // those whose mask is still to compute
  bool any = false;
  for (const RowState* r : rows) {
    if (!r || !r->running() || !r->constraint) continue;
    any = true;
    if (!r->constraint->mask_ready()) matchers.push_back(r->constraint.get());
  }
  if (!any) return {};
  compute_masks(matchers);
  const int64_t words = graph::mask_words(vocab);
  std::vector<int32_t> out(rows.size() * static_cast<size_t>(words), -1);
  for (size_t i = 0; i < rows.size(); ++i)
    if (const RowState* r = rows[i]; r && r->running() && r->constraint)
      r->constraint->write_mask(out.data() + i * static_cast<size_t>(words), words);
  return out;
}

void overlap_masks(const std::vector<ConstraintMatcher*>& matchers, const std::function<void()>& work) {
  if (matchers.empty()) return work();
  auto masks = std::async(std::launch::async, [&] { compute_masks(matchers); });
  try {
    work();
  } catch (...) {
    masks.wait();
    throw;
  }
  masks.get();
}

bool device_token_ok(int32_t token, int64_t vocab, std::string& why) {
  if (token >= 0 && token < vocab) return true;
  why = detail::concat("the compiled sampling step returned token id ", token);
  return false;
}

void accept(RowState& row, int32_t token, bool keep_going) {
  row.seen.push_back(token);
  ++row.produced;
  if (std::find(row.eos.begin(), row.eos.end(), token) != row.eos.end())
    row.finish = FinishReason::Eos;
  else if (!keep_going)
    row.finish = row.constraint && row.constraint->done() ? FinishReason::Eos : FinishReason::Stopped;
  else if (row.produced >= row.budget)
    row.finish = FinishReason::Length;
}

}  // namespace generation
}  // namespace tessera
