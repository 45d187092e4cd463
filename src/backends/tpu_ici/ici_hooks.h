// IciHooks: what the ICI backend adds to the shared TransportProcessGroup
// (backends/common/transport_process_group.h): an IciWork per op that records the op's simulated
// duration on this chip's virtual clock, and the torus algorithms of torus_plans.h run by
// plan_executor.h in place of the shared ones (all_reduce, broadcast, all_gather,
// reduce_scatter, all_to_all; reduce, gather, scatter and barrier use the shared algorithms,
// whose messages the fabric routes). Subgroups get the timing hooks only: their ranks are not a
// torus.
//
// Thread-safety: the hooks are called from the group's worker and completer threads; an
// IciWork's duration is written before the Work completes and read after.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "backends/common/transport_process_group.h"
#include "backends/tpu_ici/ici_transport.h"

namespace c10d::inline v1::tpu_ici {

class IciWork final : public Work {
 public:
  using Work::Work;
  double start = 0;                   // virtual time the op started (worker thread)
  std::atomic<double> simulated{-1};  // seconds; < 0 until the op finished
};

class IciHooks final : public backends::BackendHooks {
 public:
  IciHooks(std::shared_ptr<IciTransport> fabric, bool torus_algorithms)
      : fabric_(std::move(fabric)), torus_algorithms_(torus_algorithms) {}

  std::shared_ptr<Work> make_work(std::string op, std::uint64_t sequence) override;
  void op_started(Work& work) override;
  void op_finished(Work& work) override;
  std::shared_ptr<BackendHooks> for_subgroup(const std::vector<int>& ranks) override;

  bool all_reduce(const algorithms::Context& ctx, DType dtype, const Reduction& reduction,
                  void* data, std::int64_t count) override;
  bool broadcast(const algorithms::Context& ctx, std::span<std::byte> data, int root) override;
  bool all_gather(const algorithms::Context& ctx, std::span<const std::byte> input,
                  std::span<std::byte> output) override;
  bool reduce_scatter(const algorithms::Context& ctx, DType dtype, const Reduction& reduction,
                      std::span<const void* const> inputs, void* output,
                      std::int64_t count) override;
  bool all_to_allv(const algorithms::Context& ctx, std::span<const std::byte> input,
                   std::span<const std::int64_t> send_counts,
                   std::span<const std::int64_t> send_offsets, std::span<std::byte> output,
                   std::span<const std::int64_t> recv_counts,
                   std::span<const std::int64_t> recv_offsets) override;

 private:
  const std::shared_ptr<IciTransport> fabric_;
  const bool torus_algorithms_;
};

}  // namespace c10d::inline v1::tpu_ici
