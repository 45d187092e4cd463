// The verbs every conformance case is written in: issue a call, wait for it, compare what it
// produced, and record a failure that says which call, where, and what was wrong.
//
// Thread-safety: a Reporter belongs to one rank's run; the free functions are reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "c10d/process_group.h"
#include "c10d/tensor.h"
#include "c10d/types.h"
#include "c10d/work.h"
#include "conformance.h"

namespace c10d::inline v1::conformance {

// One call of the API as a failure message names it.
struct Call {
  std::string op;
  std::optional<DType> dtype;
  std::optional<ReduceOp> reduce;
  std::int64_t count = -1;
  int root = -1;
  std::string variant;  // "in-place", "out-of-place", "view", or what a case says
};

// Collects the failures of one rank's run.
class Reporter {
 public:
  Reporter(const ProcessGroup& pg, std::size_t max_failures);

  // "all_reduce(int8, sum, count 7, view) world 4 rank 2"
  std::string describe(const Call& call) const;
  void fail(const Call& call, std::string_view what);
  // A passed check; failures add none.
  void pass() { ++checks_; }
  void issued() { ++ops_; }

  bool failed() const { return !failures_.empty() || dropped_ > 0; }
  std::int64_t ops() const { return ops_; }
  std::int64_t checks() const { return checks_; }
  std::vector<std::string> take_failures();

 private:
  int rank_;
  int world_;
  std::size_t max_failures_;
  std::vector<std::string> failures_;
  std::size_t dropped_ = 0;
  std::int64_t ops_ = 0;
  std::int64_t checks_ = 0;
};

// Thrown when an op's Work failed or hung: the group may be unusable (an op error aborts it),
// so the run ends. The failure is already recorded.
class StopRun : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using Issue = std::function<std::shared_ptr<Work>()>;

// Makes the call. A throw on the caller's thread is recorded and answers nullptr (nothing was
// queued, so the group is still in step on every rank that threw alike).
std::shared_ptr<Work> issue(Reporter& rep, const Call& call, const Issue& fn);
// Waits for `work`; an error or a hang is recorded and throws StopRun.
void finish(Reporter& rep, const Call& call, Work& work, const Config& config);
// issue() then finish(); nullptr when the call threw.
std::shared_ptr<Work> run(Reporter& rep, const Call& call, const Config& config, const Issue& fn);

// Expects the call to throw InvalidArgument from the call itself (on the caller's thread),
// with a message that mentions every string of `mentions`. Returning a Work is a failure: if
// it returned one anyway, the Work is waited for so the ranks stay in step.
void expect_rejected(Reporter& rep, const Call& call, const Config& config, const Issue& fn,
                     const std::vector<std::string>& mentions = {});

// Work::result() holds exactly `outputs`: the same storage, offset and numel, in order.
void expect_result(Reporter& rep, const Call& call, const Work& work,
                   const std::vector<Tensor>& outputs);

// `got` holds the values of `want` (same dtype and numel; NaN equals NaN). Records the first
// wrong element with both values and how many differ. `what` names the tensor ("output",
// "outputs[3]", "input (unchanged)").
bool expect_equal(Reporter& rep, const Call& call, std::string_view what, const Tensor& got,
                  const Tensor& want);

// A tensor of `count` elements that is a view into the middle of a larger one, and the
// guards around it (which an op on the view must leave as they are).
struct Guarded {
  Tensor whole;
  Tensor view;
  Tensor whole_before;  // a copy of `whole` as filled, for the guard check
  static Guarded make(DType dtype, std::int64_t count, std::uint64_t guard_seed);
  // Compares the elements outside the view with their values before the op.
  void expect_guards(Reporter& rep, const Call& call) const;
};

// The roots a rooted op is run with: 0 and the last rank (just 0 in a group of one).
std::vector<int> roots(const ProcessGroup& pg);

inline constexpr DType kAllDTypes[] = {
    DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8,
    DType::kUInt8,   DType::kInt16,   DType::kInt32,   DType::kInt64,    DType::kBool,
};
inline constexpr ReduceOp kAllReduceOps[] = {
    ReduceOp::kSum,  ReduceOp::kAvg, ReduceOp::kProduct, ReduceOp::kMin,       ReduceOp::kMax,
    ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor,    ReduceOp::kPremulSum,
};

}  // namespace c10d::inline v1::conformance
