// Store: the key-value service that ranks use to find each other and to agree on small facts.
//
// Semantics shared by every implementation (and pinned by one test suite run over all four):
//  - set(key, value) overwrites; get(key) waits until the key exists (up to the store's timeout)
//    and returns its value; multi_get waits for every key.
//  - add(key, delta) treats the value as a decimal int64 (a missing key counts as 0), stores the
//    sum back as decimal text and returns it; a value that is not an integer, or a sum that
//    would overflow int64, is an InvalidArgument and changes nothing.
//  - compare_set(key, expected, desired): if the key is missing and expected is empty, or the
//    value equals expected, the value becomes desired and desired is returned; otherwise the
//    current value is returned (expected, when the key is missing).
//  - check(keys): whether every key exists, at once; wait(keys, timeout): blocks until they all
//    exist, or throws TimeoutError naming the keys still missing and how long it waited.
//  - delete_key returns whether the key existed; num_keys counts the keys; append concatenates
//    (creating the key when missing).
// Keys are at most 8 KiB and values at most 64 MiB by default (see StoreLimits).
//
// Thread-safety: every Store may be shared by threads. Lifetime: a store must outlive the
// calls made on it; destroying a TCPStore that hosts the server stops the server.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "c10d/export.h"
#include "c10d/types.h"

namespace c10d::inline v1 {

class C10D_API Store {
 public:
  explicit Store(Milliseconds timeout = kDefaultTimeout) : timeout_(timeout) {}
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  virtual void set(std::string_view key, std::span<const std::uint8_t> value) = 0;
  virtual Bytes get(std::string_view key) = 0;
  virtual std::int64_t add(std::string_view key, std::int64_t delta) = 0;
  virtual Bytes compare_set(std::string_view key, std::span<const std::uint8_t> expected,
                            std::span<const std::uint8_t> desired) = 0;
  virtual bool check(std::span<const std::string> keys) = 0;
  virtual void wait(std::span<const std::string> keys, Milliseconds timeout) = 0;
  virtual bool delete_key(std::string_view key) = 0;
  virtual std::int64_t num_keys() = 0;
  virtual void append(std::string_view key, std::span<const std::uint8_t> value) = 0;
  virtual std::vector<Bytes> multi_get(std::span<const std::string> keys) = 0;
  virtual void multi_set(std::span<const std::string> keys, std::span<const Bytes> values) = 0;

  void wait(std::span<const std::string> keys) { wait(keys, timeout()); }
  // String conveniences.
  void set(std::string_view key, std::string_view value);
  std::string get_string(std::string_view key);

  Milliseconds timeout() const;
  void set_timeout(Milliseconds timeout);

 private:
  mutable std::mutex timeout_mu_;
  Milliseconds timeout_;  // GUARDED_BY(timeout_mu_)
};

// Limits a store enforces on every request, before allocating anything for it.
struct StoreLimits {
  std::size_t max_key_bytes = 8 * 1024;
  std::size_t max_value_bytes = 64u << 20;
  std::size_t max_keys_per_op = 128 * 1024;
  // Bytes one connection may have buffered for one request frame.
  std::size_t max_frame_bytes = (64u << 20) + (1u << 20);
  // Bytes of one answer's body (TCPStore). A small request can name a large value many times
  // (a MULTI_GET of one 1 MiB key 256 times), so the server sums an answer before building it
  // and refuses one over this; the client refuses to read one over its own.
  std::size_t max_response_bytes = (64u << 20) + (1u << 20);
};

// In-process store: a map under a mutex. For threads-as-ranks tests and single-process use.
class C10D_API HashStore : public Store {
 public:
  explicit HashStore(Milliseconds timeout = kDefaultTimeout);
  ~HashStore() override;
  void set(std::string_view key, std::span<const std::uint8_t> value) override;
  Bytes get(std::string_view key) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  Bytes compare_set(std::string_view key, std::span<const std::uint8_t> expected,
                    std::span<const std::uint8_t> desired) override;
  bool check(std::span<const std::string> keys) override;
  void wait(std::span<const std::string> keys, Milliseconds timeout) override;
  bool delete_key(std::string_view key) override;
  std::int64_t num_keys() override;
  void append(std::string_view key, std::span<const std::uint8_t> value) override;
  std::vector<Bytes> multi_get(std::span<const std::string> keys) override;
  void multi_set(std::span<const std::string> keys, std::span<const Bytes> values) override;
  using Store::set;
  using Store::wait;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// What makes a FileStore one rank of a job that meets in the file (file:// rendezvous).
struct FileStoreJob {
  int rank = -1;
  int world_size = -1;
  // Tells apart jobs started on one path at the same time; empty: none. rendezvous() takes
  // C10D_RUN_ID, else Slurm's job and step ids, else mpirun's job id.
  std::string run_id;
};

// Store in a file, shared by processes (on one machine, or on a shared file system with working
// fcntl locks). Every operation takes an exclusive lock on the file, replays what other
// processes appended since, and appends its own record; waits poll with backoff.
//
// With a FileStoreJob, the store is that rank of a job meeting in the file, and the job owns the
// file for as long as any of its ranks' stores lives (docs/store.md): rank 0 deletes a file left by
// an earlier run and starts a new generation of it; every other rank's constructor waits (up to
// `timeout`) for that generation, so it never answers from an earlier run's keys; the last store to
// go deletes the file. A file that a live job holds is refused: StoreError "FileStore '<path>' is
// in use by another job", naming that job's generation. A plain FileStore may read a job's file
// while the job runs, and fails (StoreError) once the job has deleted it.
class C10D_API FileStore : public Store {
 public:
  FileStore(std::filesystem::path path, Milliseconds timeout = kDefaultTimeout);
  FileStore(std::filesystem::path path, Milliseconds timeout, const FileStoreJob& job);
  ~FileStore() override;
  void set(std::string_view key, std::span<const std::uint8_t> value) override;
  Bytes get(std::string_view key) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  Bytes compare_set(std::string_view key, std::span<const std::uint8_t> expected,
                    std::span<const std::uint8_t> desired) override;
  bool check(std::span<const std::string> keys) override;
  void wait(std::span<const std::string> keys, Milliseconds timeout) override;
  bool delete_key(std::string_view key) override;
  std::int64_t num_keys() override;
  void append(std::string_view key, std::span<const std::uint8_t> value) override;
  std::vector<Bytes> multi_get(std::span<const std::string> keys) override;
  void multi_set(std::span<const std::string> keys, std::span<const Bytes> values) override;
  using Store::set;
  using Store::wait;
  const std::filesystem::path& path() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Prefixes every key with "<prefix>/" and forwards to another store; num_keys is the base
// store's count. Shares ownership of the base store.
class C10D_API PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  void set(std::string_view key, std::span<const std::uint8_t> value) override;
  Bytes get(std::string_view key) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  Bytes compare_set(std::string_view key, std::span<const std::uint8_t> expected,
                    std::span<const std::uint8_t> desired) override;
  bool check(std::span<const std::string> keys) override;
  void wait(std::span<const std::string> keys, Milliseconds timeout) override;
  bool delete_key(std::string_view key) override;
  std::int64_t num_keys() override;
  void append(std::string_view key, std::span<const std::uint8_t> value) override;
  std::vector<Bytes> multi_get(std::span<const std::string> keys) override;
  void multi_set(std::span<const std::string> keys, std::span<const Bytes> values) override;
  using Store::set;
  using Store::wait;
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string key_of(std::string_view key) const;
  std::vector<std::string> keys_of(std::span<const std::string> keys) const;
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

struct TCPStoreOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0 with is_server: an ephemeral port; see TCPStore::port()
  // Host the server in this process (on its own thread) and connect to it.
  bool is_server = false;
  Milliseconds timeout = kDefaultTimeout;  // connect, and every call's deadline
  // Shared secret; when empty, C10D_STORE_TOKEN from the environment is used, if set. A server
  // with a token serves only clients that prove they know it (HMAC-SHA256 of a nonce).
  std::string token;
  StoreLimits limits{};  // enforced by a hosted server
  // On the server's host, switch to the Unix socket the server announces after the TCP
  // handshake (faster: it skips the TCP/IP stack). Off: TCP only.
  bool use_local_socket = true;
};

class TCPStoreServer;

// Client of the TCP store server (src/store/tcp_store_server.h, or `c10d-store serve`). Connects
// with retry and exponential backoff until the timeout, so the server may start later. One
// connection; calls from several threads are serialized. A server that goes away fails the
// pending call with a StoreError naming the address; the next call reconnects.
//
// set() returns once its request is sent: the server answers a set only when it fails (as
// PyTorch's TCPStore, whose sets get no answer at all). The client checks every request against
// the server's limits, learned when it connects, so a set it sends does not fail for a limit.
// The server applies one client's requests in order, so every later call through this store,
// and every get/wait of the key by anyone, sees the value; a set that failed anyway is reported
// by the next call, whose error names it (that call itself did not run). Code that must know a
// set has landed before telling another process by some other channel can follow it with any
// call, e.g. check().
//
// The server bounds what a client may cost it (docs/store.md, "Exhaustion"): a multi_get whose
// answer would exceed StoreLimits::max_response_bytes, or a large answer the server has no room
// for while other clients leave theirs unread, fails with StoreError and the connection serves
// on; a request of 64 KiB or more that finds no room among other clients' large requests fails
// with StoreError and the connection is closed (the next call reconnects).
class C10D_API TCPStore : public Store {
 public:
  explicit TCPStore(TCPStoreOptions options);
  ~TCPStore() override;
  void set(std::string_view key, std::span<const std::uint8_t> value) override;
  Bytes get(std::string_view key) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  Bytes compare_set(std::string_view key, std::span<const std::uint8_t> expected,
                    std::span<const std::uint8_t> desired) override;
  bool check(std::span<const std::string> keys) override;
  void wait(std::span<const std::string> keys, Milliseconds timeout) override;
  bool delete_key(std::string_view key) override;
  std::int64_t num_keys() override;
  void append(std::string_view key, std::span<const std::uint8_t> value) override;
  std::vector<Bytes> multi_get(std::span<const std::string> keys) override;
  void multi_set(std::span<const std::string> keys, std::span<const Bytes> values) override;
  using Store::set;
  using Store::wait;

  const std::string& host() const;
  // The server's port (the bound one when this store hosts it on port 0).
  std::uint16_t port() const;
  // "host:port", for messages.
  std::string address() const;

 private:
  struct Impl;
  std::unique_ptr<TCPStoreServer> server_;  // set when options.is_server
  std::unique_ptr<Impl> impl_;
};

}  // namespace c10d::inline v1
