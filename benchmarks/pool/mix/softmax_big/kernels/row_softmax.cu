#include <cuda_runtime.h>

// Row softmax, one block per row: the row's max, then the sum of exp(x - max), then the outputs; float4 loads.

constexpr int THREADS = 1024;

__device__ float block_reduce(float v, bool is_max, float* shared) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_down_sync(0xffffffffu, v, offset);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < THREADS / 32 ? shared[lane] : (is_max ? -INFINITY : 0.0f);
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other = __shfl_down_sync(0xffffffffu, v, offset);
      v = is_max ? fmaxf(v, other) : v + other;
    }
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  v = shared[0];
  __syncthreads();
  return v;
}

__global__ void row_softmax_kernel(const float4* __restrict__ x, float4* __restrict__ out, long cols4) {
  __shared__ float shared[32];
  const float4* row = x + blockIdx.x * cols4;
  float4* dst = out + blockIdx.x * cols4;
  float m = -INFINITY;
  for (long j = threadIdx.x; j < cols4; j += THREADS) {
    const float4 v = row[j];
    m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
  }
  m = block_reduce(m, true, shared);
  float s = 0.0f;
  for (long j = threadIdx.x; j < cols4; j += THREADS) {
    const float4 v = row[j];
    s += __expf(v.x - m) + __expf(v.y - m) + __expf(v.z - m) + __expf(v.w - m);
  }
  const float inv = 1.0f / block_reduce(s, false, shared);
  for (long j = threadIdx.x; j < cols4; j += THREADS) {
    const float4 v = row[j];
    dst[j] = make_float4(__expf(v.x - m) * inv, __expf(v.y - m) * inv, __expf(v.z - m) * inv, __expf(v.w - m) * inv);
  }
}

extern "C" void row_softmax_launcher(const float* x, float* out, long rows, long cols, cudaStream_t stream) {
  row_softmax_kernel<<<rows, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(out),
                                                   cols / 4);
}
