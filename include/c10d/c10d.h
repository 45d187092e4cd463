// The whole public API of c10d in one include.
//
// Thread-safety and lifetime: each header included here states its own.
#pragma once

#include "c10d/data.h"
#include "c10d/errors.h"
#include "c10d/init.h"
#include "c10d/lazy.h"
#include "c10d/nn.h"
#include "c10d/optim.h"
#include "c10d/process_group.h"
#include "c10d/rendezvous.h"
#include "c10d/store.h"
#include "c10d/tensor.h"
#include "c10d/trace.h"
#include "c10d/types.h"
#include "c10d/work.h"
