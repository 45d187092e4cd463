// ProcessGroup: the collectives every backend implements.
//
// Contract (docs/design.md): every rank issues the collectives of one group in the same order. Each
// call checks its inputs on the caller's thread (throwing InvalidArgument at once), then queues
// the op on the group's worker thread and returns a Work at once. Ops run in issue order; each
// gets the next sequence number of its group, and (group id, sequence) tags its bytes on the
// wire. Inputs and outputs must stay alive and untouched until the Work completes. Lazy tensors
// are materialized before the op is queued.
//
// Tensors are handles, so the vectors below are taken by value: the op writes into the shared
// storage, and Work::result() hands the outputs back.
//
// Thread-safety: a group may be used from several threads, but the order of issue is then the
// callers' business (it must match across ranks). Lifetime: destroying a group aborts its
// pending ops with an Error and joins its threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "c10d/export.h"
#include "c10d/tensor.h"
#include "c10d/types.h"
#include "c10d/work.h"

namespace c10d::inline v1 {

class C10D_API ProcessGroup {
 public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend_name() const = 0;

  // Every tensor in `tensors` is reduced element-wise across ranks, in place.
  virtual std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors,
                                           const AllreduceOptions& opts = {}) = 0;
  // Root's tensors are copied into every other rank's tensors, in place.
  virtual std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors,
                                          const BroadcastOptions& opts = {}) = 0;
  // The reduction lands in root's tensor; other ranks' tensors are left unspecified.
  virtual std::shared_ptr<Work> reduce(Tensor tensor, const ReduceOptions& opts = {}) = 0;
  // outputs[r] receives rank r's input; every output matches the input's shape and dtype.
  virtual std::shared_ptr<Work> all_gather(std::vector<Tensor> outputs, Tensor input,
                                           const AllgatherOptions& opts = {}) = 0;
  // output (size * input.numel() elements) receives the inputs concatenated in rank order.
  virtual std::shared_ptr<Work> all_gather_into_tensor(Tensor output, Tensor input,
                                                       const AllgatherOptions& opts = {}) = 0;
  // output receives the reduction across ranks of every rank's inputs[this rank].
  virtual std::shared_ptr<Work> reduce_scatter(Tensor output, std::vector<Tensor> inputs,
                                               const ReduceScatterOptions& opts = {}) = 0;
  // input holds size equal blocks; output receives the reduction of block `rank`.
  virtual std::shared_ptr<Work> reduce_scatter_tensor(Tensor output, Tensor input,
                                                      const ReduceScatterOptions& opts = {}) = 0;
  // Rows of input are split by opts.input_split_sizes (equal when empty) and block r goes to
  // rank r; output receives block `rank` of every rank in rank order (opts.output_split_sizes).
  // Without split sizes on either side, input and output hold the same number of bytes.
  virtual std::shared_ptr<Work> all_to_all(Tensor output, Tensor input,
                                           const AllToAllOptions& opts = {}) = 0;
  // On root, outputs[r] receives rank r's input; elsewhere outputs must be empty.
  virtual std::shared_ptr<Work> gather(std::vector<Tensor> outputs, Tensor input,
                                       const GatherOptions& opts = {}) = 0;
  // On root, inputs[r] is sent to rank r; every rank receives into output.
  virtual std::shared_ptr<Work> scatter(Tensor output, std::vector<Tensor> inputs,
                                        const ScatterOptions& opts = {}) = 0;
  virtual std::shared_ptr<Work> barrier(const BarrierOptions& opts = {}) = 0;
  virtual std::shared_ptr<Work> send(std::vector<Tensor> tensors, int dst_rank,
                                     const SendRecvOptions& opts = {}) = 0;
  // The Work's source_rank() is src_rank.
  virtual std::shared_ptr<Work> recv(std::vector<Tensor> tensors, int src_rank,
                                     const SendRecvOptions& opts = {}) = 0;
  // Receives into tensors[0] (exactly one tensor, as torch's recvAnysource takes) the next
  // message with opts.tag from whichever rank of the group sends it first (MPI_ANY_SOURCE); once
  // the Work succeeded its source_rank() names that rank. Matching: a message from rank P with
  // tag T goes to the earliest posted recv that accepts it, recv(P, T) or recv_any_source(T)
  // alike, so messages of one (sender, tag) are received in the order they were sent, whoever
  // receives them; a recv_any_source whose messages already arrived takes the one that came
  // first. The message's size must equal the tensor's (else the Work fails with
  // InvalidArgument naming the sender). Every backend implements it (TCP with or without shared
  // memory, ICI, MPI, in-process), or throws Unsupported naming the op and the backend. Issued
  // and ordered like recv (thread-safety above); a timeout names the tag and says no rank sent.
  virtual std::shared_ptr<Work> recv_any_source(std::vector<Tensor> tensors,
                                                const SendRecvOptions& opts = {}) = 0;

  // A subgroup of `ranks` (ranks of this group, distinct, any order: position i becomes rank i
  // of the subgroup). Every rank of this group calls new_group with the same list, in the same
  // order relative to its other new_group calls, as torch.distributed.new_group; members get the
  // subgroup, the others nullptr. Only the members meet (if at all): a non-member's call returns
  // at once, whatever the others do. The subgroup has its own sequence numbers and worker thread.
  virtual std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) = 0;

  // Fails every pending and later op of this group with an Error and releases every waiter.
  // Idempotent. Does not wait for the other ranks.
  virtual void abort() = 0;

 private:
  int rank_;
  int size_;
};

}  // namespace c10d::inline v1
