// Canonical form of a pending graph: what a step hands to the program cache and the planner.
//
// canonicalize() walks the nodes reachable from the roots in post-order without recursion
// (an explicit stack), numbers them, merges input-data leaves that read the same bytes, and
// writes a structural encoding: per node its local hash, operand positions, control edge and,
// for leaves with a run-time payload, its parameter number. Two graphs with equal encodings
// run the same program; only their payloads (input bytes, random counters, process groups)
// differ, and those are bound from `params` when the program runs.
//
// Lifetime: a Graph points into nodes that the caller keeps alive (through the root Values).
#pragma once

#include <cstdint>
#include <vector>

#include "lazy/ir.h"

namespace c10d::inline v1::lazy {

// One output of one entry of a canonical graph or program.
struct Slot {
  int entry = 0;
  int index = 0;
  bool operator==(const Slot&) const = default;
};

struct Graph {
  std::vector<const Node*> nodes;           // post-order: operands before users
  std::vector<std::vector<Slot>> operands;  // per node
  std::vector<int> control;                 // per node: entry of its control edge, or -1
  std::vector<int> param_of;                // per node: parameter number, or -1
  std::vector<const Node*> params;          // payload leaves, numbered in post-order
  std::vector<Slot> roots;                  // one per requested value
  std::vector<std::uint64_t> encoding;
  std::uint64_t hash = 0;
};

Graph canonicalize(const std::vector<Value>& roots);

}  // namespace c10d::inline v1::lazy
