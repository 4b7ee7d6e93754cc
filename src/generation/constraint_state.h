// One row's place in its constraint (an llguidance matcher cloned from the compiled constraint's initial
// state): the allowed tokens of its next step, applied to its logits before it samples, and the token it
// chose consumed after.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/constraint.h"

namespace tessera::generation {

// Drops keywords that assert nothing and llguidance refuses ("uniqueItems": false, which schema generators
// write), walking only the places that hold subschemas (a property named uniqueItems stays). Every JSON
// schema a constraint is compiled from goes through it.
void drop_no_op_schema_keywords(nlohmann::json& schema);

class ConstraintMatcher {
 public:
  explicit ConstraintMatcher(std::shared_ptr<const Constraint> c);
  ~ConstraintMatcher();
  ConstraintMatcher(const ConstraintMatcher&) = delete;
  ConstraintMatcher& operator=(const ConstraintMatcher&) = delete;

  // The allowed tokens of the next step. Depends only on the tokens consumed so far, so a caller may compute
  // it while the step runs (any thread; one matcher at a time per thread).
  void compute_mask();
  bool mask_ready() const { return ready_; }
  // Sets every logit the constraint does not allow to -inf (computing the mask first if needed).
  void apply(float* logits, int64_t vocab);
  // Writes the allowed tokens of the next step as `words` 32-bit words (computing the mask first if needed;
  // words past the vocabulary's are zero), for a step that samples in the compiled program.
  void write_mask(int32_t* dst, int64_t words);
  // Whether the last mask allowed any token (false only in an error state).
  bool allows_any() const;
  // Advances past the row's chosen token. A token the mask did not allow puts the matcher in an error state
  // (done(), with error()).
  void consume(int32_t token);
  // Complete: nothing more may follow (or an error state: the row ends rather than go on unconstrained).
  bool done() const;
  const std::string& error() const { return error_; }
  const Constraint& constraint() const { return *constraint_; }

 private:
  std::shared_ptr<const Constraint> constraint_;
  void* matcher_ = nullptr;
  std::vector<uint32_t> mask_;
  bool ready_ = false;
  std::string error_;
};

}  // namespace tessera::generation
