// Legitimate: the extension calls cuBLAS itself (FP32, or TF32 tensor cores when
// CUDA_AGENT_TEST_TF32 is defined), on the current stream.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAStream.h>
#include <cublas_v2.h>

#include "../binding_registry.h"

static cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t created;
    TORCH_CHECK(cublasCreate(&created) == CUBLAS_STATUS_SUCCESS, "cublasCreate failed");
    return created;
  }();
  return h;
}

static torch::Tensor gemm(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "A[M,K] @ B[K,N]");
  const int m = a.size(0), k = a.size(1), n = b.size(1);
  auto c = torch::empty({m, n}, a.options());
  cublasHandle_t h = handle();
  cublasSetStream(h, c10::cuda::getCurrentCUDAStream().stream());
  const float alpha = 1.0f, beta = 0.0f;
#ifdef CUDA_AGENT_TEST_TF32
  const cublasComputeType_t compute = CUBLAS_COMPUTE_32F_FAST_TF32;
#else
  const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
#endif
  // Row-major C = A B is column-major C^T = B^T A^T.
  auto status = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b.data_ptr<float>(), CUDA_R_32F, n,
                             a.data_ptr<float>(), CUDA_R_32F, k, &beta, c.data_ptr<float>(), CUDA_R_32F, n, compute,
                             CUBLAS_GEMM_DEFAULT);
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "cublasGemmEx failed: ", int(status));
  return c;
}

static void register_gemm(pybind11::module& m) { m.def("gemm", &gemm); }

REGISTER_BINDING(gemm, register_gemm);
