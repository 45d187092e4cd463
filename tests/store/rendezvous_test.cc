// c10d::rendezvous: URL parsing and validation for tcp://, env:// and file:// (every error
// names the piece that is wrong), where rank and world size come from, and small worlds of
// threads that meet through each init method.
#include "c10d/rendezvous.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "c10d/errors.h"
#include "c10d/store.h"
#include "store/tcp_store_server.h"

namespace c10d::inline v1 {
namespace {

constexpr Milliseconds kTimeout{10'000};

// Every variable rendezvous reads. The fixture clears them all and restores them afterwards,
// so a test sees only what it sets.
const char* const kRendezvousVars[] = {"MASTER_ADDR",
                                       "MASTER_PORT",
                                       "RANK",
                                       "WORLD_SIZE",
                                       "OMPI_COMM_WORLD_RANK",
                                       "OMPI_COMM_WORLD_SIZE",
                                       "C10D_STORE_EXTERNAL",
                                       "C10D_STORE_TOKEN",
                                       "PMIX_NAMESPACE",
                                       "OMPI_MCA_ess_base_jobid",
                                       "OMPI_COMM_WORLD_LOCAL_SIZE",
                                       "OMPI_MCA_orte_jobfam_session_dir",
                                       "TMPDIR"};

class RendezvousTest : public ::testing::Test {
 protected:
  RendezvousTest() {
    for (const char* name : kRendezvousVars) {
      const char* value = std::getenv(name);
      saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
      ::unsetenv(name);
    }
  }
  ~RendezvousTest() override {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

  static void set_env(const char* name, const std::string& value) {
    ::setenv(name, value.c_str(), 1);
  }

  // The message of the E that `fn` throws; fails the test, naming `what` (what `fn` does), when
  // it throws anything else or nothing.
  template <typename E>
  static std::string message_of(std::string_view what, const std::function<void()>& fn) {
    try {
      fn();
    } catch (const E& e) {
      return e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": threw another kind of error: " << e.what();
      return {};
    }
    ADD_FAILURE() << what << ": threw nothing";
    return {};
  }

  // The message of the InvalidArgument that rendezvous throws (fails the test when none is).
  static std::string invalid_argument(std::string_view init_method, int rank = -1,
                                      int world_size = -1, Milliseconds timeout = kTimeout) {
    return message_of<InvalidArgument>(init_method,
                                       [&] { rendezvous(init_method, rank, world_size, timeout); });
  }

  // Asserts that the error for `init_method` mentions every one of `pieces`.
  static void expect_error_names(std::string_view init_method,
                                 const std::vector<std::string>& pieces, int rank = -1,
                                 int world_size = -1) {
    const std::string message = invalid_argument(init_method, rank, world_size);
    for (const std::string& piece : pieces) {
      EXPECT_NE(message.find(piece), std::string::npos)
          << init_method << ": '" << piece << "' not in: " << message;
    }
  }

  static std::string temp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() /
            ("c10d_rendezvous_test_" + std::to_string(::getpid()) + "_" + name))
        .string();
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// Every store from a rendezvous is used the same way: a key written by one rank is read by all.
void expect_round_trip(Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::string_view(value));
  EXPECT_EQ(store.get_string(key), value);
}

TEST_F(RendezvousTest, UnknownOrMissingSchemeIsNamed) {
  expect_error_names("udp://127.0.0.1:1", {"unsupported init method scheme 'udp'"}, 0, 1);
  expect_error_names("127.0.0.1:29500", {"no scheme", "127.0.0.1:29500"}, 0, 1);
  expect_error_names("", {"no scheme"}, 0, 1);
}

TEST_F(RendezvousTest, TcpAddressErrorsNameTheBadPiece) {
  expect_error_names("tcp://:29500", {"missing host"}, 0, 1);
  expect_error_names("tcp://127.0.0.1", {"missing port"}, 0, 1);
  expect_error_names("tcp://127.0.0.1:", {"port", "empty"}, 0, 1);
  expect_error_names("tcp://127.0.0.1:http", {"port", "'http'"}, 0, 1);
  expect_error_names("tcp://127.0.0.1:70000", {"port", "70000", "out of range"}, 0, 1);
  expect_error_names("tcp://127.0.0.1:-1", {"port", "-1"}, 0, 1);
  expect_error_names("tcp://::1:29500", {"brackets"}, 0, 1);
  expect_error_names("tcp://[::1:29500", {"closing ']'"}, 0, 1);
  expect_error_names("tcp://[::1]29500", {"':port'"}, 0, 1);
  expect_error_names("tcp://[::1]", {"missing port"}, 0, 1);
}

TEST_F(RendezvousTest, QueryErrorsNameTheParameter) {
  expect_error_names("tcp://127.0.0.1:1?rank=one&world_size=2", {"rank", "'one'"});
  expect_error_names("tcp://127.0.0.1:1?rank=0&world_size=", {"world_size", "empty"});
  expect_error_names("tcp://127.0.0.1:1?rank", {"'rank'", "no value"});
  expect_error_names("tcp://127.0.0.1:1?rank=0&rank=1", {"'rank'", "twice"});
  expect_error_names("tcp://127.0.0.1:1?rank=0&world_size=1&colour=red", {"'colour'"});
  expect_error_names("tcp://127.0.0.1:1?rank=0&world_size=1&external=maybe",
                     {"external", "'maybe'"});
}

TEST_F(RendezvousTest, RankAndWorldSizeAreValidated) {
  expect_error_names("tcp://127.0.0.1:1?rank=5&world_size=4",
                     {"rank 5 out of range for world_size 4"});
  expect_error_names("tcp://127.0.0.1:1?rank=0&world_size=0", {"world_size 0"});
  expect_error_names("tcp://127.0.0.1:1?world_size=2", {"needs rank", "RANK"});
  expect_error_names("tcp://127.0.0.1:1?rank=0", {"needs world_size", "WORLD_SIZE"});
  expect_error_names("tcp://127.0.0.1:1", {"rank 3 out of range for world_size 2"}, 3, 2);
  // A connecting rank cannot know the port an ephemeral server got.
  expect_error_names("tcp://127.0.0.1:0?rank=1&world_size=2", {"port 0", "rank 1"});
  expect_error_names("tcp://127.0.0.1:0?rank=0&world_size=2&external=1", {"port 0", "external"});
  const std::string message = invalid_argument("tcp://127.0.0.1:1", 0, 1, Milliseconds(0));
  EXPECT_NE(message.find("timeout"), std::string::npos) << message;
}

TEST_F(RendezvousTest, EnvErrorsNameTheVariable) {
  expect_error_names("env://", {"env:// needs MASTER_ADDR (unset or empty)"});
  set_env("MASTER_ADDR", "127.0.0.1");
  expect_error_names("env://", {"env:// needs MASTER_PORT (unset or empty)"});
  set_env("MASTER_PORT", "port");
  expect_error_names("env://", {"MASTER_PORT", "'port'"});
  set_env("MASTER_PORT", "65536");
  expect_error_names("env://", {"MASTER_PORT", "65536"});
  set_env("MASTER_PORT", "1");
  expect_error_names("env://", {"needs rank", "RANK", "OMPI_COMM_WORLD_RANK"});
  set_env("RANK", "zero");
  expect_error_names("env://", {"RANK", "'zero'"});
  set_env("RANK", "0");
  expect_error_names("env://", {"needs world_size", "WORLD_SIZE"});
  set_env("WORLD_SIZE", "4x");
  expect_error_names("env://", {"WORLD_SIZE", "'4x'"});
  set_env("WORLD_SIZE", "4");
  set_env("RANK", "4");
  expect_error_names("env://", {"rank 4 out of range for world_size 4"});
  set_env("RANK", "1");
  set_env("C10D_STORE_EXTERNAL", "perhaps");
  expect_error_names("env://", {"C10D_STORE_EXTERNAL", "'perhaps'"});
  expect_error_names("env://127.0.0.1:1", {"env:// takes no address"});
  set_env("MASTER_ADDR", "");
  expect_error_names("env://", {"env:// needs MASTER_ADDR (unset or empty)"});
  set_env("MASTER_ADDR", "[]");
  expect_error_names("env://", {"env:// needs MASTER_ADDR ('[]' names no host)"});
}

TEST_F(RendezvousTest, FileErrorsNameThePath) {
  expect_error_names("file://", {"file:// needs a path"}, 0, 1);
  expect_error_names("file://?rank=0&world_size=1", {"file:// needs a path"});
  expect_error_names("file://relative/store", {"'relative/store'", "absolute"}, 0, 1);
  expect_error_names("file:///tmp/x?rank=2&world_size=2", {"rank 2 out of range for world_size 2"});
  expect_error_names("file:///tmp/x?rank=0&world_size=1&external=1", {"external"});
}

TEST_F(RendezvousTest, TcpRankZeroHostsOnAnEphemeralPort) {
  RendezvousResult rv = rendezvous("tcp://127.0.0.1:0?rank=0&world_size=1", -1, -1, kTimeout);
  EXPECT_EQ(rv.rank, 0);
  EXPECT_EQ(rv.world_size, 1);
  auto* tcp = dynamic_cast<TCPStore*>(rv.store.get());
  ASSERT_NE(tcp, nullptr);
  EXPECT_NE(tcp->port(), 0);
  expect_round_trip(*rv.store, "k", "v");
}

TEST_F(RendezvousTest, TcpTwoRanksInThreadsMeetAtRankZerosPort) {
  RendezvousResult rank0 = rendezvous("tcp://127.0.0.1:0?rank=0&world_size=2", -1, -1, kTimeout);
  const std::uint16_t port = dynamic_cast<TCPStore&>(*rank0.store).port();
  auto rank1 = std::async(std::launch::async, [port] {
    RendezvousResult rv = rendezvous("tcp://127.0.0.1:" + std::to_string(port), 1, 2, kTimeout);
    rv.store->set("from/1", std::string_view("one"));
    return rv.store->get_string("from/0") + "," + std::to_string(rv.rank) + "/" +
           std::to_string(rv.world_size);
  });
  rank0.store->set("from/0", std::string_view("zero"));
  EXPECT_EQ(rank0.store->get_string("from/1"), "one");
  EXPECT_EQ(rank1.get(), "zero,1/2");
}

TEST_F(RendezvousTest, IPv6LiteralHostInBrackets) {
  // Only where this machine has an IPv6 loopback.
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 loopback{};
  loopback.sin6_family = AF_INET6;
  loopback.sin6_addr = in6addr_loopback;
  const bool has_v6 =
      fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&loopback), sizeof(loopback)) == 0;
  if (fd >= 0) ::close(fd);
  if (!has_v6) GTEST_SKIP() << "no IPv6 loopback";
  RendezvousResult rv = rendezvous("tcp://[::1]:0?rank=0&world_size=1", -1, -1, kTimeout);
  auto& tcp = dynamic_cast<TCPStore&>(*rv.store);
  EXPECT_EQ(tcp.host(), "::1");
  expect_round_trip(*rv.store, "v6", "yes");
}

TEST_F(RendezvousTest, ExternalRankZeroConnectsToARunningServer) {
  TCPStoreServer server(store::ServerOptions{});
  const std::string url = "tcp://127.0.0.1:" + std::to_string(server.port());
  RendezvousResult rv = rendezvous(url + "?rank=0&world_size=2&external=1", -1, -1, kTimeout);
  rv.store->set("seen", std::string_view("by the server"));
  // The key lives in the external server: a second client reads it there.
  TCPStoreOptions options;
  options.port = server.port();
  options.timeout = kTimeout;
  TCPStore other(options);
  EXPECT_EQ(other.get_string("seen"), "by the server");

  set_env("C10D_STORE_EXTERNAL", "1");
  RendezvousResult from_env = rendezvous(url, 0, 2, kTimeout);
  EXPECT_EQ(from_env.store->get_string("seen"), "by the server");
}

TEST_F(RendezvousTest, EnvReadsMasterAddrPortRankAndWorldSize) {
  set_env("MASTER_ADDR", "127.0.0.1");
  set_env("MASTER_PORT", "0");
  set_env("RANK", "0");
  set_env("WORLD_SIZE", "1");
  RendezvousResult rv = rendezvous("env://", -1, -1, kTimeout);
  EXPECT_EQ(rv.rank, 0);
  EXPECT_EQ(rv.world_size, 1);
  expect_round_trip(*rv.store, "env", "ok");
}

TEST_F(RendezvousTest, EnvFallsBackToMpirunVariables) {
  set_env("MASTER_ADDR", "127.0.0.1");
  set_env("MASTER_PORT", "0");
  set_env("OMPI_COMM_WORLD_RANK", "0");
  set_env("OMPI_COMM_WORLD_SIZE", "1");
  RendezvousResult rv = rendezvous("env://", -1, -1, kTimeout);
  EXPECT_EQ(rv.rank, 0);
  EXPECT_EQ(rv.world_size, 1);
  expect_round_trip(*rv.store, "mpi", "ok");
}

// Where rank 0 of a job set by set_mpirun_job leaves its store's port (and token).
std::filesystem::path port_file(const std::string& session_dir) {
  return std::filesystem::path(session_dir) / ("c10d-store-job" + std::to_string(::getpid()));
}

// As mpirun sets them, for a job of `size` ranks, `local` of them on this host.
void set_mpirun_job(const std::string& session_dir, int size, int local) {
  ::setenv("PMIX_NAMESPACE", ("job" + std::to_string(::getpid())).c_str(), 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", std::to_string(size).c_str(), 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(local).c_str(), 1);
  ::setenv("OMPI_MCA_orte_jobfam_session_dir", session_dir.c_str(), 1);
}

// A variable set but empty is unset, as everywhere in c10d: an empty RANK defers to mpirun's,
// and empty MASTER_ADDR and MASTER_PORT under mpirun leave the store to rank 0 (here, on ranks
// that span hosts, that is refused naming them).
TEST_F(RendezvousTest, EmptyVariablesCountAsUnset) {
  TCPStoreServer server(store::ServerOptions{});
  const std::string url = "tcp://127.0.0.1:" + std::to_string(server.port());
  set_env("C10D_STORE_EXTERNAL", "1");
  set_env("OMPI_COMM_WORLD_RANK", "1");
  set_env("OMPI_COMM_WORLD_SIZE", "2");
  set_env("RANK", "");
  set_env("WORLD_SIZE", "");
  RendezvousResult rv = rendezvous(url, -1, -1, kTimeout);
  EXPECT_EQ(rv.rank, 1);
  EXPECT_EQ(rv.world_size, 2);
  set_mpirun_job(temp_path("mpirun_empty"), 4, 2);
  set_env("MASTER_ADDR", "");
  set_env("MASTER_PORT", "");
  expect_error_names("env://", {"span several hosts"}, 1);
}

TEST_F(RendezvousTest, EnvUnderMpirunWithoutAddressMeetsAtTheStoreRankZeroHosts) {
  const std::string dir = temp_path("mpirun_session");
  set_mpirun_job(dir, 2, 2);
  // Rank 1 starts first and waits for rank 0's port to appear in the session directory.
  auto rank1 = std::async(std::launch::async, [] {
    RendezvousResult rv = rendezvous("env://", 1, -1, kTimeout);
    rv.store->set("from/1", std::string_view("one"));
    return rv.store->get_string("from/0") + "," + std::to_string(rv.world_size);
  });
  RendezvousResult rank0 = rendezvous("env://", 0, -1, kTimeout);
  EXPECT_EQ(rank0.store_host, "127.0.0.1");
  rank0.store->set("from/0", std::string_view("zero"));
  EXPECT_EQ(rank0.store->get_string("from/1"), "one");
  EXPECT_EQ(rank1.get(), "zero,2");
  std::filesystem::remove_all(dir);
}

// Without C10D_STORE_TOKEN the store rank 0 hosts is closed: rank 0 makes up a token and leaves
// it beside the port in a file only this user may read, the ranks meet with it, and a client
// without it (another process of the host that found the port) is refused. With the variable
// set, the file holds the port alone and every rank uses the variable.
TEST_F(RendezvousTest, EnvUnderMpirunClosesTheStoreWithATokenInAPrivateFile) {
  const std::string dir = temp_path("mpirun_token");
  set_mpirun_job(dir, 2, 2);
  const std::filesystem::path file = port_file(dir);
  for (const bool env_token : {false, true}) {
    SCOPED_TRACE(env_token ? "C10D_STORE_TOKEN set" : "no C10D_STORE_TOKEN");
    std::filesystem::remove_all(dir);
    if (env_token) set_env("C10D_STORE_TOKEN", "a secret of the job");
    auto rank1 = std::async(std::launch::async, [] {
      RendezvousResult rv = rendezvous("env://", 1, -1, kTimeout);
      return rv.store->get_string("from/0");
    });
    RendezvousResult rank0 = rendezvous("env://", 0, -1, kTimeout);
    rank0.store->set("from/0", std::string_view("zero"));
    EXPECT_EQ(rank1.get(), "zero");
    EXPECT_EQ(std::filesystem::status(file).permissions(),
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    std::ifstream in(file);
    std::string port_line, token_line;
    std::getline(in, port_line);
    const bool has_token = static_cast<bool>(std::getline(in, token_line));
    EXPECT_EQ(has_token, !env_token) << token_line;
    if (!env_token) {
      EXPECT_EQ(token_line.size(), 64u) << token_line;
    }

    ::unsetenv("C10D_STORE_TOKEN");
    TCPStoreOptions stranger;
    stranger.port = static_cast<std::uint16_t>(std::stoi(port_line));
    stranger.timeout = Milliseconds(2000);
    const std::string refused =
        message_of<StoreError>("a client without the token", [&] { TCPStore open(stranger); });
    EXPECT_NE(refused.find("requires authentication"), std::string::npos) << refused;
  }
  std::filesystem::remove_all(dir);
}

// Rank 0's file is read strictly: a port with trailing junk, a token with a space, a file
// others may read or one that is not a regular file, and a directory others may write are
// refused naming the file (or directory) and what to set instead, never taken in part.
TEST_F(RendezvousTest, EnvUnderMpirunRefusesAPortFileRankZeroDidNotWrite) {
  const std::string dir = temp_path("mpirun_forged");
  set_mpirun_job(dir, 2, 2);
  const std::filesystem::path file = port_file(dir);
  const auto refusal = [] {
    return message_of<StoreError>("rank 1 with a forged port file",
                                  [] { rendezvous("env://", 1, -1, Milliseconds(2000)); });
  };
  const auto forge = [&](const std::string& text, std::filesystem::perms perms) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directory(dir);
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
    {
      std::ofstream out(file);
      out << text;
    }
    std::filesystem::permissions(file, perms);
  };
  const auto owner_rw = std::filesystem::perms::owner_read | std::filesystem::perms::owner_write;
  for (const std::string text :
       {"3abc\n", "+3\n", "70000\n", "\n", "4000", "4000\na token\n", "4000\ntok\nmore\n"}) {
    forge(text, owner_rw);
    const std::string what = refusal();
    EXPECT_NE(what.find(file.string() + " does not hold \"port\\n[token\\n]\""), std::string::npos)
        << what;
  }
  forge("4000\n", owner_rw | std::filesystem::perms::others_read);
  std::string what = refusal();
  EXPECT_NE(what.find(file.string() + " is not the private file rank 0 writes"), std::string::npos)
      << what;
  EXPECT_NE(what.find("set C10D_STORE_TOKEN"), std::string::npos) << what;
  forge("4000\n", owner_rw);
  std::filesystem::permissions(dir, std::filesystem::perms::all);
  what = refusal();
  EXPECT_NE(what.find(dir + " (for the store's port) must be a directory of this user"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("that no one else may write, but it is a directory of uid"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("mode 777"), std::string::npos) << what;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directory(dir);
  std::filesystem::create_directory(file);  // a directory where the file should be
  what = refusal();
  EXPECT_NE(what.find("is not the private file rank 0 writes"), std::string::npos) << what;
  std::filesystem::remove_all(dir);
}

// A port file whose port an open server holds (a file an earlier job left, its port since taken
// by a store that asks for no token): the rank holds the file's token, so it refuses that server
// rather than take the transport secret and addresses it would hand out.
TEST_F(RendezvousTest, EnvUnderMpirunRefusesAServerThatAsksForNoToken) {
  const std::string dir = temp_path("mpirun_stale");
  set_mpirun_job(dir, 2, 2);
  const std::filesystem::path file =
      std::filesystem::path(dir) / ("c10d-store-job" + std::to_string(::getpid()));
  store::ServerOptions options;
  options.host = "127.0.0.1";
  TCPStoreServer open(options);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directory(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
  {
    std::ofstream out(file);
    out << open.port() << "\n" << std::string(64, 'a') << "\n";
  }
  std::filesystem::permissions(
      file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  try {
    rendezvous("env://", 1, -1, Milliseconds(2000));
    ADD_FAILURE() << "rank 1 took a server that asks for no token";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format(
                  "server at 127.0.0.1:{} asks for no token but this client has one", open.port())),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST_F(RendezvousTest, EnvUnderMpirunAcrossHostsAsksForMasterAddr) {
  set_mpirun_job(temp_path("mpirun_hosts"), 4, 2);
  expect_error_names("env://",
                     {"span several hosts", "MASTER_ADDR", "MASTER_PORT", "C10D_STORE_TOKEN"}, 1);
}

// mpirun's count of ranks on this host is held to the bound every reader of it uses
// (core::env_local_processes), not taken here and refused by another reader later.
TEST_F(RendezvousTest, EnvUnderMpirunRefusesALocalSizePastTheBound) {
  set_mpirun_job(temp_path("mpirun_local"), 2, 2);
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1048577", 1);
  expect_error_names("env://", {"OMPI_COMM_WORLD_LOCAL_SIZE=1048577", "[1, 1048576]"}, 1);
}

// Without mpirun's session directory rank 0 makes $TMPDIR/c10d-<job>; the port file and that
// directory go with its store, so that neither a stale port nor the directories outlive the job.
// In mpirun's session directory only the file goes.
TEST_F(RendezvousTest, EnvUnderMpirunRemovesWhatRankZeroPublishedWithItsStore) {
  const std::filesystem::path tmp = temp_path("mpirun_tmpdir");
  std::filesystem::create_directory(tmp);
  set_mpirun_job("unused", 2, 2);
  ::unsetenv("OMPI_MCA_orte_jobfam_session_dir");
  ::setenv("TMPDIR", tmp.c_str(), 1);
  const std::string job = "job" + std::to_string(::getpid());
  const std::filesystem::path dir = tmp / ("c10d-" + job);
  const std::filesystem::path file = dir / ("c10d-store-" + job);
  {
    auto rank1 =
        std::async(std::launch::async, [] { return rendezvous("env://", 1, -1, kTimeout); });
    RendezvousResult rank0 = rendezvous("env://", 0, -1, kTimeout);
    RendezvousResult other = rank1.get();
    other.store->set("k", std::string_view("v"));
    EXPECT_EQ(rank0.store->get_string("k"), "v");
    EXPECT_TRUE(std::filesystem::exists(file)) << file;
  }
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir << " outlived the store";
  // mpirun's directory stays; only the file goes.
  const std::filesystem::path session = tmp / "session";
  std::filesystem::create_directory(session);
  std::filesystem::permissions(session, std::filesystem::perms::owner_all);
  ::setenv("OMPI_MCA_orte_jobfam_session_dir", session.c_str(), 1);
  {
    RendezvousResult rank0 = rendezvous("env://", 0, -1, kTimeout);
    EXPECT_TRUE(std::filesystem::exists(session / ("c10d-store-" + job)));
  }
  EXPECT_TRUE(std::filesystem::is_directory(session));
  EXPECT_FALSE(std::filesystem::exists(session / ("c10d-store-" + job)));
  std::filesystem::remove_all(tmp);
}

TEST_F(RendezvousTest, EnvUnderMpirunTimesOutNamingThePortFile) {
  const std::string dir = temp_path("mpirun_lonely");
  set_mpirun_job(dir, 2, 2);
  const std::string timeout = message_of<TimeoutError>(
      "rank 1 without a rank 0", [] { rendezvous("env://", 1, -1, Milliseconds(200)); });
  EXPECT_NE(timeout.find(dir), std::string::npos) << timeout;
}

TEST_F(RendezvousTest, RankSourcesTakePrecedenceInOrder) {
  TCPStoreServer server(store::ServerOptions{});
  const std::string url = "tcp://127.0.0.1:" + std::to_string(server.port());
  set_env("C10D_STORE_EXTERNAL", "1");
  set_env("OMPI_COMM_WORLD_RANK", "1");
  set_env("OMPI_COMM_WORLD_SIZE", "8");
  RendezvousResult rv = rendezvous(url, -1, -1, kTimeout);
  EXPECT_EQ(rv.rank, 1);  // mpirun's variables, when nothing else says
  EXPECT_EQ(rv.world_size, 8);
  set_env("RANK", "2");
  set_env("WORLD_SIZE", "7");
  rv = rendezvous(url, -1, -1, kTimeout);
  EXPECT_EQ(rv.rank, 2);  // RANK/WORLD_SIZE over mpirun's
  EXPECT_EQ(rv.world_size, 7);
  rv = rendezvous(url + "?rank=3&world_size=6", -1, -1, kTimeout);
  EXPECT_EQ(rv.rank, 3);  // the URL's query over the environment
  EXPECT_EQ(rv.world_size, 6);
  rv = rendezvous(url + "?rank=3&world_size=6", 4, 5, kTimeout);
  EXPECT_EQ(rv.rank, 4);  // the arguments over everything
  EXPECT_EQ(rv.world_size, 5);
}

TEST_F(RendezvousTest, FileWorldOfThreeThreadsMeets) {
  const std::string path = temp_path("file_world");
  std::filesystem::remove(path);
  constexpr int kWorld = 3;
  std::vector<std::future<std::string>> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.push_back(std::async(std::launch::async, [&path, rank] {
      RendezvousResult rv = rendezvous("file://" + path + "?rank=" + std::to_string(rank) +
                                           "&world_size=" + std::to_string(kWorld),
                                       -1, -1, kTimeout);
      EXPECT_TRUE(dynamic_cast<FileStore*>(rv.store.get()) != nullptr);
      rv.store->set("rank/" + std::to_string(rv.rank), std::string_view(std::to_string(rv.rank)));
      std::vector<std::string> keys;
      for (int r = 0; r < rv.world_size; ++r) keys.push_back("rank/" + std::to_string(r));
      rv.store->wait(keys, kTimeout);
      std::string seen;
      for (const Bytes& value : rv.store->multi_get(keys))
        seen += std::string(value.begin(), value.end());
      return seen;
    }));
  }
  for (auto& rank : ranks) EXPECT_EQ(rank.get(), "012");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace c10d::inline v1
