// TransportProcessGroup's point-to-point ops (transport_process_group_impl.h): send, recv and
// recv_any_source are queued in issue order with the collectives; the worker posts their
// requests (transport::user_tag of the group and the user's tag, so they never mix with
// collectives) and hands them to the completer thread, which tests them until done or past their
// deadline: a recv waiting for a peer never blocks the collectives queued behind it.
#include <algorithm>
#include <chrono>

#include "backends/common/transport_process_group_impl.h"
#include "core/logging.h"
#include "core/work_control.h"

namespace c10d::inline v1::backends::tpg_detail {

// ---- Queueing (caller's thread; the worker posts them: transport_pg_run.cc) ----

std::shared_ptr<Work> TransportProcessGroup::send(std::vector<Tensor> tensors, int dst_rank,
                                                  const SendRecvOptions& opts) {
  return point_to_point("send", std::move(tensors), dst_rank, opts);
}

std::shared_ptr<Work> TransportProcessGroup::recv(std::vector<Tensor> tensors, int src_rank,
                                                  const SendRecvOptions& opts) {
  return point_to_point("recv", std::move(tensors), src_rank, opts);
}

std::shared_ptr<Work> TransportProcessGroup::point_to_point(std::string_view op,
                                                            std::vector<Tensor> tensors, int peer,
                                                            const SendRecvOptions& opts) {
  checks_.point_to_point(op, tensors, peer, opts.tag);
  const bool is_send = op == "send";
  auto post = [tensors, peer, is_send](transport::Transport& t, transport::Tag tag) {
    std::vector<std::unique_ptr<transport::Request>> requests;
    for (const auto& tensor : tensors) {
      requests.push_back(is_send ? t.isend(peer, tag, bytes_of(tensor))
                                 : t.irecv(peer, tag, bytes_of(tensor)));
    }
    return requests;
  };
  auto record = OpRecord::point_to_point(op, tensors[0], peer, total(tensors));
  return push_p2p(record, opts, std::move(tensors), std::move(post));
}

std::shared_ptr<Work> TransportProcessGroup::recv_any_source(std::vector<Tensor> tensors,
                                                             const SendRecvOptions& opts) {
  checks_.recv_any_source(tensors, opts.tag);
  auto post = [tensor = tensors.front()](transport::Transport& t, transport::Tag tag) {
    std::vector<std::unique_ptr<transport::Request>> requests;
    requests.push_back(t.irecv_any(tag, bytes_of(tensor)));
    return requests;
  };
  auto record = OpRecord::point_to_point("recv_any_source", tensors[0], transport::kAnySource,
                                         tensors[0].numel());
  return push_p2p(record, opts, std::move(tensors), std::move(post));
}

template <typename Post>
std::shared_ptr<Work> TransportProcessGroup::push_p2p(OpRecord& record, const SendRecvOptions& opts,
                                                      std::vector<Tensor> outputs, Post&& post) {
  return push(record, opts.timeout,
              [&](std::shared_ptr<Work> work, const OpRecord& r, Milliseconds t) {
                auto p = std::make_shared<PostOp<std::decay_t<Post>>>(std::move(work), r, t,
                                                                      std::forward<Post>(post));
                p->user_tag = static_cast<std::uint32_t>(opts.tag);
                p->peer = r.rank;
                p->outputs = std::move(outputs);
                return p;
              });
}

// ---- Point-to-point completion (completer thread) ----

// The completer's body. Ops catch their own errors; anything that still escapes (a Work
// callback that throws, say) fails the group and the completer's ops (nobody tests them now),
// and the thread ends, instead of std::terminate ending the process.
void TransportProcessGroup::run_completer() {
  try {
    complete_loop();
  } catch (...) {
    const auto escaped = std::current_exception();
    std::list<PostedP2P> orphans;
    {
      std::lock_guard lock(mu_);
      orphans.swap(posted_);
    }
    try {
      const auto error = runner_.escape("completer", escaped);
      for (auto& p : orphans) p.op->fail(error);
    } catch (...) {  // a callback threw again: the group has failed all the same
      C10D_LOG_ERROR("rank {}: while failing group {}: {}", rank(), options_.group_id,
                     what_of(std::current_exception()));
    }
  }
}

void TransportProcessGroup::complete_loop() {
  auto nap = std::chrono::microseconds(20);
  std::unique_lock lock(mu_);
  const auto stopping = [&] { return runner_.stopping_locked(); };
  for (;;) {
    if (posted_.empty()) {
      if (stopping()) return;
      p2p_cv_.wait(lock, [&] { return stopping() || !posted_.empty(); });
      continue;
    }
    bool progressed = false;
    for (auto it = posted_.begin(); it != posted_.end();) {
      std::exception_ptr error = runner_.failure_locked();
      bool done = error != nullptr;
      if (!done) {
        try {
          transport::Request* pending = nullptr;
          for (const auto& r : it->requests) {
            if (!r->test()) {
              pending = r.get();
              break;
            }
          }
          done = pending == nullptr;
          if (!done && Clock::now() >= it->deadline) {
            error = p2p_timeout(*it, *pending);
            done = true;
          }
        } catch (...) {
          error = std::current_exception();
          done = true;
        }
      }
      if (!done) {
        ++it;
        continue;
      }
      PostedP2P finished = std::move(*it);
      it = posted_.erase(it);
      progressed = true;
      lock.unlock();
      if (hooks_) hooks_->op_finished(*finished.work);
      if (error) {
        fail(error);
        finished.op->fail(error);
      } else {
        if (finished.work->op_name() != "send") {
          core::WorkControl::set_source_rank(*finished.work,
                                             finished.peer != transport::kAnySource
                                                 ? finished.peer
                                                 : finished.requests.front()->source());
        }
        finished.op->succeed(std::move(finished.outputs));
      }
      finished.requests.clear();
      lock.lock();
    }
    if (stopping()) {
      // The destructor fails what is left after joining.
      return;
    }
    nap = progressed ? std::chrono::microseconds(20)
                     : std::min(nap * 2, std::chrono::microseconds(1000));
    if (!posted_.empty()) p2p_cv_.wait_for(lock, nap);
  }
}

// Under mu_ (the completer's loop). The error of send/recv `p`, past its deadline with
// `pending` not done: a PeerTimeout naming the peer, the tag and what this rank last heard from
// the peer (pending.heard(), which only reads: asking moves no bytes and fails nothing).
std::exception_ptr TransportProcessGroup::p2p_timeout(const PostedP2P& p,
                                                      const transport::Request& pending) {
  if (p.peer == transport::kAnySource) {
    return std::make_exception_ptr(transport::PeerTimeout(
        core::with_location(
            __FILE__, __LINE__,
            fmt::format("rank {}: {} #{} (user tag {}, group {}) timed out after {} ms: no rank "
                        "sent a message with that tag",
                        rank(), p.work->op_name(), p.work->sequence(), p.user_tag,
                        options_.group_id,
                        std::chrono::duration_cast<std::chrono::milliseconds>(p.timeout).count())),
        transport::kAnySource));
  }
  const bool is_send = p.work->op_name() == "send";
  const transport::PeerActivity heard = pending.heard();
  return std::make_exception_ptr(transport::PeerTimeout(
      core::with_location(
          __FILE__, __LINE__,
          fmt::format(
              "rank {}: {} #{} {} rank {} (user tag {}, group {}) timed out after {} ms ({})",
              rank(), p.work->op_name(), p.work->sequence(), is_send ? "to" : "from", p.peer,
              p.user_tag, options_.group_id,
              std::chrono::duration_cast<std::chrono::milliseconds>(p.timeout).count(),
              transport::heard_string(heard,
                                      heard.known ? frame_name_locked(heard.tag) : std::string()))),
      p.peer, heard));
}

}  // namespace c10d::inline v1::backends::tpg_detail
