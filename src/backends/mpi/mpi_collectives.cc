// ProcessGroupMPI's collectives and point-to-point ops (process_group_mpi.h): each checks its
// arguments on the caller's thread and queues a closure that starts the op's MPI call
// (C10D_MPI_COLLECTIVE: the blocking function or its nonblocking twin, mpi_op.h) and hands what
// MPI still uses to Started.
#include <algorithm>
#include <cstring>

#include "algorithms/choice.h"
#include "backends/mpi/process_group_mpi.h"

namespace c10d::inline v1::mpi {

std::shared_ptr<Work> ProcessGroupMPI::all_reduce(std::vector<Tensor> tensors,
                                                  const AllreduceOptions& opts) {
  constexpr std::string_view kOp = "all_reduce";
  checks_.tensors(tensors, kOp, /*same=*/false);
  for (const auto& t : tensors) algorithms::validate_reduction(t.dtype(), opts.reduce.op);
  const Reduction r = opts.reduce;
  // Before the closure takes the tensors.
  const auto record = backends::OpRecord::of(kOp, tensors[0], opts.reduce.op, -1, total(tensors));
  return push(
      record, opts.timeout,
      [this, tensors = std::move(tensors), r](const Comms& c, const Call& call) mutable {
        Started s;
        for (const auto& t : tensors) {
          if (r.op == ReduceOp::kPremulSum) {
            algorithms::premul_in_place(t.dtype(), r.premul_factor, t.raw_data(), t.numel());
          }
          // libnbc's algorithm, for the nonblocking call only.
          const auto algorithm =
              c.blocking
                  ? std::unique_lock<std::mutex>()
                  : runtime().allreduce_algorithm.select(algorithms::choose_algorithm(
                        algorithms::CollectiveOp::kAllReduce, static_cast<std::int64_t>(t.nbytes()),
                        size(), algorithms::Fabric::kMpiNonblocking));
          C10D_MPI_COLLECTIVE(c, s, call, MPI_Allreduce, MPI_Iallreduce, MPI_IN_PLACE, t.raw_data(),
                              as_count(t.numel(), call), mpi_type(t.dtype()), mpi_op(r.op), c.coll);
        }
        if (r.op == ReduceOp::kAvg) s.then = average(size());
        s.outputs = std::move(tensors);
        return s;
      });
}

std::shared_ptr<Work> ProcessGroupMPI::broadcast(std::vector<Tensor> tensors,
                                                 const BroadcastOptions& opts) {
  constexpr std::string_view kOp = "broadcast";
  checks_.tensors(tensors, kOp, /*same=*/false);
  checks_.root(kOp, opts.root);
  const auto record =
      backends::OpRecord::of(kOp, tensors[0], std::nullopt, opts.root, total(tensors));
  return push(
      record, opts.timeout,
      [tensors = std::move(tensors), root = opts.root](const Comms& c, const Call& call) mutable {
        Started s;
        for (const auto& t : tensors) {
          C10D_MPI_COLLECTIVE(c, s, call, MPI_Bcast, MPI_Ibcast, t.raw_data(),
                              as_count(t.numel(), call), mpi_type(t.dtype()), root, c.coll);
        }
        s.outputs = std::move(tensors);
        return s;
      });
}

std::shared_ptr<Work> ProcessGroupMPI::reduce(Tensor tensor, const ReduceOptions& opts) {
  constexpr std::string_view kOp = "reduce";
  checks_.defined(tensor, kOp, "the tensor");
  checks_.root(kOp, opts.root);
  algorithms::validate_reduction(tensor.dtype(), opts.reduce.op);
  return push(backends::OpRecord::of(kOp, tensor, opts.reduce.op, opts.root, tensor.numel()),
              opts.timeout, [this, tensor, opts](const Comms& c, const Call& call) {
                const Reduction r = opts.reduce;
                if (r.op == ReduceOp::kPremulSum) {
                  algorithms::premul_in_place(tensor.dtype(), r.premul_factor, tensor.raw_data(),
                                              tensor.numel());
                }
                const bool root = rank() == opts.root;
                Started s;
                C10D_MPI_COLLECTIVE(
                    c, s, call, MPI_Reduce, MPI_Ireduce, root ? MPI_IN_PLACE : tensor.raw_data(),
                    root ? tensor.raw_data() : nullptr, as_count(tensor.numel(), call),
                    mpi_type(tensor.dtype()), mpi_op(r.op), opts.root, c.coll);
                if (root && r.op == ReduceOp::kAvg) s.then = average(size());
                s.outputs = {tensor};
                return s;
              });
}

std::shared_ptr<Work> ProcessGroupMPI::all_gather(std::vector<Tensor> outputs, Tensor input,
                                                  const AllgatherOptions& opts) {
  constexpr std::string_view kOp = "all_gather";
  checks_.defined(input, kOp, "the input");
  checks_.count(kOp, "outputs", outputs.size());
  for (const auto& t : outputs) checks_.like(t, input, kOp, "an output");
  return push(backends::OpRecord::of(kOp, input, std::nullopt, -1, input.numel()), opts.timeout,
              [this, outputs, input](const Comms& c, const Call& call) {
                const std::size_t block = input.nbytes();
                Tensor all = scratch_bytes(block * outputs.size());
                Started s;
                C10D_MPI_COLLECTIVE(c, s, call, MPI_Allgather, MPI_Iallgather, input.raw_data(),
                                    as_count(block, call), MPI_BYTE, all.raw_data(),
                                    as_count(block, call), MPI_BYTE, c.coll);
                s.then = copy_out(all, block);
                s.keep_until_done(c, input);
                s.keep.push_back(std::move(all));  // copy_out reads it after completion
                s.outputs = outputs;
                return s;
              });
}

std::shared_ptr<Work> ProcessGroupMPI::all_gather_into_tensor(Tensor output, Tensor input,
                                                              const AllgatherOptions& opts) {
  constexpr std::string_view kOp = "all_gather_into_tensor";
  checks_.blocks(kOp, output, "output", input, "input");
  return push(backends::OpRecord::of(kOp, input, std::nullopt, -1, input.numel()), opts.timeout,
              [this, output, input](const Comms& c, const Call& call) {
                const std::size_t block = input.nbytes();
                const std::uint8_t* in = bytes(input);
                std::uint8_t* out = bytes(output);
                const std::uint8_t* own = out + static_cast<std::size_t>(rank()) * block;
                const bool overlaps = block > 0 && in < out + output.nbytes() && out < in + block;
                Tensor copy;  // the input, when it overlaps the output elsewhere than its own block
                const void* send = in;
                if (overlaps && in == own) {
                  send = MPI_IN_PLACE;
                } else if (overlaps) {
                  copy = scratch_bytes(block);
                  std::memcpy(bytes(copy), in, block);
                  send = copy.raw_data();
                }
                Started s;
                C10D_MPI_COLLECTIVE(c, s, call, MPI_Allgather, MPI_Iallgather, send,
                                    as_count(block, call), MPI_BYTE, out, as_count(block, call),
                                    MPI_BYTE, c.coll);
                s.keep_until_done(c, input);
                if (copy.defined()) s.keep_until_done(c, std::move(copy));
                s.outputs = {output};
                return s;
              });
}

std::shared_ptr<Work> ProcessGroupMPI::reduce_scatter(Tensor output, std::vector<Tensor> inputs,
                                                      const ReduceScatterOptions& opts) {
  constexpr std::string_view kOp = "reduce_scatter";
  checks_.defined(output, kOp, "the output");
  checks_.count(kOp, "inputs", inputs.size());
  for (const auto& t : inputs) checks_.like(t, output, kOp, "an input");
  algorithms::validate_reduction(output.dtype(), opts.reduce.op);
  return push(backends::OpRecord::of(kOp, output, opts.reduce.op, -1, output.numel()), opts.timeout,
              [this, output, inputs, r = opts.reduce](const Comms& c, const Call& call) {
                const std::size_t block = output.nbytes();
                Tensor all = scratch_bytes(block * inputs.size());
                for (std::size_t q = 0; q < inputs.size(); ++q) {
                  if (block > 0) std::memcpy(bytes(all) + q * block, bytes(inputs[q]), block);
                }
                return start_reduce_scatter(c, call, all, output, r);
              });
}

std::shared_ptr<Work> ProcessGroupMPI::reduce_scatter_tensor(Tensor output, Tensor input,
                                                             const ReduceScatterOptions& opts) {
  constexpr std::string_view kOp = "reduce_scatter_tensor";
  checks_.blocks(kOp, input, "input", output, "output");
  algorithms::validate_reduction(output.dtype(), opts.reduce.op);
  return push(backends::OpRecord::of(kOp, output, opts.reduce.op, -1, output.numel()), opts.timeout,
              [this, output, input, r = opts.reduce](const Comms& c, const Call& call) {
                // A copy: the output may be a view of the input, and PREMUL_SUM must not scale
                // the input.
                Tensor all = scratch_bytes(input.nbytes());
                if (input.nbytes() > 0) std::memcpy(bytes(all), bytes(input), input.nbytes());
                return start_reduce_scatter(c, call, all, output, r);
              });
}

std::shared_ptr<Work> ProcessGroupMPI::all_to_all(Tensor output, Tensor input,
                                                  const AllToAllOptions& opts) {
  constexpr std::string_view kOp = "all_to_all";
  // Without split sizes MPI_Alltoall, as raw MPI programs call; with them MPI_Alltoallv. MPI
  // cannot match one with the other, so every rank must pass split sizes, or none (as with
  // PyTorch's MPI backend); the fingerprint tells the two apart (C10D_DEBUG=DETAIL).
  const bool splits = !opts.input_split_sizes.empty() || !opts.output_split_sizes.empty();
  if (!splits) {
    checks_.all_to_all_even(output, input);
    const auto record = backends::OpRecord::of(kOp, input, std::nullopt, -1, input.numel());
    const int block = as_count(input.nbytes() / static_cast<std::size_t>(size()), kOp);
    return push(record, opts.timeout,
                [output = std::move(output), input = std::move(input), block](
                    const Comms& c, const Call& call) mutable {
                  Started s;
                  C10D_MPI_COLLECTIVE(c, s, call, MPI_Alltoall, MPI_Ialltoall, input.raw_data(),
                                      block, MPI_BYTE, output.raw_data(), block, MPI_BYTE, c.coll);
                  s.keep_until_done(c, std::move(input));
                  s.outputs.push_back(std::move(output));
                  return s;
                });
  }
  const backends::AllToAllLayout l = checks_.all_to_all(output, input, opts);
  const auto record = backends::OpRecord::of(kOp, input, std::nullopt, -1, -1);
  // The four count and offset arrays, in one int32 tensor that lives as long as the op.
  const auto n = static_cast<std::size_t>(size());
  Tensor counts = Tensor::empty({static_cast<std::int64_t>(4 * n)}, DType::kInt32);
  int* at = static_cast<int*>(counts.raw_data());
  for (const auto* v : {&l.send_counts, &l.send_offsets, &l.recv_counts, &l.recv_offsets}) {
    for (std::int64_t x : *v) *at++ = as_count(x, kOp);
  }
  return push(
      record, opts.timeout,
      [output = std::move(output), input = std::move(input), counts = std::move(counts), n](
          const Comms& c, const Call& call) mutable {
        const int* a = static_cast<const int*>(counts.raw_data());
        Started s;
        C10D_MPI_COLLECTIVE(c, s, call, MPI_Alltoallv, MPI_Ialltoallv, input.raw_data(), a, a + n,
                            MPI_BYTE, output.raw_data(), a + 2 * n, a + 3 * n, MPI_BYTE, c.coll);
        s.keep_until_done(c, std::move(input));
        s.keep_until_done(c, std::move(counts));
        s.outputs.push_back(std::move(output));
        return s;
      },
      /*split_sizes=*/true);
}

std::shared_ptr<Work> ProcessGroupMPI::gather(std::vector<Tensor> outputs, Tensor input,
                                              const GatherOptions& opts) {
  constexpr std::string_view kOp = "gather";
  checks_.defined(input, kOp, "the input");
  checks_.root_list(kOp, opts.root, outputs, input, "outputs");
  return push(backends::OpRecord::of(kOp, input, std::nullopt, opts.root, input.numel()),
              opts.timeout,
              [this, outputs, input, root = opts.root](const Comms& c, const Call& call) {
                const std::size_t block = input.nbytes();
                Tensor all = rank() == root ? scratch_bytes(block * outputs.size()) : Tensor();
                Started s;
                C10D_MPI_COLLECTIVE(c, s, call, MPI_Gather, MPI_Igather, input.raw_data(),
                                    as_count(block, call), MPI_BYTE,
                                    all.defined() ? all.raw_data() : nullptr, as_count(block, call),
                                    MPI_BYTE, root, c.coll);
                if (all.defined()) {
                  s.then = copy_out(all, block);
                  s.keep.push_back(std::move(all));  // copy_out reads it after completion
                }
                s.keep_until_done(c, input);
                s.outputs = outputs;
                return s;
              });
}

std::shared_ptr<Work> ProcessGroupMPI::scatter(Tensor output, std::vector<Tensor> inputs,
                                               const ScatterOptions& opts) {
  constexpr std::string_view kOp = "scatter";
  checks_.defined(output, kOp, "the output");
  checks_.root_list(kOp, opts.root, inputs, output, "inputs");
  return push(backends::OpRecord::of(kOp, output, std::nullopt, opts.root, output.numel()),
              opts.timeout,
              [this, output, inputs, root = opts.root](const Comms& c, const Call& call) {
                const std::size_t block = output.nbytes();
                Tensor all;
                if (rank() == root) {
                  all = scratch_bytes(block * inputs.size());
                  for (std::size_t q = 0; q < inputs.size(); ++q) {
                    if (block > 0) std::memcpy(bytes(all) + q * block, bytes(inputs[q]), block);
                  }
                }
                Started s;
                C10D_MPI_COLLECTIVE(c, s, call, MPI_Scatter, MPI_Iscatter,
                                    all.defined() ? all.raw_data() : nullptr, as_count(block, call),
                                    MPI_BYTE, output.raw_data(), as_count(block, call), MPI_BYTE,
                                    root, c.coll);
                if (all.defined()) s.keep_until_done(c, std::move(all));
                s.outputs = {output};
                return s;
              });
}

std::shared_ptr<Work> ProcessGroupMPI::barrier(const BarrierOptions& opts) {
  return push(backends::OpRecord{.op = "barrier"}, opts.timeout,
              [this](const Comms& c, const Call& call) {
                Started s;
                C10D_MPI_COLLECTIVE(c, s, call, MPI_Barrier, MPI_Ibarrier, c.coll);
                return s;
              });
}

std::shared_ptr<Work> ProcessGroupMPI::send(std::vector<Tensor> tensors, int dst_rank,
                                            const SendRecvOptions& opts) {
  return point_to_point("send", std::move(tensors), dst_rank, opts);
}

std::shared_ptr<Work> ProcessGroupMPI::recv(std::vector<Tensor> tensors, int src_rank,
                                            const SendRecvOptions& opts) {
  return point_to_point("recv", std::move(tensors), src_rank, opts);
}

// `all` is this rank's private copy of the size blocks (scaled here for PREMUL_SUM).
Started ProcessGroupMPI::start_reduce_scatter(const Comms& c, const Call& call, const Tensor& all,
                                              const Tensor& output, const Reduction& r) {
  const DType dtype = output.dtype();
  if (r.op == ReduceOp::kPremulSum) {
    algorithms::premul_in_place(dtype, r.premul_factor, all.raw_data(), output.numel() * size());
  }
  Started s;
  C10D_MPI_COLLECTIVE(c, s, call, MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block,
                      all.raw_data(), output.raw_data(), as_count(output.numel(), call),
                      mpi_type(dtype), mpi_op(r.op), c.coll);
  if (r.op == ReduceOp::kAvg) s.then = average(size());
  s.keep_until_done(c, all);
  s.outputs = {output};
  return s;
}

std::shared_ptr<Work> ProcessGroupMPI::point_to_point(std::string_view op,
                                                      std::vector<Tensor> tensors, int peer,
                                                      const SendRecvOptions& opts) {
  checks_.point_to_point(op, tensors, peer, opts.tag);
  const int tag_ub = runtime().tag_ub;
  C10D_CHECK(opts.tag <= tag_ub, "{}: tag {} is above MPI_TAG_UB ({})", op, opts.tag, tag_ub);
  const bool is_send = op == "send";
  auto start = [tensors, peer, is_send, tag = opts.tag](const Comms& c, const Call& call) {
    Started s;
    s.is_recv = !is_send;
    for (const auto& t : tensors) {
      s.requests.emplace_back();
      const int count = as_count(static_cast<std::int64_t>(t.nbytes()), call);
      if (is_send) {
        check(MPI_Isend(t.raw_data(), count, MPI_BYTE, peer, tag, c.p2p, &s.requests.back()), call,
              "MPI_Isend");
      } else {
        check(MPI_Irecv(t.raw_data(), count, MPI_BYTE, peer, tag, c.p2p, &s.requests.back()), call,
              "MPI_Irecv");
      }
    }
    s.outputs = tensors;
    s.source = peer;
    return s;
  };
  return push(backends::OpRecord::point_to_point(op, tensors[0], peer, total(tensors)),
              opts.timeout, std::move(start));
}

std::shared_ptr<Work> ProcessGroupMPI::recv_any_source(std::vector<Tensor> tensors,
                                                       const SendRecvOptions& opts) {
  checks_.recv_any_source(tensors, opts.tag);
  const int tag_ub = runtime().tag_ub;
  C10D_CHECK(opts.tag <= tag_ub, "recv_any_source: tag {} is above MPI_TAG_UB ({})", opts.tag,
             tag_ub);
  auto start = [tensor = tensors.front(), tag = opts.tag](const Comms& c, const Call& call) {
    Started s;
    s.is_recv = true;
    s.tag = tag;
    const int count = as_count(static_cast<std::int64_t>(tensor.nbytes()), call);
    check(MPI_Irecv(tensor.raw_data(), count, MPI_BYTE, MPI_ANY_SOURCE, tag, c.p2p, s.add()), call,
          "MPI_Irecv(MPI_ANY_SOURCE)");
    s.outputs = {tensor};
    return s;
  };
  return push(
      backends::OpRecord::point_to_point("recv_any_source", tensors[0], -1, tensors[0].numel()),
      opts.timeout, std::move(start));
}

}  // namespace c10d::inline v1::mpi
