#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAStream.h>

#include "../binding_registry.h"

extern "C" void row_sums_launcher(const float* x, const float* g, const float* b, float* out, long n, long d, int mode,
                                  cudaStream_t stream);

static torch::Tensor wsum(torch::Tensor x, torch::Tensor g, torch::Tensor b, int64_t mode) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.dtype() == torch::kFloat32, "x: a float32 CUDA matrix");
  x = x.contiguous();
  auto out = torch::empty({x.size(0)}, x.options());
  row_sums_launcher(x.data_ptr<float>(), g.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), x.size(0),
                    x.size(1), static_cast<int>(mode), c10::cuda::getCurrentCUDAStream().stream());
  return out;
}

static void register_wsum(pybind11::module& m) { m.def("wsum", &wsum); }

REGISTER_BINDING(wsum, register_wsum);
