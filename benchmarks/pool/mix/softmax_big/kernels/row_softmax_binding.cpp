#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAStream.h>

#include "../binding_registry.h"

extern "C" void row_softmax_launcher(const float* x, float* out, long rows, long cols, cudaStream_t stream);

static torch::Tensor row_softmax(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.dtype() == torch::kFloat32 && x.size(1) % 4 == 0,
              "x: a float32 CUDA matrix with a multiple of 4 columns");
  x = x.contiguous();
  auto out = torch::empty_like(x);
  row_softmax_launcher(x.data_ptr<float>(), out.data_ptr<float>(), x.size(0), x.size(1),
                       c10::cuda::getCurrentCUDAStream().stream());
  return out;
}

static void register_row_softmax(pybind11::module& m) { m.def("row_softmax", &row_softmax); }

REGISTER_BINDING(row_softmax, register_row_softmax);
