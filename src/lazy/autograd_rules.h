// The table of backward rules, filled by the two rule files: autograd_rules.cc (elementwise)
// and autograd_rules_shape.cc (reductions, linear algebra, shape, neural-network functions).
// Built once, on first use, and read-only after; safe to read from any thread.
#pragma once

#include <string_view>
#include <unordered_map>

#include "lazy/autograd.h"

namespace c10d::inline v1::lazy::autograd {

using RuleTable = std::unordered_map<std::string_view, Rule>;

void add_elementwise_rules(RuleTable& table);
void add_shape_rules(RuleTable& table);

}  // namespace c10d::inline v1::lazy::autograd
