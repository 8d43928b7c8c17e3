#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAStream.h>

#include "../binding_registry.h"

extern "C" void gemm_epilogue_launcher(const float* a, const float* b, const float* bias, float* c, int m, int n,
                                       int k, int mode, float divisor, cudaStream_t stream);

// x[M, K], weight[N, K] (nn.Linear), bias[N]; mode 0: relu(x W^T + bias), 1: gelu((x W^T + bias) / divisor).
static torch::Tensor gemm_epilogue(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t mode,
                                   double divisor) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "CUDA tensors expected");
  TORCH_CHECK(x.dtype() == torch::kFloat32 && weight.dtype() == torch::kFloat32 && bias.dtype() == torch::kFloat32,
              "float32 expected");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1) && bias.numel() == weight.size(0),
              "shapes: x [M, K], weight [N, K], bias [N]");
  TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous(), "contiguous tensors expected");
  auto out = torch::empty({x.size(0), weight.size(0)}, x.options());
  gemm_epilogue_launcher(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(),
                         (int)x.size(0), (int)weight.size(0), (int)x.size(1), (int)mode, (float)divisor,
                         c10::cuda::getCurrentCUDAStream().stream());
  return out;
}

static void register_gemm_epilogue(pybind11::module& m) { m.def("gemm_epilogue", &gemm_epilogue); }

REGISTER_BINDING(gemm_epilogue, register_gemm_epilogue);
