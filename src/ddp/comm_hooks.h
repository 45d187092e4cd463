// The default comm hook as a named type, so that DistributedDataParallel can tell it from a
// user's hook (std::function::target) and, in lazy mode, record the bucket's reduction as a
// collective IR node instead of calling it.
#pragma once

#include <memory>

#include "c10d/ddp.h"

namespace c10d::inline v1::ddp {

struct AllreduceHook {
  std::shared_ptr<Future> operator()(ProcessGroup& group, GradBucket& bucket) const;
};

}  // namespace c10d::inline v1::ddp
