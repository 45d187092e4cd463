#include "lazy/cache.h"

#include <cstdint>
#include <string>

#include "core/parse.h"

namespace c10d::inline v1::lazy {

std::shared_ptr<Program> ProgramCache::find(const Graph& g) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(g.hash);
  if (it == index_.end() || it->second->second->encoding != g.encoding) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void ProgramCache::insert(std::uint64_t hash, std::shared_ptr<Program> program) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(hash); it != index_.end()) {
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.emplace_front(hash, std::move(program));
  index_[hash] = lru_.begin();
  evict_locked();
}

void ProgramCache::set_capacity(std::size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = capacity;
  evict_locked();
}

std::size_t ProgramCache::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

void ProgramCache::evict_locked() {
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

ProgramCache& program_cache() {
  // C10D_LAZY_CACHE in [0, 2^20] programs (each holds compiled kernels and buffers).
  static ProgramCache cache(static_cast<std::size_t>(
      core::env_uint("C10D_LAZY_CACHE", 0, std::uint64_t{1} << 20).value_or(64)));
  return cache;
}

}  // namespace c10d::inline v1::lazy
