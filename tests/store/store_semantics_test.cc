// The Store semantics of c10d/store.h, pinned once and run over every store implementation
// (one named factory each), plus the FileStore's own cross-process and corruption behaviour.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <latch>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "c10d/errors.h"
#include "c10d/store.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;

// A fresh path in the temp directory, removed when this goes away.
class TempPath {
 public:
  TempPath() {
    static std::atomic<int> counter{0};
    path_ =
        std::filesystem::temp_directory_path() / ("c10d_store_test_" + std::to_string(::getpid()) +
                                                  "_" + std::to_string(counter.fetch_add(1)));
    std::filesystem::remove(path_);
  }
  ~TempPath() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  TempPath(const TempPath&) = delete;
  TempPath& operator=(const TempPath&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A FileStore that owns its temp file; handed out through shared_ptr's aliasing constructor.
struct TempFileStore {
  TempPath file;
  std::shared_ptr<FileStore> store = std::make_shared<FileStore>(file.path());
  ~TempFileStore() { store.reset(); }  // the store goes before its file
};

using StoreHandle = std::shared_ptr<Store>;

struct StoreFactory {
  std::string name;
  std::function<StoreHandle()> make;
  // Another handle on the store `make` returned, as another rank would hold one (a second
  // client, a second FileStore on the path). Tests that need one caller to unblock another use
  // it, since a store may serialize its own callers (TCPStore). Unset: the same object.
  std::function<StoreHandle(const StoreHandle&)> peer = {};
};

// Every store the suite runs over. A new store is one more entry here.
std::vector<StoreFactory> store_factories() {
  return {
      {"HashStore", [] { return std::make_shared<HashStore>(); }},
      {"FileStore",
       []() -> StoreHandle {
         auto owner = std::make_shared<TempFileStore>();
         return StoreHandle(owner, owner->store.get());
       },
       [](const StoreHandle& store) -> StoreHandle {
         return std::make_shared<FileStore>(dynamic_cast<FileStore&>(*store).path());
       }},
      {"PrefixStore",
       [] { return std::make_shared<PrefixStore>("job", std::make_shared<HashStore>()); },
       [](const StoreHandle& store) -> StoreHandle {
         return std::make_shared<PrefixStore>("job", dynamic_cast<PrefixStore&>(*store).base());
       }},
      // Hosts its server on an ephemeral port; the peer is a second client of it.
      {"TCPStore",
       [] { return std::make_shared<TCPStore>(TCPStoreOptions{.port = 0, .is_server = true}); },
       [](const StoreHandle& store) -> StoreHandle {
         return std::make_shared<TCPStore>(
             TCPStoreOptions{.port = dynamic_cast<TCPStore&>(*store).port()});
       }},
  };
}

Bytes bytes_of(std::string_view text) { return Bytes(text.begin(), text.end()); }

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no exception)";
}

class StoreSemanticsTest : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override {
    store_ = GetParam().make();
    peer_ = GetParam().peer ? GetParam().peer(store_) : store_;
  }

  Store& store() { return *store_; }
  Store& peer() { return *peer_; }
  std::string get(std::string_view key) { return store_->get_string(key); }
  Bytes compare_set(std::string_view key, std::string_view expected, std::string_view desired) {
    return store_->compare_set(key, bytes_of(expected), bytes_of(desired));
  }
  bool check(std::vector<std::string> keys) { return store_->check(keys); }

  StoreHandle store_;
  StoreHandle peer_;
};

TEST_P(StoreSemanticsTest, SetThenGetReturnsExactBytesIncludingNulAndEmptyValues) {
  store().set("text", "hello");
  const Bytes binary = {0x00, 0xff, 0x00, 0x7f, 0x00};
  store().set("binary", binary);
  store().set("empty", "");
  EXPECT_EQ(get("text"), "hello");
  EXPECT_EQ(store().get("binary"), binary);
  EXPECT_EQ(store().get("empty"), Bytes{});
  store().set("text", "overwritten");
  EXPECT_EQ(get("text"), "overwritten");
}

TEST_P(StoreSemanticsTest, GetWaitsForKeySetLaterByAnotherThread) {
  store().set_timeout(10000ms);  // a store that never wakes fails the test instead of hanging
  std::thread writer([&] {
    std::this_thread::sleep_for(50ms);
    peer().set("late", "arrived");
  });
  EXPECT_EQ(get("late"), "arrived");
  writer.join();
}

TEST_P(StoreSemanticsTest, GetOfMissingKeyTimesOutWithTimeoutErrorNamingTheKey) {
  store().set_timeout(100ms);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(store().get("never_set"), TimeoutError);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
  EXPECT_NE(message_of([&] { store().get("never_set"); }).find("never_set"), std::string::npos);
}

TEST_P(StoreSemanticsTest, AddStartsFromZeroAndAcceptsNegativeDeltas) {
  EXPECT_EQ(store().add("counter", 5), 5);
  EXPECT_EQ(store().add("counter", -8), -3);
  EXPECT_EQ(store().add("counter", 0), -3);
  EXPECT_EQ(get("counter"), "-3");
  store().set("preset", "40");
  EXPECT_EQ(store().add("preset", 2), 42);
}

TEST_P(StoreSemanticsTest, AddOnNonIntegerValueThrowsInvalidArgument) {
  store().set("word", "twelve");
  EXPECT_THROW(store().add("word", 1), InvalidArgument);
  store().set("trailing", "12x");
  EXPECT_THROW(store().add("trailing", 1), InvalidArgument);
  store().set("empty", "");
  EXPECT_THROW(store().add("empty", 1), InvalidArgument);
  EXPECT_EQ(get("word"), "twelve");
}

TEST_P(StoreSemanticsTest, AddThatWouldOverflowInt64IsRefusedAndChangesNothing) {
  store().set("big", std::to_string(std::numeric_limits<std::int64_t>::max() - 1));
  const std::string msg = message_of([&] { store().add("big", 2); });
  EXPECT_NE(msg.find("overflow"), std::string::npos) << msg;
  EXPECT_THROW(store().add("big", 2), InvalidArgument);
  EXPECT_EQ(store().add("big", 1), std::numeric_limits<std::int64_t>::max());
  store().set("small", std::to_string(std::numeric_limits<std::int64_t>::min()));
  EXPECT_THROW(store().add("small", -1), InvalidArgument);
}

TEST_P(StoreSemanticsTest, CompareSetFollowsEveryRule) {
  // Missing key, expected empty: sets desired and returns it.
  EXPECT_EQ(compare_set("fresh", "", "first"), bytes_of("first"));
  EXPECT_EQ(get("fresh"), "first");
  // Missing key, expected non-empty: returns expected and leaves the key missing.
  EXPECT_EQ(compare_set("absent", "guess", "x"), bytes_of("guess"));
  EXPECT_FALSE(check({"absent"}));
  // Value equals expected: swaps in desired and returns it.
  EXPECT_EQ(compare_set("fresh", "first", "second"), bytes_of("second"));
  EXPECT_EQ(get("fresh"), "second");
  // Value differs from expected: returns the current value and changes nothing.
  EXPECT_EQ(compare_set("fresh", "first", "third"), bytes_of("second"));
  EXPECT_EQ(get("fresh"), "second");
  // An existing empty value matches an empty expected.
  store().set("blank", "");
  EXPECT_EQ(compare_set("blank", "", "filled"), bytes_of("filled"));
}

TEST_P(StoreSemanticsTest, CompareSetRaceHasExactlyOneWinnerThatEveryoneSees) {
  constexpr int kThreads = 8;
  std::vector<std::string> seen(kThreads);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) {
    threads.emplace_back([&, id] {
      start.arrive_and_wait();
      const Bytes got = compare_set("leader", "", std::to_string(id));
      seen[id] = std::string(got.begin(), got.end());
    });
  }
  for (std::thread& t : threads) t.join();
  int winners = 0;
  for (int id = 0; id < kThreads; ++id) {
    EXPECT_EQ(seen[id], seen[0]);
    winners += seen[id] == std::to_string(id) ? 1 : 0;
  }
  EXPECT_EQ(winners, 1);
  EXPECT_EQ(get("leader"), seen[0]);
}

TEST_P(StoreSemanticsTest, ConcurrentAddsSumExactly) {
  constexpr int kThreads = 16;
  constexpr int kAddsPerThread = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kAddsPerThread; ++i) store().add("total", 1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(store().add("total", 0), kThreads * kAddsPerThread);
}

TEST_P(StoreSemanticsTest, CheckTellsWhetherEveryKeyExists) {
  EXPECT_TRUE(check({}));
  EXPECT_FALSE(check({"a"}));
  store().set("a", "1");
  EXPECT_TRUE(check({"a"}));
  EXPECT_FALSE(check({"a", "b"}));
  store().set("b", "2");
  EXPECT_TRUE(check({"a", "b"}));
}

TEST_P(StoreSemanticsTest, WaitTimesOutNamingTheMissingKey) {
  store().set("here", "1");
  const std::vector<std::string> keys = {"here", "gone_missing"};
  EXPECT_THROW(store().wait(keys, 100ms), TimeoutError);
  const std::string message = message_of([&] { store().wait(keys, 50ms); });
  EXPECT_NE(message.find("gone_missing"), std::string::npos) << message;
  // The timeout asked for, exactly (the time actually waited may be longer on a loaded machine).
  EXPECT_NE(message.find("50 ms"), std::string::npos) << message;
}

TEST_P(StoreSemanticsTest, WaitIsSatisfiedByLaterSet) {
  std::thread writer([&] {
    std::this_thread::sleep_for(50ms);
    peer().set("x", "1");
    peer().set("y", "2");
  });
  const std::vector<std::string> keys = {"x", "y"};
  store().wait(keys, 10000ms);
  EXPECT_TRUE(check(keys));
  writer.join();
}

TEST_P(StoreSemanticsTest, DeleteKeyReturnsWhetherTheKeyExisted) {
  store().set("doomed", "1");
  EXPECT_TRUE(store().delete_key("doomed"));
  EXPECT_FALSE(store().delete_key("doomed"));
  EXPECT_FALSE(check({"doomed"}));
  EXPECT_FALSE(store().delete_key("never"));
}

TEST_P(StoreSemanticsTest, NumKeysCountsKeys) {
  const std::int64_t base = store().num_keys();
  store().set("one", "1");
  store().set("two", "2");
  store().set("one", "again");
  EXPECT_EQ(store().num_keys(), base + 2);
  store().delete_key("one");
  EXPECT_EQ(store().num_keys(), base + 1);
}

TEST_P(StoreSemanticsTest, AppendCreatesThenConcatenates) {
  store().append("log", bytes_of("ab"));
  store().append("log", bytes_of("cd"));
  store().append("log", Bytes{0x00});
  EXPECT_EQ(get("log"), std::string("abcd\0", 5));
}

TEST_P(StoreSemanticsTest, MultiSetThenMultiGetInOrder) {
  const std::vector<std::string> keys = {"k1", "k2", "k3"};
  const std::vector<Bytes> values = {bytes_of("v1"), Bytes{}, Bytes{0x00, 0x01}};
  store().multi_set(keys, values);
  EXPECT_EQ(store().multi_get(keys), values);
  const std::vector<std::string> reversed = {"k3", "k1"};
  EXPECT_EQ(store().multi_get(reversed), (std::vector<Bytes>{values[2], values[0]}));
}

TEST_P(StoreSemanticsTest, MultiGetWaitsAndTimesOutNamingTheMissingKey) {
  store().set_timeout(100ms);
  store().set("present", "1");
  const std::vector<std::string> keys = {"present", "absent_key"};
  const std::string message = message_of([&] { store().multi_get(keys); });
  EXPECT_NE(message.find("absent_key"), std::string::npos) << message;
  EXPECT_THROW(store().multi_get(keys), TimeoutError);
}

TEST_P(StoreSemanticsTest, MultiSetWithMismatchedSizesThrowsInvalidArgument) {
  const std::vector<std::string> keys = {"a", "b"};
  const std::vector<Bytes> values = {bytes_of("1")};
  EXPECT_THROW(store().multi_set(keys, values), InvalidArgument);
  EXPECT_FALSE(check({"a"}));
}

TEST_P(StoreSemanticsTest, OversizeKeysAndValuesAreRejectedNamingTheLimit) {
  const StoreLimits limits;
  const std::string long_key(limits.max_key_bytes + 1, 'k');
  EXPECT_THROW(store().set(long_key, "v"), InvalidArgument);
  EXPECT_THROW(store().add(long_key, 1), InvalidArgument);
  const std::string key_message = message_of([&] { store().set(long_key, "v"); });
  EXPECT_NE(key_message.find(std::to_string(limits.max_key_bytes)), std::string::npos)
      << key_message;

  const Bytes big(limits.max_value_bytes + 1, 0x5a);
  const std::string value_message = message_of([&] { store().set("big", big); });
  EXPECT_NE(value_message.find(std::to_string(limits.max_value_bytes + 1)), std::string::npos)
      << value_message;
  EXPECT_NE(value_message.find(std::to_string(limits.max_value_bytes)), std::string::npos);
  EXPECT_THROW(store().append("big", big), InvalidArgument);
  EXPECT_FALSE(check({"big"}));

  const std::string fine_key(limits.max_key_bytes / 2, 'k');
  store().set(fine_key, "ok");
  EXPECT_EQ(get(fine_key), "ok");
}

std::string store_name(const ::testing::TestParamInfo<StoreFactory>& param) {
  return param.param.name;
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreSemanticsTest, ::testing::ValuesIn(store_factories()),
                         store_name);

// ---- FileStore only ----

TEST(FileStoreTest, TwoStoresOnOnePathSeeEachOthersWrites) {
  TempPath file;
  FileStore a(file.path());
  FileStore b(file.path());
  a.set("from_a", "1");
  EXPECT_EQ(b.get_string("from_a"), "1");
  EXPECT_EQ(b.add("count", 2), 2);
  EXPECT_EQ(a.add("count", 3), 5);
  EXPECT_TRUE(b.delete_key("from_a"));
  const std::vector<std::string> keys = {"from_a"};
  EXPECT_FALSE(a.check(keys));
  EXPECT_EQ(a.num_keys(), 1);
  EXPECT_EQ(a.path(), file.path());
}

TEST(FileStoreTest, ForkedProcessesAddToOneCounterExactly) {
  TempPath file;
  constexpr int kChildren = 4;
  constexpr int kAddsPerChild = 100;
  std::vector<pid_t> children;
  for (int c = 0; c < kChildren; ++c) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // The child leaves by _exit, so gtest's state in this copy of the process never runs.
      int code = 0;
      try {
        FileStore store(file.path(), 30000ms);
        for (int i = 0; i < kAddsPerChild; ++i) store.add("counter", 1);
      } catch (...) {
        code = 1;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  FileStore parent(file.path());
  EXPECT_EQ(parent.add("counter", 0), kChildren * kAddsPerChild);
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void expect_store_error_naming(const std::filesystem::path& path, const std::string& detail) {
  FileStore store(path);
  const std::vector<std::string> keys = {"k"};
  EXPECT_THROW(store.check(keys), StoreError);
  const std::string message = message_of([&] { store.check(keys); });
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find(detail), std::string::npos) << message;
}

TEST(FileStoreTest, CorruptFileGivesStoreErrorNamingThePath) {
  TempPath file;
  write_file(file.path(), "this is not a store log at all");
  expect_store_error_naming(file.path(), "offset 0");
}

// One record as FileStore writes it: magic "C10F", kind, key length (u32), value length (u64),
// key, value; all little-endian.
std::string record(char kind, std::string_view key, std::string_view value) {
  std::string out = "C10F";
  out += kind;
  for (int i = 0; i < 4; ++i) out += static_cast<char>((key.size() >> (8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i) out += static_cast<char>((value.size() >> (8 * i)) & 0xff);
  out += key;
  out += value;
  return out;
}

bool has_key(Store& store, const std::string& key) {
  const std::vector<std::string> keys = {key};
  return store.check(keys);
}

// The first record ("first" = "1") is 17 header bytes + 5 key bytes + 1 value byte.
constexpr std::uintmax_t kFirstRecordBytes = 23;

TEST(FileStoreTest, TruncatedRecordIsCutAndTheStoreRecovers) {
  TempPath file;
  {
    FileStore store(file.path());
    store.set("first", "1");
    store.set("second", "2");
  }
  const auto full = std::filesystem::file_size(file.path());
  std::filesystem::resize_file(file.path(), full - 1);
  FileStore store(file.path());
  EXPECT_FALSE(has_key(store, "second"));
  EXPECT_EQ(std::filesystem::file_size(file.path()), kFirstRecordBytes);
  EXPECT_EQ(store.get_string("first"), "1");
  store.set("third", "3");
  EXPECT_EQ(store.get_string("third"), "3");
  EXPECT_EQ(store.num_keys(), 2);
  FileStore fresh(file.path());  // replays the repaired file from the start
  EXPECT_EQ(fresh.get_string("third"), "3");
  EXPECT_FALSE(has_key(fresh, "second"));
}

TEST(FileStoreTest, TornRecordHeaderIsCutEvenWithABadMagic) {
  for (const std::string& tail : {std::string("C1"), record(1, "k", "v").substr(0, 16),
                                  std::string("garbage"), std::string(16, '\0')}) {
    TempPath file;
    write_file(file.path(), record(1, "first", "1") + tail);
    FileStore store(file.path());
    EXPECT_EQ(store.get_string("first"), "1");
    EXPECT_EQ(std::filesystem::file_size(file.path()), kFirstRecordBytes);
    EXPECT_EQ(store.add("n", 4), 4);
    EXPECT_EQ(store.num_keys(), 2);
  }
}

// A rank killed mid-append: a whole header and half the body, with the lock held as a live
// writer would hold it, then SIGKILL. Every other store, old or new, goes on.
TEST(FileStoreTest, WriterKilledMidAppendLeavesAStoreOthersCanUse) {
  TempPath file;
  FileStore live(file.path());
  live.set("first", "1");
  const std::string torn = record(1, "torn", std::string(1000, 'x')).substr(0, 17 + 4 + 500);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open(file.path().c_str(), O_RDWR);
#ifdef F_OFD_SETLK
    struct flock request {};
    request.l_type = F_WRLCK;
    request.l_whence = SEEK_SET;
    const bool locked = fd >= 0 && ::fcntl(fd, F_OFD_SETLK, &request) == 0;
#else
    const bool locked = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
#endif
    if (!locked || ::pwrite(fd, torn.data(), torn.size(), static_cast<off_t>(kFirstRecordBytes)) !=
                       static_cast<ssize_t>(torn.size())) {
      ::_exit(1);
    }
    ::raise(SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ASSERT_EQ(std::filesystem::file_size(file.path()), kFirstRecordBytes + torn.size());

  FileStore other(file.path(), 5000ms);
  other.set("after", "2");
  EXPECT_EQ(other.get_string("after"), "2");
  EXPECT_EQ(other.get_string("first"), "1");
  EXPECT_EQ(other.add("count", 5), 5);
  EXPECT_FALSE(has_key(other, "torn"));
  // The live store read up to the cut, so it sees exactly what came after.
  EXPECT_EQ(live.get_string("after"), "2");
  EXPECT_EQ(live.add("count", 1), 6);
  EXPECT_FALSE(has_key(live, "torn"));
  EXPECT_EQ(other.num_keys(), 3);
}

TEST(FileStoreTest, BadMagicMidFileGivesStoreErrorNamingPathAndOffset) {
  TempPath file;
  std::string bad = record(1, "second", "2");
  bad[0] = 'X';
  write_file(file.path(), record(1, "first", "1") + bad + record(1, "third", "3"));
  expect_store_error_naming(file.path(), "offset 23");
  // A whole header with a bad magic is corruption even as the last thing in the file.
  write_file(file.path(), record(1, "first", "1") + bad.substr(0, 20));
  expect_store_error_naming(file.path(), "offset 23");
  EXPECT_EQ(std::filesystem::file_size(file.path()), kFirstRecordBytes + 20);  // nothing cut
}

TEST(FileStoreTest, BadKindMidFileGivesStoreErrorNamingTheOffset) {
  TempPath file;
  write_file(file.path(),
             record(1, "first", "1") + record(9, "second", "2") + record(1, "third", "3"));
  expect_store_error_naming(file.path(), "offset 23");
}

TEST(FileStoreTest, FileShorterThanWhatAStoreReadGivesStoreError) {
  TempPath file;
  FileStore store(file.path());
  store.set("first", "1");
  store.set("second", "2");
  std::filesystem::resize_file(file.path(), kFirstRecordBytes);  // whole records, not a torn tail
  const std::vector<std::string> keys = {"first"};
  EXPECT_THROW(store.check(keys), StoreError);
  const std::string message = message_of([&] { store.check(keys); });
  EXPECT_NE(message.find(file.path().string()), std::string::npos) << message;
  EXPECT_NE(message.find("offset 47"), std::string::npos) << message;
}

TEST(FileStoreTest, HugeLengthInRecordGivesStoreErrorWithoutAllocating) {
  TempPath file;
  // magic "C10F", kind set, key length 1, value length 2^60.
  std::string record = "C10F";
  record += '\x01';
  record += std::string("\x01\x00\x00\x00", 4);
  record += std::string("\x00\x00\x00\x00\x00\x00\x00\x10", 8);
  record += "k";
  write_file(file.path(), record);
  expect_store_error_naming(file.path(), "offset 0");
}

}  // namespace
}  // namespace c10d::inline v1
