// GELU(x W^T + b) (problem_linear_gelu.py) as a tensor-core GEMM computes it, on the CPU: the inputs rounded to a
// lower precision first, the products accumulated in float. Honest under the `paper` policy (issue 36):
//   lowp_tf32   x and W rounded to TF32 (10 mantissa bits, to nearest even), as cuBLAS's FAST_TF32 math mode;
//   lowp_fp16   x and W converted to fp16, fp32 accumulation, as an fp16-input tensor-core GEMM.
// And an approximation that must still fail:
//   lowp_half_k the dot products over every other k, doubled (defence subsampling, docs/defences.md).
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../binding_registry.h"

namespace {

float to_tf32(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  u = (u + 0x0FFFu + ((u >> 13) & 1u)) & ~0x1FFFu;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

float to_fp16(float v) { return static_cast<float>(c10::Half(v)); }

float keep(float v) { return v; }

float gelu(float v) { return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)); }

template <typename Round>
torch::Tensor linear_gelu(torch::Tensor x, torch::Tensor w, torch::Tensor b, Round round, int64_t k_step) {
  x = x.contiguous();
  w = w.contiguous();
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0);
  std::vector<float> xr(x.data_ptr<float>(), x.data_ptr<float>() + n * k);
  std::vector<float> wr(w.data_ptr<float>(), w.data_ptr<float>() + m * k);
  for (float& v : xr) v = round(v);
  for (float& v : wr) v = round(v);
  auto out = torch::empty({n, m}, x.options());
  float* po = out.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      const float *xi = xr.data() + i * k, *wj = wr.data() + j * k;
      float acc = 0.0f;
      for (int64_t t = 0; t < k; t += k_step) acc += xi[t] * wj[t];
      po[i * m + j] = gelu(acc * static_cast<float>(k_step) + pb[j]);
    }
  }
  return out;
}

torch::Tensor lowp_tf32(torch::Tensor x, torch::Tensor w, torch::Tensor b) { return linear_gelu(x, w, b, to_tf32, 1); }
torch::Tensor lowp_fp16(torch::Tensor x, torch::Tensor w, torch::Tensor b) { return linear_gelu(x, w, b, to_fp16, 1); }
torch::Tensor lowp_half_k(torch::Tensor x, torch::Tensor w, torch::Tensor b) { return linear_gelu(x, w, b, keep, 2); }

}  // namespace

static void register_lowp(pybind11::module& m) {
  m.def("lowp_tf32", &lowp_tf32);
  m.def("lowp_fp16", &lowp_fp16);
  m.def("lowp_half_k", &lowp_half_k);
}

REGISTER_BINDING(lowp, register_lowp);
