#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <vector>

#include "../binding_registry.h"

// Correct but slow: builds the dense diagonal matrix and multiplies, single-threaded.
static torch::Tensor diag_matmul(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.dim() == 1 && b.dim() == 2 && a.size(0) == b.size(0), "expected A[N], B[N, M]");
  const int64_t n = b.size(0), m = b.size(1);
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  std::vector<float> dense(n * n, 0.0f);
  for (int64_t i = 0; i < n; ++i) dense[i * n + i] = pa[i];
  auto out = torch::empty_like(b);
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) po[i * m + j] = 0.0f;
    for (int64_t k = 0; k < n; ++k) {
      const float d = dense[i * n + k];
      for (int64_t j = 0; j < m; ++j) po[i * m + j] += d * pb[k * m + j];
    }
  }
  return out;
}

static void register_diag_matmul(pybind11::module& m) { m.def("diag_matmul", &diag_matmul); }

REGISTER_BINDING(diag_matmul, register_diag_matmul);
