// The c10d-store program, driven as an operator would: `serve` on port 0 with a port file, the
// client subcommands against it, usage errors, and a clean stop on SIGTERM/SIGINT.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"

namespace c10d::inline v1 {
namespace {

using test::ChildExit;
using test::ChildProcess;
using test::EnvChanges;

constexpr auto kCommandDeadline = std::chrono::seconds(20);

struct CliResult {
  ChildExit exit;
  std::string out;
  std::string err;
  std::string description;
};

class StoreCliTest : public ::testing::Test {
 protected:
  static std::string tool() { return (test::build_dir() / "tools" / "c10d-store").string(); }

  // The children never inherit a token from the test's environment.
  static EnvChanges clean_env() { return {{"C10D_STORE_TOKEN", std::nullopt}}; }

  // Starts `c10d-store serve` on 127.0.0.1 port 0 and returns once its port file appears.
  void start_server(std::vector<std::string> extra = {}) {
    ASSERT_TRUE(std::filesystem::exists(tool())) << tool() << " is not built";
    port_file_ = dir_.path() / "port";
    std::vector<std::string> argv = {tool(),   "serve", "--host",      "127.0.0.1",
                                     "--port", "0",     "--port-file", port_file_.string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    server_ = std::make_unique<ChildProcess>(argv, clean_env(), dir_.path(), "serve");
    const auto deadline = test::Clock::now() + std::chrono::seconds(10);
    while (!std::filesystem::exists(port_file_)) {
      ASSERT_TRUE(server_->running()) << server_->describe();
      ASSERT_LT(test::Clock::now(), deadline) << "no port file; " << server_->describe();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    port_ = std::stoi(test::read_file(port_file_));
    ASSERT_GT(port_, 0);
  }

  std::string addr() const { return "127.0.0.1:" + std::to_string(port_); }

  // Runs `c10d-store ARGS...` to completion.
  CliResult run(std::vector<std::string> args, EnvChanges env = clean_env()) {
    args.insert(args.begin(), tool());
    ChildProcess child(args, env, dir_.path(), "cli" + std::to_string(runs_++));
    CliResult result;
    result.exit = child.wait(test::Clock::now() + kCommandDeadline);
    result.out = child.out();
    result.err = child.err();
    result.description = child.describe();
    return result;
  }

  // Runs a client subcommand against the server started by start_server().
  CliResult client(const std::string& command, std::vector<std::string> args,
                   std::vector<std::string> flags = {}) {
    std::vector<std::string> argv = {command, "--addr", addr(), "--timeout-ms", "5000"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv);
  }

  static void expect_ok(const CliResult& result, const std::string& out) {
    EXPECT_TRUE(result.exit.exited && result.exit.code == 0) << result.description;
    EXPECT_EQ(result.out, out) << result.description;
  }

  static void expect_usage_error(const CliResult& result, const std::string& named) {
    EXPECT_TRUE(result.exit.exited && result.exit.code == 2) << result.description;
    const std::string first_line = result.err.substr(0, result.err.find('\n'));
    EXPECT_NE(first_line.find(named), std::string::npos)
        << "'" << named << "' not in: " << first_line;
    EXPECT_NE(result.err.find("usage:"), std::string::npos) << result.description;
  }

  // Sends `signal` to the server and expects a clean exit and the port file gone.
  void expect_stops_on(int signal) {
    server_->send_signal(signal);
    const ChildExit exit = server_->wait(test::Clock::now() + std::chrono::seconds(10));
    EXPECT_TRUE(exit.exited && exit.code == 0) << server_->describe();
    EXPECT_NE(server_->out().find("c10d-store: serving on " + addr()), std::string::npos)
        << server_->describe();
    EXPECT_FALSE(std::filesystem::exists(port_file_));
  }

  test::TempDir dir_;
  std::unique_ptr<ChildProcess> server_;
  std::filesystem::path port_file_;
  int port_ = 0;
  int runs_ = 0;
};

TEST_F(StoreCliTest, ClientSubcommandsReadAndWriteTheServedStore) {
  ASSERT_NO_FATAL_FAILURE(start_server());
  expect_ok(client("set", {"greeting", "hello world"}), "");
  expect_ok(client("get", {"greeting"}), "hello world\n");
  expect_ok(client("add", {"counter", "5"}), "5\n");
  expect_ok(client("add", {"counter", "-2"}), "3\n");
  expect_ok(client("keys", {}), "2\n");
  expect_ok(client("wait", {"greeting", "counter"}), "");
  expect_ok(client("check", {"greeting", "counter"}), "true\n");
  expect_ok(client("check", {"greeting", "absent"}), "false\n");
  expect_ok(client("delete", {"greeting"}), "true\n");
  expect_ok(client("delete", {"greeting"}), "false\n");
  expect_ok(client("keys", {}), "1\n");
  // A key that starts like a flag, after "--".
  expect_ok(client("set", {"--", "--odd", "v"}), "");
  expect_ok(client("get", {"--", "--odd"}), "v\n");
}

TEST_F(StoreCliTest, WaitForAMissingKeyFailsWithTheStoreError) {
  ASSERT_NO_FATAL_FAILURE(start_server());
  const auto start = test::Clock::now();
  CliResult result = run({"wait", "--addr", addr(), "--timeout-ms", "300", "never/set"});
  EXPECT_TRUE(result.exit.exited && result.exit.code == 1) << result.description;
  EXPECT_EQ(result.err.rfind("c10d-store: ", 0), 0u) << result.description;
  EXPECT_NE(result.err.find("never/set"), std::string::npos) << result.description;
  EXPECT_LT(test::Clock::now() - start, std::chrono::seconds(10));
}

TEST_F(StoreCliTest, ServeStopsCleanlyOnSigterm) {
  ASSERT_NO_FATAL_FAILURE(start_server());
  expect_ok(client("set", {"k", "v"}), "");
  expect_stops_on(SIGTERM);
}

TEST_F(StoreCliTest, ServeStopsCleanlyOnSigint) {
  ASSERT_NO_FATAL_FAILURE(start_server());
  expect_stops_on(SIGINT);
}

TEST_F(StoreCliTest, TokenProtectedServerServesOnlyClientsWithTheToken) {
  ASSERT_NO_FATAL_FAILURE(start_server({"--token", "s3cret"}));
  expect_ok(client("set", {"k", "v"}, {"--token", "s3cret"}), "");
  CliResult wrong = client("get", {"k"}, {"--token", "guess"});
  EXPECT_TRUE(wrong.exit.exited && wrong.exit.code == 1) << wrong.description;
  EXPECT_EQ(wrong.err.rfind("c10d-store: store " + addr() + ": authentication failed: ", 0), 0u)
      << wrong.description;
  EXPECT_EQ(test::occurrences(wrong.err, "authentication"), 1u) << "said once: " << wrong.err;
  // The token may also come from the environment.
  CliResult from_env =
      run({"get", "--addr", addr(), "--timeout-ms", "5000", "k"}, {{"C10D_STORE_TOKEN", "s3cret"}});
  expect_ok(from_env, "v\n");
}

// An empty token would turn authentication off without a word: refused, from the flag or the
// environment, by the server and the clients alike.
TEST_F(StoreCliTest, AnEmptyTokenIsAUsageError) {
  expect_usage_error(run({"serve", "--port", "0", "--token", ""}), "--token is empty");
  expect_usage_error(run({"serve", "--port", "0", "--token="}), "--token is empty");
  expect_usage_error(run({"get", "--addr", "127.0.0.1:1", "--token", "", "k"}), "--token is empty");
  expect_usage_error(run({"serve", "--port", "0"}, {{"C10D_STORE_TOKEN", ""}}),
                     "C10D_STORE_TOKEN is empty");
  expect_usage_error(run({"keys", "--addr", "127.0.0.1:1"}, {{"C10D_STORE_TOKEN", ""}}),
                     "C10D_STORE_TOKEN is empty");
}

TEST_F(StoreCliTest, UsageErrorsExitTwoNamingTheProblem) {
  expect_usage_error(run({"get", "--addr", "127.0.0.1:1", "--bogus", "1", "k"}), "--bogus");
  expect_usage_error(run({"get", "--addr", "127.0.0.1:1", "k", "--bogus"}), "--bogus");
  expect_usage_error(run({"get", "k"}), "--addr");
  expect_usage_error(run({"get", "--addr", "127.0.0.1:1"}), "KEY");
  expect_usage_error(run({"set", "--addr", "127.0.0.1:1", "k"}), "KEY VALUE");
  expect_usage_error(run({"add", "--addr", "127.0.0.1:1", "k", "x"}), "DELTA");
  expect_usage_error(run({"get", "--addr", "nohostport", "k"}), "--addr");
  expect_usage_error(run({"get", "--addr", "127.0.0.1:99999", "k"}), "--addr port");
  expect_usage_error(run({"get", "--addr", "127.0.0.1:1", "--timeout-ms", "soon", "k"}),
                     "--timeout-ms");
  expect_usage_error(run({"get", "--addr"}), "--addr");
  expect_usage_error(run({"serve"}), "--port");
  expect_usage_error(run({"serve", "--port", "0", "--max-key-bytes", "lots"}), "--max-key-bytes");
  expect_usage_error(run({"serve", "--port", "0", "--log-level", "loud"}), "--log-level");
  expect_usage_error(run({"serve", "--port", "0", "--addr", "x:1"}), "--addr");
  expect_usage_error(run({"frobnicate"}), "frobnicate");
  expect_usage_error(run({}), "subcommand");
}

TEST_F(StoreCliTest, HelpListsEverySubcommandAndFlag) {
  CliResult help = run({"--help"});
  EXPECT_TRUE(help.exit.exited && help.exit.code == 0) << help.description;
  for (const char* word :
       {"serve", "get", "set", "add", "wait", "check", "delete", "keys", "--host", "--port",
        "--port-file", "--token", "--max-key-bytes", "--max-value-bytes", "--max-keys-per-op",
        "--max-frame-bytes", "--log-level", "--addr", "--timeout-ms"}) {
    EXPECT_NE(help.out.find(word), std::string::npos) << word << " missing from:\n" << help.out;
  }
}

}  // namespace
}  // namespace c10d::inline v1
