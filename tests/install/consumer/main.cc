// Uses an installed c10d through its public API only; prints OK and exits 0 when it works.
#include <cstdio>
#include <exception>
#include <vector>

#include "c10d/c10d.h"

int main() {
  try {
    c10d::HashStore store;
    store.set("greeting", "hello");
    if (store.get_string("greeting") != "hello") {
      std::fprintf(stderr, "consumer: get returned the wrong value\n");
      return 1;
    }
    c10d::Tensor t =
        c10d::Tensor::from_vector(std::vector<float>{1.0f, 2.0f, 3.0f}, c10d::DType::kFloat32);
    if (t.numel() != 3 || t.data<float>()[2] != 3.0f) {
      std::fprintf(stderr, "consumer: unexpected tensor %s\n", t.to_string().c_str());
      return 1;
    }
    std::printf("OK %s\n", t.to_string().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
