// Test kernels for the harness tests: one honest kernel and the building blocks of cheats.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdlib>
#include <cstring>

#include "../binding_registry.h"

static torch::Tensor scale_bias(torch::Tensor x, torch::Tensor s, torch::Tensor b) {
  auto out = torch::empty_like(x);
  const int64_t n = x.size(0), d = x.size(1);
  const float *px = x.data_ptr<float>(), *ps = s.data_ptr<float>(), *pb = b.data_ptr<float>();
  float* po = out.data_ptr<float>();
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) po[i * d + j] = px[i * d + j] * ps[j] + pb[j];
  return out;
}

static torch::Tensor scale_bias_inplace(torch::Tensor x, torch::Tensor s, torch::Tensor b) {
  const int64_t n = x.size(0), d = x.size(1);
  float* px = x.data_ptr<float>();
  const float *ps = s.data_ptr<float>(), *pb = b.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) px[i * d + j] = px[i * d + j] * ps[j] + pb[j];
  return x;
}

static torch::Tensor uninitialized(torch::Tensor x) { return torch::empty_like(x); }

static torch::Tensor identity_copy(torch::Tensor x) {
  auto out = torch::empty_like(x);
  std::memcpy(out.data_ptr<float>(), x.data_ptr<float>(), x.numel() * sizeof(float));
  return out;
}

static torch::Tensor bias_only(torch::Tensor x, torch::Tensor b) {
  auto out = torch::empty_like(x);
  const int64_t n = x.size(0), d = x.size(1);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) out.data_ptr<float>()[i * d + j] = b.data_ptr<float>()[j];
  return out;
}

static torch::Tensor every_other_row(torch::Tensor x, torch::Tensor s, torch::Tensor b) {
  auto out = scale_bias(x, s, b);
  const int64_t n = x.size(0), d = x.size(1);
  for (int64_t i = 1; i < n; i += 2) std::memset(out.data_ptr<float>() + i * d, 0, d * sizeof(float));
  return out;
}

static torch::Tensor spin(torch::Tensor x) {
  volatile uint64_t k = 0;
  while (true) k = k + 1;
  return x;
}

static torch::Tensor segfault(torch::Tensor x) {
  volatile int* p = nullptr;
  *p = 1;
  return x;
}

static torch::Tensor hog(torch::Tensor x) {
  for (int i = 0; i < 1000; ++i) {
    char* p = static_cast<char*>(std::malloc(size_t(1) << 30));
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 1, size_t(1) << 30);
  }
  return x;
}

static void register_all(pybind11::module& m) {
  m.def("scale_bias", &scale_bias);
  m.def("scale_bias_inplace", &scale_bias_inplace);
  m.def("uninitialized", &uninitialized);
  m.def("identity_copy", &identity_copy);
  m.def("bias_only", &bias_only);
  m.def("every_other_row", &every_other_row);
  m.def("spin", &spin);
  m.def("segfault", &segfault);
  m.def("hog", &hog);
}

REGISTER_BINDING(all, register_all);
