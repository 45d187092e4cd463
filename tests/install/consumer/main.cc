// Uses an installed c10d through its public API only; prints OK and exits 0 when it works.
//
// libc10d.so exports only what include/c10d/ marks C10D_API, so this also checks that what a
// user reaches is exported: free functions, classes' members, the vtables a subclass of ours
// needs, and the type_info of an error thrown inside the library and caught here.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "c10d/c10d.h"

namespace {

// A user's module: its vtable and type_info refer to c10d::nn::Module's.
class Doubler : public c10d::nn::Module {
 public:
  Doubler() : c10d::nn::Module("Doubler") {}
  c10d::Tensor forward(const c10d::Tensor& input) override { return input * 2.0; }
};

bool fail(const std::string& what) {
  std::fprintf(stderr, "consumer: %s\n", what.c_str());
  return false;
}

bool run() {
  auto store = std::make_shared<c10d::HashStore>();
  store->set("greeting", "hello");
  if (store->get_string("greeting") != "hello") return fail("get returned the wrong value");

  // Thrown inside the library, caught by its own type here, then by its base class and cast
  // back: the type_info the library throws with is the one this program compares against.
  try {
    const std::vector<std::string> keys{"missing"};
    store->wait(keys, std::chrono::milliseconds(10));
    return fail("wait for a missing key returned");
  } catch (const c10d::TimeoutError&) {
  }
  c10d::nn::Sequential net;
  try {
    c10d::nn::load_state_dict(net, "/nonexistent-c10d-consumer-dir/state");
    return fail("loading a missing state file returned");
  } catch (const c10d::Error& e) {
    if (dynamic_cast<const c10d::InvalidArgument*>(&e) == nullptr) {
      return fail(std::string("loading a missing file threw a non-InvalidArgument: ") + e.what());
    }
  }

  c10d::Tensor t =
      c10d::Tensor::from_vector(std::vector<float>{1.0f, 2.0f, 3.0f}, c10d::DType::kFloat32);
  if (t.numel() != 3 || t.data<float>()[2] != 3.0f)
    return fail("unexpected tensor " + t.to_string());

  // A one-rank TCP group: a collective through the ProcessGroup and Work vtables.
  c10d::ProcessGroupTCPOptions options;
  options.host = "127.0.0.1";
  std::shared_ptr<c10d::ProcessGroup> pg = c10d::make_process_group_tcp(store, 0, 1, options);
  c10d::Tensor sum = t.clone();
  pg->all_reduce({sum})->wait(std::chrono::seconds(30));
  if (sum.data<float>()[1] != 2.0f) return fail("all_reduce over one rank changed the tensor");

  // The lazy core through a module of the user's.
  net.push_back(std::make_shared<Doubler>());
  const c10d::Tensor out = net(t);
  if (out.data<float>()[2] != 6.0f) return fail("the module computed " + out.to_string());
  if (!std::dynamic_pointer_cast<Doubler>(net.named_children().at(0).second)) {
    return fail("the module's child is not the Doubler put there");
  }
  // A module the library constructed (its vtable is the library's), cast down here.
  c10d::lazy::Generator gen(7);
  net.push_back(std::make_shared<c10d::nn::Linear>(3, 2, gen));
  const std::shared_ptr<c10d::nn::Module> child = net.named_children().at(1).second;
  const auto linear = std::dynamic_pointer_cast<c10d::nn::Linear>(child);
  if (!linear || linear->weight().numel() != 6) return fail("the Linear child did not cast back");
  if (std::dynamic_pointer_cast<Doubler>(child)) return fail("a Linear cast to a Doubler");
  const c10d::Tensor y = net(c10d::lazy::reshape(t, {1, 3}));
  if (y.shape() != std::vector<std::int64_t>{1, 2}) {
    return fail("Doubler then Linear gave " + y.to_string());
  }

  std::printf("OK %s\n", t.to_string().c_str());
  return true;
}

}  // namespace

int main() {
  try {
    return run() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
