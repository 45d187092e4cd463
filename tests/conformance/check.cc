#include "check.h"

#include <fmt/format.h>

#include <cstring>
#include <exception>

#include "c10d/errors.h"
#include "elements.h"

namespace c10d::inline v1::conformance {
namespace {

std::string current_error() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "a non-std exception";
  }
}

std::string error_type(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const TimeoutError&) {
    return "TimeoutError";
  } catch (const NetworkError&) {
    return "NetworkError";
  } catch (const InvalidArgument&) {
    return "InvalidArgument";
  } catch (const Unsupported&) {
    return "Unsupported";
  } catch (const Error&) {
    return "Error";
  } catch (...) {
    return "a non-c10d exception";
  }
}

}  // namespace

Reporter::Reporter(const ProcessGroup& pg, std::size_t max_failures)
    : rank_(pg.rank()), world_(pg.size()), max_failures_(max_failures) {}

std::string Reporter::describe(const Call& call) const {
  std::vector<std::string> parts;
  if (call.dtype) parts.emplace_back(dtype_name(*call.dtype));
  if (call.reduce) parts.emplace_back(reduce_op_name(*call.reduce));
  if (call.count >= 0) parts.push_back(fmt::format("count {}", call.count));
  if (call.root >= 0) parts.push_back(fmt::format("root {}", call.root));
  if (!call.variant.empty()) parts.push_back(call.variant);
  return fmt::format("{}({}) world {} rank {}", call.op, fmt::join(parts, ", "), world_, rank_);
}

void Reporter::fail(const Call& call, std::string_view what) {
  if (failures_.size() >= max_failures_) {
    ++dropped_;
    return;
  }
  failures_.push_back(fmt::format("{}: {}", describe(call), what));
}

std::vector<std::string> Reporter::take_failures() {
  if (dropped_ > 0) {
    failures_.push_back(
        fmt::format("world {} rank {}: {} more failures not shown", world_, rank_, dropped_));
    dropped_ = 0;
  }
  return std::move(failures_);
}

std::shared_ptr<Work> issue(Reporter& rep, const Call& call, const Issue& fn) {
  rep.issued();
  try {
    auto work = fn();
    if (work == nullptr) rep.fail(call, "the call returned no Work");
    return work;
  } catch (...) {
    rep.fail(call, "the call threw on the caller's thread: " + current_error());
    return nullptr;
  }
}

void finish(Reporter& rep, const Call& call, Work& work, const Config& config) {
  try {
    work.wait(config.wait_timeout);
  } catch (...) {
    const std::string what = current_error();
    rep.fail(call, fmt::format("wait() threw {}: {}", error_type(std::current_exception()), what));
    throw StopRun(what);
  }
  if (!work.is_completed() || !work.is_success() || work.exception() != nullptr) {
    rep.fail(call,
             fmt::format("after wait() returned: is_completed {} is_success {} exception {}",
                         work.is_completed(), work.is_success(), work.exception() != nullptr));
  } else {
    rep.pass();
  }
}

std::shared_ptr<Work> run(Reporter& rep, const Call& call, const Config& config, const Issue& fn) {
  auto work = issue(rep, call, fn);
  if (work) finish(rep, call, *work, config);
  return work;
}

void expect_rejected(Reporter& rep, const Call& call, const Config& config, const Issue& fn,
                     const std::vector<std::string>& mentions) {
  rep.issued();
  std::shared_ptr<Work> work;
  try {
    work = fn();
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    for (const auto& m : mentions) {
      if (what.find(m) == std::string::npos) {
        rep.fail(call, fmt::format("rejected as expected, but the message does not name '{}': {}",
                                   m, what));
        return;
      }
    }
    rep.pass();
    return;
  } catch (...) {
    rep.fail(call, fmt::format("expected InvalidArgument on the caller's thread, got {}: {}",
                               error_type(std::current_exception()), current_error()));
    return;
  }
  if (work == nullptr) {
    rep.fail(call, "expected InvalidArgument on the caller's thread; the call returned nullptr");
    return;
  }
  // Accepted: keep the ranks in step by letting it run out.
  try {
    work->wait(config.wait_timeout);
    rep.fail(call,
             "expected InvalidArgument on the caller's thread; the call was accepted and "
             "completed");
  } catch (...) {
    const std::string what = current_error();
    rep.fail(call, fmt::format("expected InvalidArgument on the caller's thread; the call was "
                               "accepted and its Work failed with {}: {}",
                               error_type(std::current_exception()), what));
    throw StopRun(what);
  }
}

void expect_result(Reporter& rep, const Call& call, const Work& work,
                   const std::vector<Tensor>& outputs) {
  std::vector<Tensor> result;
  try {
    result = work.result();
  } catch (...) {
    rep.fail(call, "result() threw: " + current_error());
    return;
  }
  if (result.size() != outputs.size()) {
    rep.fail(call, fmt::format("result() holds {} tensors, expected {} (the op's outputs)",
                               result.size(), outputs.size()));
    return;
  }
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& got = result[k];
    const Tensor& want = outputs[k];
    const bool same_tensor = got.defined() && got.dtype() == want.dtype() &&
                             got.numel() == want.numel() &&
                             (want.numel() == 0 || got.raw_data() == want.raw_data());
    if (!same_tensor) {
      rep.fail(call, fmt::format("result()[{}] is {} at {}, expected the output {} at {}", k,
                                 got.defined() ? got.to_string() : "undefined",
                                 got.defined() && got.numel() > 0 ? got.raw_data() : nullptr,
                                 want.to_string(), want.numel() > 0 ? want.raw_data() : nullptr));
      return;
    }
  }
  rep.pass();
}

bool expect_equal(Reporter& rep, const Call& call, std::string_view what, const Tensor& got,
                  const Tensor& want) {
  if (got.dtype() != want.dtype() || got.numel() != want.numel()) {
    rep.fail(call, fmt::format("{} is {}, expected {}", what, got.to_string(), want.to_string()));
    return false;
  }
  if (want.numel() == 0 || std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()) == 0) {
    rep.pass();
    return true;
  }
  // The bytes differ; a NaN may still equal a NaN with other bits.
  const DType dtype = want.dtype();
  std::int64_t first = -1;
  std::int64_t wrong = 0;
  for (std::int64_t j = 0; j < want.numel(); ++j) {
    if (!same(dtype, get(got, j), get(want, j))) {
      if (first < 0) first = j;
      ++wrong;
    }
  }
  if (first < 0) {
    rep.pass();
    return true;
  }
  rep.fail(call, fmt::format("{}: element {}: expected {}, got {} ({} of {} elements wrong)", what,
                             first, show(dtype, get(want, first)), show(dtype, get(got, first)),
                             wrong, want.numel()));
  return false;
}

Guarded Guarded::make(DType dtype, std::int64_t count, std::uint64_t guard_seed) {
  constexpr std::int64_t kGuard = 5;
  Guarded g;
  g.whole = key_tensor({count + 2 * kGuard}, dtype, guard_seed);
  g.whole_before = g.whole.clone();
  g.view = g.whole.narrow_rows(kGuard, kGuard + count);
  return g;
}

void Guarded::expect_guards(Reporter& rep, const Call& call) const {
  const std::int64_t rows = whole.numel();
  const std::int64_t guard = (rows - view.numel()) / 2;
  expect_equal(rep, call, "the elements before the view (must be untouched)",
               whole.narrow_rows(0, guard), whole_before.narrow_rows(0, guard));
  expect_equal(rep, call, "the elements after the view (must be untouched)",
               whole.narrow_rows(rows - guard, rows), whole_before.narrow_rows(rows - guard, rows));
}

std::vector<int> roots(const ProcessGroup& pg) {
  if (pg.size() == 1) return {0};
  return {0, pg.size() - 1};
}

}  // namespace c10d::inline v1::conformance
