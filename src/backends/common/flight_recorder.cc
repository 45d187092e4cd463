#include "backends/common/flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "backends/common/trace_json.h"
#include "c10d/errors.h"
#include "c10d/trace.h"
#include "core/check.h"
#include "core/fd.h"
#include "core/logging.h"
#include "core/parse.h"

namespace c10d::inline v1::backends::trace {

namespace {

struct Registry {
  std::mutex mu;
  std::vector<std::weak_ptr<TraceRing>> rings;  // GUARDED_BY(mu)
  // Held for a whole dump: one at a time, and group_failed's callers wait for the one running.
  // Taken before mu and the rings' mutexes, never while holding them.
  std::mutex dump_mu;
};

Registry& registry() {
  static Registry r;
  return r;
}

// The entries of `ring`, those not ended shown failed with `error` when `failed` (the dump of the
// group's failure, made before its ops fail with it: they are about to).
std::vector<TraceEntry> entries_of(const TraceRing& ring, const std::string_view* failed) {
  std::vector<TraceEntry> entries = ring.snapshot();
  if (failed == nullptr) return entries;
  const auto now = core::coarse_now();
  for (TraceEntry& e : entries) {
    const auto state = e.record.state();
    if (state == OpRecord::State::kCompleted || state == OpRecord::State::kFailed) continue;
    e.record.state_ = OpRecord::State::kFailed;
    e.record.ended = now;
    e.error.assign(*failed);
  }
  return entries;
}

// `failed_ring`: the ring whose group failed with `*error` (entries_of), or null.
std::vector<std::string> dump_locked(const std::string& dir, std::string_view reason,
                                     const TraceRing* failed_ring = nullptr,
                                     const std::string_view* error = nullptr) {
  std::vector<std::shared_ptr<TraceRing>> live;
  {
    auto& reg = registry();
    std::lock_guard lock(reg.mu);
    for (const auto& w : reg.rings) {
      if (auto ring = w.lock()) live.push_back(std::move(ring));
    }
  }
  std::map<int, std::vector<RingDump>> by_rank;
  for (const auto& ring : live) {
    by_rank[ring->group().global_rank()].push_back(
        RingDump{ring->group(), entries_of(*ring, ring.get() == failed_ring ? error : nullptr)});
  }
  const auto ns = [](auto t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  };
  const std::int64_t offset =
      ns(std::chrono::system_clock::now()) - ns(std::chrono::steady_clock::now());
  std::vector<std::string> paths;
  if (by_rank.empty()) return paths;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) C10D_THROW(Error, "cannot make the trace directory {}: {}", dir, ec.message());
  for (const auto& [rank, rings] : by_rank) {
    const auto path = (std::filesystem::path(dir) / fmt::format("c10d_trace_rank_{}.json", rank));
    const auto tmp = path.string() + fmt::format(".tmp{}", ::getpid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << write_dump(rank, reason, rings, offset);
      out.close();
      if (!out.good()) C10D_THROW(Error, "cannot write the trace dump {}", tmp);
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec)
      C10D_THROW(Error, "cannot rename the trace dump {} to {}: {}", tmp, path.string(),
                 ec.message());
    paths.push_back(path.string());
  }
  return paths;
}

// ---- SIGUSR1: the handler writes a byte to a pipe; a thread of ours reads it and dumps ----

std::atomic<int> g_signal_pipe{-1};  // the pipe's write end, -1 once the thread is stopping

extern "C" void on_dump_signal(int) {
  const int saved = errno;  // write() may change it under the interrupted code
  const int fd = g_signal_pipe.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const char b = 'd';
    [[maybe_unused]] const auto n = ::write(fd, &b, 1);  // full pipe: a dump is pending anyway
  }
  errno = saved;
}

class SignalDumper {
 public:
  SignalDumper() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      C10D_THROW(Error, "flight recorder: pipe2 failed: errno {}", errno);
    read_ = core::Fd(fds[0]);
    write_ = core::Fd(fds[1]);
    ::fcntl(write_.get(), F_SETFL, O_NONBLOCK);  // the handler never blocks
    thread_ = std::thread([this] { run(); });
    g_signal_pipe.store(write_.get(), std::memory_order_relaxed);
  }
  // At exit: the thread ends after any dump it is making.
  ~SignalDumper() {
    g_signal_pipe.store(-1, std::memory_order_relaxed);
    const char q = 'q';
    [[maybe_unused]] const auto n = ::write(write_.get(), &q, 1);
    thread_.join();
  }
  SignalDumper(const SignalDumper&) = delete;
  SignalDumper& operator=(const SignalDumper&) = delete;

 private:
  void run() {
    for (;;) {
      char b = 0;
      const auto n = ::read(read_.get(), &b, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || b == 'q') return;
      try {
        const auto dir = dir_from_env();
        if (!dir) continue;
        std::lock_guard lock(registry().dump_mu);
        const auto paths = dump_locked(*dir, "SIGUSR1");
        C10D_LOG_INFO("flight recorder: SIGUSR1: wrote {} trace file(s) to {}", paths.size(), *dir);
      } catch (const std::exception& e) {
        C10D_LOG_WARN("flight recorder: SIGUSR1: the dump failed: {}", e.what());
      }
    }
  }

  core::Fd read_, write_;
  std::thread thread_;
};

// Once, when a group is made with C10D_TRACE_DIR set, unless the program handles SIGUSR1.
void install_signal_dump() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (::sigaction(SIGUSR1, nullptr, &old) != 0) return;
    if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) {
      C10D_LOG_INFO("flight recorder: SIGUSR1 has a handler already; no dump on SIGUSR1");
      return;
    }
    try {
      static SignalDumper dumper;  // joined at exit
    } catch (const std::exception& e) {
      C10D_LOG_WARN("flight recorder: no dump on SIGUSR1: {}", e.what());
      return;
    }
    struct sigaction sa {};
    sa.sa_handler = on_dump_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &sa, nullptr);
  });
}

}  // namespace

std::size_t buffer_from_env() {
  return static_cast<std::size_t>(
      core::env_int("C10D_TRACE_BUFFER", 0, kMaxBuffer).value_or(kDefaultBuffer));
}

std::optional<std::string> dir_from_env() { return core::env_text("C10D_TRACE_DIR"); }

std::shared_ptr<TraceRing> make_ring(TraceGroup group) {
  const std::size_t n = buffer_from_env();
  if (n == 0) return nullptr;
  auto ring = std::make_shared<TraceRing>(std::move(group), n);
  {
    auto& reg = registry();
    std::lock_guard lock(reg.mu);
    std::erase_if(reg.rings, [](const auto& w) { return w.expired(); });
    reg.rings.push_back(ring);
  }
  if (dir_from_env()) install_signal_dump();
  return ring;
}

std::vector<std::string> dump_to(const std::string& dir, std::string_view reason) {
  std::lock_guard lock(registry().dump_mu);
  return dump_locked(dir, reason);
}

namespace {

// The dump of group_failed (`group`) and op_failed.
void dump_failure(TraceRing& ring, std::string_view error, bool group) noexcept {
  const TraceGroup& g = ring.group();
  try {
    std::lock_guard lock(registry().dump_mu);
    if (ring.group_failure_dumped || (!group && ring.op_failure_dumped)) return;
    (group ? ring.group_failure_dumped : ring.op_failure_dumped) = true;
    const auto dir = dir_from_env();
    if (!dir) return;
    const auto paths = dump_locked(
        *dir, fmt::format("{}group {} failed: {}", group ? "" : "an op of ", g.desc, error),
        group ? &ring : nullptr, &error);
    C10D_LOG_INFO("rank {}: flight recorder: group {} failed; wrote {} trace file(s) to {}",
                  g.global_rank(), g.desc, paths.size(), *dir);
  } catch (const std::exception& e) {
    C10D_LOG_WARN("rank {}: flight recorder: the dump after group {} failed was not written: {}",
                  g.global_rank(), g.desc, e.what());
  } catch (...) {
    C10D_LOG_WARN("rank {}: flight recorder: the dump after group {} failed was not written",
                  g.global_rank(), g.desc);
  }
}

}  // namespace

void group_failed(TraceRing& ring, std::string_view error) noexcept {
  dump_failure(ring, error, true);
}

void op_failed(TraceRing& ring, std::string_view error) noexcept {
  dump_failure(ring, error, false);
}

}  // namespace c10d::inline v1::backends::trace

namespace c10d::inline v1 {

std::vector<std::string> dump_traces(const std::string& dir) {
  std::string where = dir;
  if (where.empty()) where = backends::trace::dir_from_env().value_or("");
  C10D_CHECK(!where.empty(), "dump_traces: no directory given and C10D_TRACE_DIR is not set");
  return backends::trace::dump_to(where, "dump_traces");
}

}  // namespace c10d::inline v1
