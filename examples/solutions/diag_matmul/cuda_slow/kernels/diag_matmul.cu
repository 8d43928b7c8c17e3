#include <cuda_runtime.h>

// Correct but slow: a naive dense matmul against the implicit diagonal matrix, O(N^2 M),
// one thread per output element looping over the whole inner dimension.
__global__ void dense_diag_matmul(const float* a, const float* b, float* out, long n, long m) {
  long idx = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (idx >= n * m) return;
  long i = idx / m, j = idx % m;
  float acc = 0.0f;
  for (long k = 0; k < n; ++k) acc += (k == i ? a[i] : 0.0f) * b[k * m + j];
  out[idx] = acc;
}

extern "C" void diag_matmul_launcher(const float* a, const float* b, float* out, long n, long m, cudaStream_t stream) {
  const int threads = 256;
  dense_diag_matmul<<<(n * m + threads - 1) / threads, threads, 0, stream>>>(a, b, out, n, m);
}
