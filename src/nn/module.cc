// Module bookkeeping: registration, recursive names, modes, state_dict. See include/c10d/nn.h.
#include <fmt/format.h>

#include <set>

#include "c10d/nn.h"
#include "core/check.h"

namespace c10d::inline v1::nn {
namespace {

std::string shape_string(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace

Tensor Module::forward(const Tensor& input) {
  (void)input;
  C10D_THROW(Unsupported, "module {} has no single-tensor forward()", type_name_);
}

void Module::check_new_name(const std::string& name) const {
  C10D_CHECK(!name.empty(), "{}: a parameter, buffer or child needs a non-empty name", type_name_);
  C10D_CHECK(name.find('.') == std::string::npos, "{}: name '{}' must not contain '.'", type_name_,
             name);
  auto taken = [&](const auto& list) {
    for (const auto& [n, _] : list) {
      if (n == name) return true;
    }
    return false;
  };
  C10D_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_),
             "{}: name '{}' is already registered", type_name_, name);
}

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  check_new_name(name);
  C10D_CHECK(value.defined(), "{}: parameter '{}' is undefined", type_name_, name);
  C10D_CHECK(is_floating_point(value.dtype()), "{}: parameter '{}' has dtype {}, not floating",
             type_name_, name, dtype_name(value.dtype()));
  // A parameter is a leaf (torch's nn.Parameter): the result of an op starts a new history.
  // A leaf keeps its impl, so one tensor can be registered in two modules (weight tying).
  if (!lazy::is_leaf(value)) value = lazy::detach(value);
  lazy::set_requires_grad(value, true);
  parameters_.emplace_back(name, value);
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value) {
  check_new_name(name);
  C10D_CHECK(value.defined(), "{}: buffer '{}' is undefined", type_name_, name);
  buffers_.emplace_back(name, value);
  return value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  C10D_CHECK(module != nullptr, "{}: child '{}' is null", type_name_, name);
  children_.emplace_back(name, std::move(module));
}

// Iterative would buy nothing here: module trees are a few levels deep.
void Module::collect(const std::string& prefix, bool parameters, bool buffers,
                     NamedTensors& out) const {
  if (parameters) {
    for (const auto& [name, t] : parameters_) out.emplace_back(prefix + name, t);
  }
  if (buffers) {
    for (const auto& [name, t] : buffers_) out.emplace_back(prefix + name, t);
  }
  for (const auto& [name, child] : children_) {
    child->collect(prefix + name + ".", parameters, buffers, out);
  }
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, false, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, true, out);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect("", true, true, out);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  on_train(on);
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (auto& p : parameters()) lazy::set_grad(p, Tensor());
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  NamedTensors mine = state_dict();
  std::set<std::string> given;
  for (const auto& [name, value] : state) {
    C10D_CHECK(given.insert(name).second, "load_state_dict: entry '{}' appears twice", name);
  }
  std::set<std::string> known;
  for (const auto& [name, _] : mine) known.insert(name);
  if (strict) {
    for (const auto& [name, _] : mine) {
      C10D_CHECK(given.count(name) != 0, "load_state_dict into {}: missing entry '{}'", type_name_,
                 name);
    }
    for (const auto& [name, _] : state) {
      C10D_CHECK(known.count(name) != 0, "load_state_dict into {}: unexpected entry '{}'",
                 type_name_, name);
    }
  }
  // Check everything before writing anything, so a bad dict leaves the module as it was.
  std::vector<std::pair<Tensor, Tensor>> writes;
  for (const auto& [name, dst] : mine) {
    for (const auto& [sname, value] : state) {
      if (sname != name) continue;
      C10D_CHECK(value.defined(), "load_state_dict: entry '{}' is undefined", name);
      C10D_CHECK(value.shape() == dst.shape() && value.dtype() == dst.dtype(),
                 "load_state_dict: entry '{}' is {}{} but the module's is {}{}", name,
                 dtype_name(value.dtype()), shape_string(value.shape()), dtype_name(dst.dtype()),
                 shape_string(dst.shape()));
      writes.emplace_back(dst, value);
    }
  }
  lazy::NoGradGuard no_grad;
  // A copy: the module's tensors must never share storage (or history) with the source, which
  // may be another live module. Loading is rare, so the sync a pending source costs is fine.
  for (auto& [dst, value] : writes) lazy::assign(dst, value.clone());
}

}  // namespace c10d::inline v1::nn
