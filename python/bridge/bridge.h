// The seam between the two halves of the c10d backend for torch.distributed.
//
// torch_process_group.cc includes torch headers only and implements torch's ProcessGroup, Work
// and store side; bridge_core.cc includes c10d headers only and runs the ops on a c10d
// ProcessGroup. Both libraries name their types c10d::ProcessGroup, c10d::Work, c10d::Store...,
// so no translation unit may see both: this header names no type of either, only plain structs,
// std types and opaque handles (Group, Op). A port to another torch version replaces
// torch_process_group.cc alone.
//
// Errors: every function may throw; what it throws is a std::exception whose what() is the
// message to show (c10d's errors derive from std::runtime_error).
//
// Thread-safety: as c10d's ProcessGroup and Work: any function may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace c10d_bridge {

// c10d's element types, by name (DType).
enum class ElementType : std::uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kUInt8,
  kInt16,
  kInt32,
  kInt64,
  kBool,
};

// c10d's reduce operators (ReduceOp); kPremulSum scales each input by OpOptions::premul_factor.
enum class Reduce : std::uint8_t {
  kSum,
  kAvg,
  kProduct,
  kMin,
  kMax,
  kBand,
  kBor,
  kBxor,
  kPremulSum,
};

// A dense, contiguous CPU array, used in place (no copy). `owner` keeps the memory alive: the
// library holds it until the op that uses the buffer has completed.
struct Buffer {
  void* data = nullptr;
  std::vector<std::int64_t> shape;
  ElementType type = ElementType::kFloat32;
  std::shared_ptr<void> owner;
};

struct OpOptions {
  int root = 0;
  Reduce reduce = Reduce::kSum;
  double premul_factor = 1.0;
  std::int64_t timeout_ms = -1;  // < 0: the group's default
  int tag = 0;                   // send/recv
  // all_to_all: rows of the first dimension to send to / receive from each rank; empty: equal.
  std::vector<std::int64_t> input_splits;
  std::vector<std::int64_t> output_splits;
};

// The key-value store the group meets through, provided by the caller (torch's store); also
// what connect_env_store returns (c10d's own store). Calls come from the thread that makes the
// group and, after set-up, from the group's own threads (a rank that fails records why).
// Failures throw.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const std::vector<std::uint8_t>& value) = 0;
  // The value of a key that exists (callers wait for it first).
  virtual std::vector<std::uint8_t> get(const std::string& key) = 0;
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // As c10d's Store::compare_set: a missing key with an empty `expected` is set.
  virtual std::vector<std::uint8_t> compare_set(const std::string& key,
                                                const std::vector<std::uint8_t>& expected,
                                                const std::vector<std::uint8_t>& desired) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Blocks until every key exists: true; false when `timeout` passed first.
  virtual bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  virtual bool delete_key(const std::string& key) = 0;
  virtual std::int64_t num_keys() = 0;
  virtual std::chrono::milliseconds timeout() = 0;
  // The deadline of get() and of wait() without one.
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;
};

// A client of c10d's own TCP store server at MASTER_ADDR:MASTER_PORT (c10drun's, or
// `c10d-store serve`): c10d's rendezvous("env://") with the server taken as running elsewhere,
// so no rank hosts one. It proves C10D_STORE_TOKEN to the server when set. `timeout` bounds the
// connect (with retry) and is the store's default deadline. Throws c10d's errors naming the
// address (a wrong token: "authentication failed").
struct ConnectedStore {
  std::shared_ptr<KeyValueStore> store;
  std::string host;  // the store's host, for GroupOptions::store_host
};
ConnectedStore connect_env_store(int rank, int world_size, std::chrono::milliseconds timeout);

struct GroupOptions {
  // "tcp" (TCP between hosts, shared memory within one) or "ici" (the simulated torus); "mpi"
  // is refused. Empty: C10D_BACKEND, else "tcp".
  std::string backend;
  std::chrono::milliseconds timeout{30 * 60 * 1000};  // the default per-op timeout
  // The store's host, from which the TCP backend picks the interface its peers reach (empty:
  // C10D_HOST, else 127.0.0.1).
  std::string store_host;
};

class Group;  // a c10d ProcessGroup
class Op;     // one call on a Group: one or more c10d Works

// Blocks until every rank has connected (bounded by options.timeout).
std::shared_ptr<Group> make_group(std::shared_ptr<KeyValueStore> store, int rank, int size,
                                  const GroupOptions& options);
// The c10d backend under the group: "tcp" or "ici".
std::string group_backend(const Group& group);
// Fails every pending and later op of the group (c10d's ProcessGroup::abort).
void abort_group(Group& group);

// The collectives, as c10d's ProcessGroup declares them (include/c10d/process_group.h). Each
// returns at once; buffers are used in place until the Op completes.
std::shared_ptr<Op> all_reduce(Group& g, std::vector<Buffer> tensors, const OpOptions& o);
std::shared_ptr<Op> broadcast(Group& g, std::vector<Buffer> tensors, const OpOptions& o);
std::shared_ptr<Op> reduce(Group& g, Buffer tensor, const OpOptions& o);
std::shared_ptr<Op> all_gather(Group& g, std::vector<Buffer> outputs, Buffer input,
                               const OpOptions& o);
// One all_gather per input, issued in order: outputs[i] receives every rank's inputs[i].
std::shared_ptr<Op> all_gather_each(Group& g, std::vector<std::vector<Buffer>> outputs,
                                    std::vector<Buffer> inputs, const OpOptions& o);
std::shared_ptr<Op> all_gather_into_tensor(Group& g, Buffer output, Buffer input,
                                           const OpOptions& o);
std::shared_ptr<Op> reduce_scatter(Group& g, Buffer output, std::vector<Buffer> inputs,
                                   const OpOptions& o);
std::shared_ptr<Op> reduce_scatter_tensor(Group& g, Buffer output, Buffer input,
                                          const OpOptions& o);
std::shared_ptr<Op> all_to_all(Group& g, Buffer output, Buffer input, const OpOptions& o);
std::shared_ptr<Op> gather(Group& g, std::vector<Buffer> outputs, Buffer input, const OpOptions& o);
std::shared_ptr<Op> scatter(Group& g, Buffer output, std::vector<Buffer> inputs,
                            const OpOptions& o);
std::shared_ptr<Op> barrier(Group& g, const OpOptions& o);
std::shared_ptr<Op> send(Group& g, std::vector<Buffer> tensors, int dst, const OpOptions& o);
std::shared_ptr<Op> recv(Group& g, std::vector<Buffer> tensors, int src, const OpOptions& o);
// A receive from whichever rank sends first with o.tag (c10d's recv_any_source): one buffer.
std::shared_ptr<Op> recv_any_source(Group& g, std::vector<Buffer> tensors, const OpOptions& o);

// The op's name and the c10d sequence number of its first Work ("all_reduce #12"), for messages.
std::string op_describe(const Op& op);
bool op_completed(const Op& op);
// Completed without an error.
bool op_succeeded(const Op& op);
// The op's error once it failed, else null.
std::exception_ptr op_error(const Op& op);
// The rank whose message a recv or recv_any_source that succeeded received (c10d's
// Work::source_rank); throws, naming the op, for another op or one not done or failed.
int op_source_rank(const Op& op);
// Blocks until the op completes and rethrows its error. Throws c10d's TimeoutError, naming the
// op and the rank, when `timeout` passes first (the op itself goes on to its own deadline).
void op_wait(Op& op, std::chrono::milliseconds timeout);
// Runs fn(null) once every part of the op has succeeded, or fn(error) once one failed (after
// the others completed), on the thread that completes the op, or at once on this one if done.
void op_on_done(Op& op, std::function<void(std::exception_ptr)> fn);

}  // namespace c10d_bridge
