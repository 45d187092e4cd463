// The cross-ring edge probe (algorithms/host_probe.h) and the shares it leads to
// (host_shares.h), over the in-process transport with pretend hosts whose links are made slow
// in the test: a send to another host is held for its bytes' time at the slower host's rate.
#include "algorithms/host_probe.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "algorithms/hierarchical.h"
#include "algorithms/host_shares.h"
#include "c10d/errors.h"
#include "ranks.h"
#include "transport/inproc_transport.h"

namespace c10d::inline v1::algorithms {
namespace {

// A send delivered `delay` after the link is free (after the previous send to that peer, whose
// posting `before` signals), by a thread of its own, as a slow link would: the caller goes on at
// once and sends to one peer stay in order.
class DelayedSend final : public transport::Request {
 public:
  DelayedSend(transport::Transport& t, int peer, transport::Tag tag,
              std::span<const std::byte> data, transport::Call call,
              std::chrono::duration<double> delay, std::shared_future<void> before,
              std::promise<void> posted)
      : done_(std::async(std::launch::async, [&t, peer, tag, data, call, delay, before,
                                              posted = std::move(posted)]() mutable {
          if (before.valid()) before.wait();
          std::this_thread::sleep_for(delay);
          auto send = t.isend(peer, tag, data, call);
          posted.set_value();
          send->wait(transport::Clock::now() + std::chrono::seconds(60));
        })) {}
  ~DelayedSend() override {
    if (done_.valid()) done_.wait();
  }
  // A request may be tested or waited for again once done (ring_all_reduce's
  // wait_watching_sends tests its sends every 50 ms): get() once, then answer from the result.
  bool test() override {
    if (!done_.valid()) return true;
    if (done_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
    done_.get();
    return true;
  }
  void wait(transport::Clock::time_point deadline) override {
    if (!done_.valid()) return;
    if (done_.wait_until(deadline) != std::future_status::ready) {
      throw TimeoutError("a delayed test send passed its deadline");
    }
    done_.get();
  }

 private:
  std::future<void> done_;
};

// An InProcTransport whose sends between hosts arrive bytes * L / min(rate of either host)
// after they are posted: L streams share a host's link.
class SlowLinks final : public transport::Transport {
 public:
  SlowLinks(std::unique_ptr<transport::Transport> inner, std::vector<double> host_rates, int l)
      : inner_(std::move(inner)), rates_(std::move(host_rates)), per_host_(l) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::vector<int> host_of_rank() const override { return inner_->host_of_rank(); }
  using transport::Transport::irecv;
  using transport::Transport::isend;
  std::unique_ptr<transport::Request> isend(int peer, transport::Tag tag,
                                            std::span<const std::byte> data,
                                            transport::Call call) override {
    const std::vector<int> hosts = inner_->host_of_rank();
    const auto from = static_cast<std::size_t>(hosts[static_cast<std::size_t>(rank())]);
    const auto to = static_cast<std::size_t>(hosts[static_cast<std::size_t>(peer)]);
    if (from == to) return inner_->isend(peer, tag, data, call);
    const double rate = std::min(rates_[from], rates_[to]) / per_host_;
    std::promise<void> posted;
    std::shared_future<void> before = std::exchange(last_[peer], posted.get_future().share());
    return std::make_unique<DelayedSend>(
        *inner_, peer, tag, data, call,
        std::chrono::duration<double>(static_cast<double>(data.size()) / rate), before,
        std::move(posted));
  }
  std::unique_ptr<transport::Request> irecv(int peer, transport::Tag tag, std::span<std::byte> data,
                                            transport::Call call) override {
    return inner_->irecv(peer, tag, data, call);
  }
  std::unique_ptr<transport::Request> irecv_any(transport::Tag tag,
                                                std::span<std::byte> data) override {
    return inner_->irecv_any(tag, data);
  }
  void abort(std::exception_ptr reason) override { inner_->abort(std::move(reason)); }

 private:
  std::unique_ptr<transport::Transport> inner_;
  std::vector<double> rates_;
  int per_host_;
  std::map<int, std::shared_future<void>> last_;  // by peer: the last delayed send's posting
};

// Each rank's probe of a world of 3 hosts of 2 ranks with links of `rates` bytes per second.
std::vector<std::vector<double>> probe(const std::vector<double>& rates, std::int64_t bytes) {
  const std::vector<int> hosts{0, 0, 1, 1, 2, 2};
  auto world = std::make_shared<transport::InProcWorld>(6, hosts);
  std::vector<std::vector<double>> seen(6);
  testing::run_ranks(
      6,
      [&](int r) {
        return std::make_unique<SlowLinks>(std::make_unique<transport::InProcTransport>(world, r),
                                           rates, 2);
      },
      [&](int r, transport::Transport& t) {
        seen[static_cast<std::size_t>(r)] =
            probe_edge_rates(testing::context(t), HostLayout(t.host_of_rank()), bytes);
      });
  return seen;
}

// The modelled delays are tens of milliseconds, long beside a thread's scheduling delay even
// under a sanitizer on a loaded machine (which read equal 20 MB/s links, 13 ms each, as 3x
// apart). A delay can only grow, so a rate is never measured above its model.
TEST(HostProbeTest, TheSlowHostsTwoEdgesMeasureSlowAndItGetsTheBiggestShare) {
  // Host 2's link at 5 MB/s, the others' at 40: edges 1 (into host 2) and 2 (out of it) slow.
  const auto seen = probe({40e6, 40e6, 5e6}, 2 << 20);
  for (const auto& edges : seen) EXPECT_EQ(edges, seen[0]);  // every rank alike, bit for bit
  const std::vector<double>& e = seen[0];
  ASSERT_EQ(e.size(), 3u);
  for (int i : {1, 2}) {
    EXPECT_LT(e[i], 5e6 * 1.05) << "edge " << i;
    EXPECT_GT(e[i], 5e6 / 2) << "edge " << i;
  }
  EXPECT_GT(e[0], 3 * e[1]);  // 8x in the model; scheduling only slows the fast one
  const auto shares = next_shares({}, e);
  ASSERT_EQ(shares.size(), 3u);
  EXPECT_GT(shares[2], shares[0]);
  EXPECT_GT(shares[2], shares[1]);
  // Probed again, the same links keep those shares.
  EXPECT_EQ(next_shares(shares, probe({40e6, 40e6, 5e6}, 2 << 20)[0]), shares);
}

TEST(HostProbeTest, EqualLinksKeepEqualShares) {
  const auto seen = probe({4e6, 4e6, 4e6}, 1 << 20);
  EXPECT_EQ(next_shares({}, seen[0]), std::vector<std::int64_t>{});
}

}  // namespace
}  // namespace c10d::inline v1::algorithms
