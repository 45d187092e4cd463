// The LRU cache of compiled programs, keyed by a graph's structural hash and checked against
// its full encoding (so a hash collision is a miss, never a wrong program).
//
// Thread-safety: all methods lock one mutex; a Program handed out stays alive (shared_ptr)
// while it runs even if it is evicted meanwhile.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "lazy/program.h"

namespace c10d::inline v1::lazy {

class ProgramCache {
 public:
  explicit ProgramCache(std::size_t capacity) : capacity_(capacity) {}
  std::shared_ptr<Program> find(const Graph& g);
  void insert(std::uint64_t hash, std::shared_ptr<Program> program);
  void set_capacity(std::size_t capacity);
  std::size_t size();

 private:
  void evict_locked();

  std::mutex mu_;
  std::size_t capacity_;  // GUARDED_BY(mu_)
  using Item = std::pair<std::uint64_t, std::shared_ptr<Program>>;
  std::list<Item> lru_;  // GUARDED_BY(mu_), most recent first
  std::unordered_map<std::uint64_t, std::list<Item>::iterator> index_;  // GUARDED_BY(mu_)
};

ProgramCache& program_cache();

}  // namespace c10d::inline v1::lazy
