// A test's check of a request that must fail with a CallMismatch (transport.h: Calls).
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "transport/transport.h"

namespace c10d::inline v1::testing {

// What the CallMismatch must say.
struct WantedMismatch {
  int self = -1;
  int peer = -1;
  transport::Tag tag = 0;
  transport::Call expected = transport::kUnchecked;
  transport::Call received = transport::kUnchecked;
  bool outgoing = false;
};

// Waits for `req` and checks that it fails with the CallMismatch `want` describes; answers its
// message ("" and a failure of the test when it succeeds or fails otherwise).
inline std::string expect_call_mismatch(transport::Request& req, const WantedMismatch& want,
                                        transport::Clock::time_point deadline) {
  try {
    req.wait(deadline);
    ADD_FAILURE() << "the request met a message of another call and succeeded";
  } catch (const transport::CallMismatch& m) {
    EXPECT_EQ(m.self, want.self);
    EXPECT_EQ(m.peer, want.peer);
    EXPECT_EQ(m.tag, want.tag);
    EXPECT_EQ(m.expected, want.expected);
    EXPECT_EQ(m.received, want.received);
    EXPECT_EQ(m.outgoing, want.outgoing);
    return m.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a CallMismatch: " << e.what();
  }
  return "";
}

}  // namespace c10d::inline v1::testing
