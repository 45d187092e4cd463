#include "lazy/autograd_hook.h"

#include <atomic>

namespace c10d::inline v1::lazy {
namespace {

std::atomic<RecordFn> g_hook{nullptr};
thread_local bool t_suspended = false;

}  // namespace

void set_record_hook(RecordFn hook) { g_hook.store(hook); }

bool should_record(std::span<const Tensor> inputs) {
  if (t_suspended || g_hook.load(std::memory_order_relaxed) == nullptr) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.impl()->autograd_meta()) return true;
  }
  return false;
}

void record_op(const OpRecord& record) {
  if (RecordFn hook = g_hook.load(); hook != nullptr && !t_suspended) hook(record);
}

RecordSuspendGuard::RecordSuspendGuard() : previous_(t_suspended) { t_suspended = true; }
RecordSuspendGuard::~RecordSuspendGuard() { t_suspended = previous_; }

}  // namespace c10d::inline v1::lazy
