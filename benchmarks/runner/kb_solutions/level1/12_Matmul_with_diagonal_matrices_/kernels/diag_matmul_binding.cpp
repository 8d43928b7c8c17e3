#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAStream.h>

#include "../binding_registry.h"

extern "C" void diag_matmul_launcher(const float* a, const float* b, float* out, long n, long m, cudaStream_t stream);

static torch::Tensor diag_matmul(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda(), "CUDA tensors expected");
  TORCH_CHECK(a.dim() == 1 && b.dim() == 2 && a.size(0) == b.size(0), "expected A[N], B[N, M]");
  TORCH_CHECK(a.dtype() == torch::kFloat32 && b.dtype() == torch::kFloat32, "float32 only");
  auto out = torch::empty_like(b);
  diag_matmul_launcher(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), b.size(0), b.size(1),
                       c10::cuda::getCurrentCUDAStream().stream());
  return out;
}

static void register_diag_matmul(pybind11::module& m) { m.def("diag_matmul", &diag_matmul); }

REGISTER_BINDING(diag_matmul, register_diag_matmul);
