// relu kernels for problem_big_relu.py (test_hacks.py): `relu` writes every element; `relu_positives_only`
// writes only the positive ones and leaves the rest as the allocator gave them (zero on fresh pages);
// `relu_bf16` returns the same values rounded to bfloat16 (half the bytes written, within rtol 1e-2).
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

static torch::Tensor relu(torch::Tensor x) {
  auto out = torch::empty_like(x);
  const float* px = x.data_ptr<float>();
  float* po = out.data_ptr<float>();
  const int64_t n = x.numel();
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) po[i] = px[i] > 0.0f ? px[i] : 0.0f;
  return out;
}

static torch::Tensor relu_positives_only(torch::Tensor x) {
  auto out = torch::empty_like(x);
  const float* px = x.data_ptr<float>();
  float* po = out.data_ptr<float>();
  const int64_t n = x.numel();
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i)
    if (px[i] > 0.0f) po[i] = px[i];
  return out;
}

static torch::Tensor relu_bf16(torch::Tensor x) {
  auto out = torch::empty(x.sizes(), x.options().dtype(torch::kBFloat16));
  const float* px = x.data_ptr<float>();
  at::BFloat16* po = out.data_ptr<at::BFloat16>();
  const int64_t n = x.numel();
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) po[i] = at::BFloat16(px[i] > 0.0f ? px[i] : 0.0f);
  return out;
}

static void register_relu(pybind11::module& m) {
  m.def("relu", &relu);
  m.def("relu_bf16", &relu_bf16);
  m.def("relu_positives_only", &relu_positives_only);
}

REGISTER_BINDING(relu_kernels, register_relu);
