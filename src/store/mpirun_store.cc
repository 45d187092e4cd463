#include "store/mpirun_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <thread>

#include "core/auth.h"
#include "core/check.h"
#include "core/fd.h"
#include "core/host.h"
#include "core/logging.h"
#include "core/parse.h"
#include "store/store_util.h"

namespace c10d::inline v1::store {
namespace {

// More than any port file holds ("65535\n" and a 64-digit token): a larger file is not one.
constexpr std::size_t kMaxPortFileBytes = 4096;
constexpr std::size_t kMaxTokenBytes = 1024;

// What a rank that cannot use the file should do instead.
constexpr std::string_view kInstead =
    "set C10D_STORE_TOKEN to the same secret for every rank, or MASTER_ADDR and MASTER_PORT";

using core::env_text;

// mpirun's counts: a malformed one is an InvalidArgument naming it (never a partial parse).
int env_count(const char* name) {
  return static_cast<int>(core::env_int(name, 1, std::numeric_limits<int>::max()).value_or(-1));
}

// The directory holds the port file, and the token when rank 0 made one up: whoever may
// write there could replace the file with one that sends the ranks to a store of theirs. It
// must be this user's, a real directory, and writable by no one else.
void check_private_directory(const std::filesystem::path& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    C10D_THROW(StoreError,
               "env:// under mpirun: cannot use the directory {} for the store's port: {}",
               dir.string(), std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 022) != 0) {
    C10D_THROW(StoreError,
               "env:// under mpirun: {} (for the store's port) must be a directory of this user "
               "(uid {}) that no one else may write, but it is {} of uid {} with mode {:o}; {}",
               dir.string(), ::geteuid(), S_ISDIR(st.st_mode) ? "a directory" : "not a directory",
               st.st_uid, st.st_mode & 07777, kInstead);
  }
}

// What rank 0 left in the port file.
struct Published {
  std::uint16_t port = 0;
  std::string token;  // empty: rank 0 used C10D_STORE_TOKEN
};

// The port file's contents, or nullopt while it does not exist. A file that exists but cannot
// be read, is not this user's private regular file, or does not hold "port\n[token\n]" is a
// StoreError naming it: it was not written by this job's rank 0, or this rank cannot see it.
std::optional<Published> read_port_file(const std::filesystem::path& path, int rank) {
  core::Fd in(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!in.valid()) {
    if (errno == ENOENT) return std::nullopt;
    C10D_THROW(StoreError,
               "env:// under mpirun: rank {} cannot read the store's port and token from {}: {}; "
               "{}",
               rank, path.string(), std::strerror(errno), kInstead);
  }
  struct stat st {};
  if (::fstat(in.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & 077) != 0 || st.st_size > static_cast<off_t>(kMaxPortFileBytes)) {
    C10D_THROW(StoreError,
               "env:// under mpirun: rank {}: {} is not the private file rank 0 writes (a "
               "regular file of this user, mode 0600, at most {} bytes); {}",
               rank, path.string(), kMaxPortFileBytes, kInstead);
  }
  std::string text(kMaxPortFileBytes + 1, '\0');
  std::size_t got = 0;
  for (;;) {
    const ssize_t n = ::read(in.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
    if (got == text.size()) break;
  }
  text.resize(got);
  const auto bad = [&](const std::string& why) {
    C10D_THROW(StoreError,
               "env:// under mpirun: rank {}: {} does not hold \"port\\n[token\\n]\": {}", rank,
               path.string(), why);
  };
  const auto first = text.find('\n');
  if (first == std::string::npos) bad("no line");
  const auto port = core::parse_uint(std::string_view(text).substr(0, first), 1, 65535);
  if (!port.value) bad("port " + port.error);
  Published p;
  p.port = static_cast<std::uint16_t>(*port.value);
  const std::string_view rest = std::string_view(text).substr(first + 1);
  if (!rest.empty()) {
    const auto second = rest.find('\n');
    if (second == std::string_view::npos || second + 1 != rest.size()) bad("more than a token");
    const std::string_view token = rest.substr(0, second);
    if (token.empty() || token.size() > kMaxTokenBytes)
      bad("a token of " + std::to_string(token.size()) + " bytes");
    for (const char c : token) {
      if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
        bad("a token with a control character or space");
    }
    p.token = std::string(token);
  }
  return p;
}

// What rank 0 published goes with its store: a port file left behind would send a later job with
// the same id to a port that someone else may hold by then, and the fallback directories would
// pile up in $TMPDIR. The file goes only while it still holds what this store wrote (a later
// store of this process may have replaced it); the directory only when this store made it, and
// only when empty. Never throws: it runs in a deleter.
void unpublish(const std::filesystem::path& port_file, const std::string& text, bool made_dir) {
  std::error_code ec;
  {
    std::ifstream in(port_file, std::ios::binary);
    std::string held(kMaxPortFileBytes + 1, '\0');
    in.read(held.data(), static_cast<std::streamsize>(held.size()));
    held.resize(static_cast<std::size_t>(in.gcount()));
    if (held == text) std::filesystem::remove(port_file, ec);
  }
  if (made_dir) std::filesystem::remove(port_file.parent_path(), ec);  // fails when not empty
}

}  // namespace

std::optional<MpirunJob> mpirun_job() {
  auto job_id = env_text("PMIX_NAMESPACE");
  if (!job_id) job_id = env_text("OMPI_MCA_ess_base_jobid");
  if (!job_id || !env_text("OMPI_COMM_WORLD_SIZE")) return std::nullopt;
  MpirunJob job;
  job.size = env_count("OMPI_COMM_WORLD_SIZE");
  job.local_size = core::env_local_processes("OMPI_COMM_WORLD_LOCAL_SIZE").value_or(-1);
  std::filesystem::path dir;
  if (auto session = env_text("OMPI_MCA_orte_jobfam_session_dir")) {
    dir = *session;
  } else {
    dir = std::filesystem::path(env_text("TMPDIR").value_or("/tmp")) / ("c10d-" + *job_id);
  }
  // The job id is part of a file name: nothing in it may lead out of the directory.
  C10D_CHECK(job_id->find('/') == std::string::npos && *job_id != "." && *job_id != "..",
             "env:// under mpirun: the job id '{}' (PMIX_NAMESPACE or OMPI_MCA_ess_base_jobid) "
             "cannot name a file",
             *job_id);
  job.port_file = dir / ("c10d-store-" + *job_id);
  return job;
}

std::shared_ptr<Store> open_mpirun_store(const MpirunJob& job, int rank, Milliseconds timeout) {
  C10D_CHECK(job.local_size == job.size,
             "env:// under mpirun: the {} ranks span several hosts ({} on this one), so rank 0 "
             "cannot host the store on this host for all of them; set MASTER_ADDR and "
             "MASTER_PORT (and C10D_STORE_TOKEN, the same on every rank, so that the store is "
             "closed to others)",
             job.size, job.local_size);
  TCPStoreOptions options;
  options.host = "127.0.0.1";
  options.timeout = timeout;
  const std::filesystem::path dir = job.port_file.parent_path();
  if (rank == 0) {
    // Without C10D_STORE_TOKEN the store would be open to every process on this host: a token
    // made up here closes it, and reaches the other ranks through a file only this user reads.
    const bool own_token = !core::token_from_env();
    if (own_token) options.token = core::random_hex(32);
    // mpirun's session directory exists; the fallback may not.
    const bool made_dir = ::mkdir(dir.c_str(), 0700) == 0;
    try {
      check_private_directory(dir);
      options.is_server = true;
      options.port = 0;
      auto store = std::make_unique<TCPStore>(options);
      const std::uint16_t port = store->port();
      const std::string text = fmt::format("{}\n{}", port, own_token ? options.token + "\n" : "");
      write_file_atomically(job.port_file, text, 0600,
                            "env:// under mpirun");  // may hold the token
      C10D_LOG_INFO("rendezvous: rank 0 hosts the store at 127.0.0.1:{} (port{} in {})", port,
                    own_token ? " and token" : "", job.port_file.string());
      return std::shared_ptr<Store>(store.release(),
                                    [port_file = job.port_file, text, made_dir](Store* s) {
                                      delete s;
                                      unpublish(port_file, text, made_dir);
                                    });
    } catch (...) {
      std::error_code ec;
      if (made_dir) std::filesystem::remove(dir, ec);
      throw;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (std::filesystem::is_directory(dir)) check_private_directory(dir);
    if (const auto published = read_port_file(job.port_file, rank)) {
      options.port = published->port;
      // C10D_STORE_TOKEN, when set, is what every rank uses (TCPStore reads it).
      if (!published->token.empty() && !core::token_from_env()) options.token = published->token;
      C10D_LOG_INFO("rendezvous: rank {} connects to the store at 127.0.0.1:{} (from {})", rank,
                    options.port, job.port_file.string());
      return std::make_shared<TCPStore>(std::move(options));
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited >= timeout) {
      C10D_THROW(TimeoutError,
                 "env:// under mpirun: rank {} waited {} ms for rank 0 to write the store's port "
                 "to {} (ranks on another host never see it: {})",
                 rank, std::chrono::duration_cast<Milliseconds>(waited).count(),
                 job.port_file.string(), kInstead);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace c10d::inline v1::store
