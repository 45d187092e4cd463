#include "transport/transport.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "core/check.h"

namespace c10d::inline v1::transport {

std::vector<int> Transport::host_of_rank() const { return one_host_each(size()); }

std::vector<int> number_hosts(const std::vector<int>& ids) {
  std::vector<int> seen;  // the ids in order of first appearance
  std::vector<int> hosts;
  hosts.reserve(ids.size());
  for (std::size_t r = 0; r < ids.size(); ++r) {
    C10D_CHECK(ids[r] >= 0, "host map: rank {} has host {}", r, ids[r]);
    const auto host = std::find(seen.begin(), seen.end(), ids[r]) - seen.begin();
    if (host == std::ssize(seen)) seen.push_back(ids[r]);
    hosts.push_back(static_cast<int>(host));
  }
  return hosts;
}

std::vector<int> one_host_each(int size) {
  std::vector<int> hosts(static_cast<std::size_t>(std::max(size, 0)));
  std::iota(hosts.begin(), hosts.end(), 0);
  return hosts;
}

std::string tag_string(Tag tag) {
  const auto group = (tag >> 40) & (kMaxGroups - 1);
  if (tag & kUserTagBit) return fmt::format("group {} user tag {}", group, tag & 0xffffffffu);
  if ((tag >> 40) & kMaxGroups) {
    return fmt::format("group {} control seq {}", group, tag & kSequenceMask);
  }
  if (is_entry_tag(tag)) {
    return fmt::format("group {} seq {} entry check", group, tag & kSequenceMask);
  }
  const int lane = tag_lane(tag);
  if (lane >= 0) {
    return fmt::format("group {} seq {} stage {} lane {}", group, tag & kSequenceMask,
                       (tag >> 32) & 0xf, lane);
  }
  return fmt::format("group {} seq {}", group, tag & kSequenceMask);
}

std::string heard_string(const PeerActivity& heard, std::string_view frame) {
  if (!heard.known) return "nothing heard from it since set-up";
  const double seconds = std::chrono::duration<double>(heard.ago).count();
  return fmt::format("last heard from it {:.1f} s ago: a frame of {}", seconds,
                     frame.empty() ? tag_string(heard.tag) : std::string(frame));
}

std::string any_source_description(int rank, Tag tag, std::size_t bytes, std::string_view via) {
  return fmt::format("rank {} irecv from any rank ({}, {} bytes{}{})", rank, tag_string(tag), bytes,
                     via.empty() ? "" : ", ", via);
}

PeerTimeout any_source_timeout(std::string_view what, Tag tag, Clock::time_point posted_at,
                               std::string_view where) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - posted_at).count();
  return PeerTimeout(
      core::with_location(__FILE__, __LINE__,
                          fmt::format("{} timed out{}: no rank sent a message with {} in the {} ms "
                                      "after posting",
                                      what, where, tag_string(tag), ms)),
      kAnySource);
}

std::exception_ptr call_mismatch(std::string_view request, int self, int peer, Tag tag, Call mine,
                                 Call theirs, bool outgoing) {
  const std::string what =
      outgoing ? fmt::format(
                     "{}: the matching irecv on rank {} belongs to another call ({:#x}) than "
                     "this send ({:#x})",
                     request, peer, theirs, mine)
               : fmt::format(
                     "{}: the message from rank {} belongs to another call ({:#x}) than "
                     "this receive ({:#x})",
                     request, peer, theirs, mine);
  return std::make_exception_ptr(CallMismatch(core::with_location(__FILE__, __LINE__, what), self,
                                              peer, tag, mine, theirs, outgoing));
}

std::exception_ptr receive_refusal(std::string_view request, int self, int sender, Tag tag,
                                   Call mine, Call theirs, std::uint64_t buffer,
                                   std::uint64_t bytes) {
  if (receive_fits(mine, theirs, buffer, bytes)) return nullptr;
  if (!calls_agree(mine, theirs)) return call_mismatch(request, self, sender, tag, mine, theirs);
  return std::make_exception_ptr(InvalidArgument(core::with_location(
      __FILE__, __LINE__,
      fmt::format("{}: size mismatch: the receive buffer has {} bytes but the message from rank {} "
                  "has {} bytes",
                  request, buffer, sender, bytes))));
}

void wait_all(std::span<const std::unique_ptr<Request>> requests, Clock::time_point deadline) {
  for (const auto& r : requests) {
    if (r) r->wait(deadline);
  }
}

}  // namespace c10d::inline v1::transport
