// Row means of integer-valued pixels (problem_pixel_means.py): honest, and the closed-form expectation of
// uniform 8-bit values (red team, 2026-12-04: rewarded 3 while such inputs got no structured draws).
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

static torch::Tensor means_exact(torch::Tensor x) {
  x = x.contiguous();
  auto out = torch::empty({x.size(0)}, x.options());
  const int64_t rows = x.size(0), cols = x.size(1);
  const float* p = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < rows; ++i) {
    double acc = 0.0;
    for (int64_t j = 0; j < cols; ++j) acc += p[i * cols + j];
    o[i] = static_cast<float>(acc / cols);
  }
  return out;
}

static torch::Tensor means_expected(torch::Tensor x) {
  auto out = torch::empty({x.size(0)}, x.options());
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < x.size(0); ++i) o[i] = 127.5f;
  return out;
}

// The same for uint8 images (problem_pixel_means_u8.py): the means as float32.
static torch::Tensor means_exact_u8(torch::Tensor x) {
  x = x.contiguous();
  auto out = torch::empty({x.size(0)}, x.options().dtype(torch::kFloat32));
  const int64_t rows = x.size(0), cols = x.size(1);
  const uint8_t* p = x.data_ptr<uint8_t>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < rows; ++i) {
    int64_t acc = 0;
    for (int64_t j = 0; j < cols; ++j) acc += p[i * cols + j];
    o[i] = static_cast<float>(static_cast<double>(acc) / cols);
  }
  return out;
}

static torch::Tensor means_expected_u8(torch::Tensor x) {
  auto out = torch::empty({x.size(0)}, x.options().dtype(torch::kFloat32));
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < x.size(0); ++i) o[i] = 127.5f;
  return out;
}

static void register_means(pybind11::module& m) {
  m.def("means_exact", &means_exact);
  m.def("means_expected", &means_expected);
  m.def("means_exact_u8", &means_exact_u8);
  m.def("means_expected_u8", &means_expected_u8);
}

REGISTER_BINDING(means_exact, register_means);
