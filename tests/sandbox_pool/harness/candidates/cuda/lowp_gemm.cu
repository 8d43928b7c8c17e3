#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Pieces of GELU(x W^T + b) around a cuBLAS GEMM (lowp_gemm_binding.cpp): fp32 -> fp16 conversion of the GEMM's
// inputs, and the bias + exact-GELU epilogue on its fp32 output.

__global__ void to_half_kernel(const float* __restrict__ in, __half* __restrict__ out, long n) {
  const long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half_rn(in[i]);
}

__global__ void bias_gelu_kernel(float* __restrict__ y, const float* __restrict__ b, long n, long m) {
  const long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n * m) {
    const float v = y[i] + b[i % m];
    y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  }
}

extern "C" void to_half(const float* in, void* out, long n, cudaStream_t stream) {
  to_half_kernel<<<(n + 255) / 256, 256, 0, stream>>>(in, static_cast<__half*>(out), n);
}

extern "C" void bias_gelu(float* y, const float* b, long n, long m, cudaStream_t stream) {
  bias_gelu_kernel<<<(n * m + 255) / 256, 256, 0, stream>>>(y, b, n, m);
}
