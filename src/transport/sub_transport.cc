#include "transport/sub_transport.h"

#include <algorithm>

#include "core/check.h"

namespace c10d::inline v1::transport {
namespace {

// The parent's any-source request, telling its source in the view's numbering.
class ViewRequest final : public Request {
 public:
  // `ranks`: the view's, by view rank (shared: the request may outlive the view).
  ViewRequest(std::unique_ptr<Request> parent, std::shared_ptr<const std::vector<int>> ranks)
      : parent_(std::move(parent)), ranks_(std::move(ranks)) {}
  bool test() override { return parent_->test(); }
  void wait(Clock::time_point deadline) override { parent_->wait(deadline); }
  int source() const override {
    const int s = parent_->source();
    const auto at = std::find(ranks_->begin(), ranks_->end(), s);
    return at == ranks_->end() ? -1 : static_cast<int>(at - ranks_->begin());
  }

 private:
  std::unique_ptr<Request> parent_;
  std::shared_ptr<const std::vector<int>> ranks_;
};

}  // namespace

SubTransport::SubTransport(std::shared_ptr<Transport> parent, std::vector<int> ranks)
    : parent_(std::move(parent)),
      ranks_(std::make_shared<const std::vector<int>>(std::move(ranks))) {
  C10D_CHECK(parent_ != nullptr, "SubTransport: needs a parent transport");
  std::vector<int> seen(static_cast<std::size_t>(parent_->size()), 0);
  for (std::size_t i = 0; i < ranks_->size(); ++i) {
    const int r = (*ranks_)[i];
    C10D_CHECK(r >= 0 && r < parent_->size(), "subgroup rank {} is outside a group of size {}", r,
               parent_->size());
    C10D_CHECK(seen[static_cast<std::size_t>(r)]++ == 0, "subgroup lists rank {} twice", r);
    if (r == parent_->rank()) rank_ = static_cast<int>(i);
  }
  C10D_CHECK(rank_ >= 0, "subgroup does not include this rank ({})", parent_->rank());
}

int SubTransport::parent_rank(int peer) const {
  C10D_CHECK(peer >= 0 && peer < size(), "subgroup rank {}: bad peer {} in a subgroup of size {}",
             rank_, peer, size());
  return (*ranks_)[static_cast<std::size_t>(peer)];
}

std::vector<int> SubTransport::host_of_rank() const {
  const std::vector<int> parent = parent_->host_of_rank();
  C10D_CHECK(static_cast<int>(parent.size()) == parent_->size(),
             "subgroup rank {}: the parent's host map lists {} ranks of {}", rank_, parent.size(),
             parent_->size());
  std::vector<int> hosts;
  hosts.reserve(ranks_->size());
  for (int r : *ranks_) hosts.push_back(parent[static_cast<std::size_t>(r)]);
  return number_hosts(hosts);
}

std::unique_ptr<Request> SubTransport::isend(int peer, Tag tag, std::span<const std::byte> data,
                                             Call call) {
  return parent_->isend(parent_rank(peer), tag, data, call);
}

std::unique_ptr<Request> SubTransport::irecv(int peer, Tag tag, std::span<std::byte> data,
                                             Call call) {
  return parent_->irecv(parent_rank(peer), tag, data, call);
}

std::unique_ptr<Request> SubTransport::irecv_any(Tag tag, std::span<std::byte> data) {
  return std::make_unique<ViewRequest>(parent_->irecv_any(tag, data), ranks_);
}

}  // namespace c10d::inline v1::transport
