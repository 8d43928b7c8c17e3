#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

// out[i, :] = a[i] * b[i, :], one row per OpenMP iteration.
static void row_scale(const float* a, const float* b, float* out, int64_t n, int64_t m) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float s = a[i];
    const float* row = b + i * m;
    float* dst = out + i * m;
#pragma omp simd
    for (int64_t j = 0; j < m; ++j) dst[j] = s * row[j];
  }
}

static torch::Tensor diag_matmul(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.dim() == 1 && b.dim() == 2 && a.size(0) == b.size(0), "expected A[N], B[N, M]");
  TORCH_CHECK(a.dtype() == torch::kFloat32 && b.dtype() == torch::kFloat32, "float32 only");
  TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), "inputs must be contiguous");
  auto out = torch::empty_like(b);
  row_scale(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), b.size(0), b.size(1));
  return out;
}

static void register_diag_matmul(pybind11::module& m) { m.def("diag_matmul", &diag_matmul); }

REGISTER_BINDING(diag_matmul, register_diag_matmul);
