// SubTransport: a view of a parent Transport restricted to some of its ranks, renumbered, for
// subgroups (ProcessGroup::new_group). Rank i of the view is rank ranks[i] of the parent; no
// connection is made, the parent's carry the bytes. The view does not touch tags: a subgroup's
// ops are told apart from its parent's by the group id in their tags (transport.h).
//
// abort() aborts the parent: the connections are shared, so a view cannot fail alone. Requests
// are the parent's, so a timed-out one names its peer by the parent's rank, and an irecv's
// source() is the parent's rank too; an irecv_any's source() is this view's (the request is
// wrapped: the view's callers know no other numbering for a sender they did not name). An
// any-source receive of the view matches only its members' messages because its tag carries the
// subgroup's id, which only members send with. host_of_rank() is the parent's for the view's
// members, renumbered (transport.h: hosts in the order of their lowest rank).
// Thread-safety and request lifetime are the parent's.
#pragma once

#include <memory>
#include <vector>

#include "transport/transport.h"

namespace c10d::inline v1::transport {

class SubTransport final : public Transport {
 public:
  // `ranks`: distinct ranks of `parent`, including parent->rank(). Throws InvalidArgument.
  SubTransport(std::shared_ptr<Transport> parent, std::vector<int> ranks);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ranks_->size()); }
  using Transport::irecv;
  using Transport::isend;
  std::unique_ptr<Request> isend(int peer, Tag tag, std::span<const std::byte> data,
                                 Call call) override;
  std::unique_ptr<Request> irecv(int peer, Tag tag, std::span<std::byte> data, Call call) override;
  std::unique_ptr<Request> irecv_any(Tag tag, std::span<std::byte> data) override;
  void abort(std::exception_ptr reason) override { parent_->abort(std::move(reason)); }
  std::vector<int> host_of_rank() const override;
  // The parent's: the requests are the parent's, so their PeerTimeout names the parent's ranks.
  StallReport find_stalled(int peer, std::string_view doing,
                           std::chrono::milliseconds window) override {
    return parent_->find_stalled(peer, doing, window);
  }

 private:
  int parent_rank(int peer) const;

  std::shared_ptr<Transport> parent_;
  // Shared with the any-source requests, which may outlive the view.
  std::shared_ptr<const std::vector<int>> ranks_;
  int rank_ = -1;
};

}  // namespace c10d::inline v1::transport
