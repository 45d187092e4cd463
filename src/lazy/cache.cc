#include "lazy/cache.h"

#include <cstdlib>
#include <string>

namespace c10d::lazy {

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
  static ProgramCache cache([] {
    const char* env = std::getenv("C10D_LAZY_CACHE");
    if (env != nullptr && *env != '\0') return static_cast<std::size_t>(std::stoull(env));
    return std::size_t{64};
  }());
  return cache;
}

}  // namespace c10d::lazy
