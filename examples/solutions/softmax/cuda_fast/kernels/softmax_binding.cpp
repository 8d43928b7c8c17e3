#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAStream.h>

#include "../binding_registry.h"

extern "C" void scaled_softmax_launcher(const float* x, float* out, long rows, long cols, float scale,
                                        cudaStream_t stream);

static torch::Tensor scaled_softmax(torch::Tensor x, double scale) {
  TORCH_CHECK(x.is_cuda() && x.dtype() == torch::kFloat32 && x.dim() == 2, "float32 CUDA matrix expected");
  TORCH_CHECK(x.size(1) % 4 == 0 && x.size(1) <= 16384, "columns must be a multiple of 4, at most 16384");
  auto out = torch::empty_like(x);
  scaled_softmax_launcher(x.data_ptr<float>(), out.data_ptr<float>(), x.size(0), x.size(1), (float)scale,
                          c10::cuda::getCurrentCUDAStream().stream());
  return out;
}

static void register_scaled_softmax(pybind11::module& m) { m.def("scaled_softmax", &scaled_softmax); }

REGISTER_BINDING(scaled_softmax, register_scaled_softmax);
