#include <cuda_runtime.h>
#include <math.h>

// One block of 512 threads per row; each thread keeps its 8 float4 of the row in registers
// (rows of up to 16384 columns), so the row is read once and written once.
constexpr int kThreads = 512;
constexpr int kVecsPerThread = 8;

__device__ float block_reduce(float v, bool is_max) {
  __shared__ float shared[32];
  for (int offset = 16; offset > 0; offset >>= 1) {
    float other = __shfl_xor_sync(0xffffffff, v, offset);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < (blockDim.x >> 5) ? shared[lane] : (is_max ? -INFINITY : 0.f);
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset >>= 1) {
      float other = __shfl_xor_sync(0xffffffff, v, offset);
      v = is_max ? fmaxf(v, other) : v + other;
    }
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  float result = shared[0];
  __syncthreads();
  return result;
}

__global__ void scaled_softmax_kernel(const float4* __restrict__ x, float4* __restrict__ out, int cols4, float scale) {
  const float4* row = x + (long)blockIdx.x * cols4;
  float4* dst = out + (long)blockIdx.x * cols4;
  float4 v[kVecsPerThread];
  float local_max = -INFINITY;
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i) {
    int c = threadIdx.x + i * kThreads;
    if (c < cols4) {
      float4 t = row[c];
      v[i] = make_float4(t.x * scale, t.y * scale, t.z * scale, t.w * scale);
      local_max = fmaxf(local_max, fmaxf(fmaxf(v[i].x, v[i].y), fmaxf(v[i].z, v[i].w)));
    }
  }
  float row_max = block_reduce(local_max, true);
  float local_sum = 0.f;
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i) {
    int c = threadIdx.x + i * kThreads;
    if (c < cols4) {
      v[i] = make_float4(__expf(v[i].x - row_max), __expf(v[i].y - row_max), __expf(v[i].z - row_max),
                         __expf(v[i].w - row_max));
      local_sum += v[i].x + v[i].y + v[i].z + v[i].w;
    }
  }
  float inv = 1.f / block_reduce(local_sum, false);
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i) {
    int c = threadIdx.x + i * kThreads;
    if (c < cols4) dst[c] = make_float4(v[i].x * inv, v[i].y * inv, v[i].z * inv, v[i].w * inv);
  }
}

extern "C" void scaled_softmax_launcher(const float* x, float* out, long rows, long cols, float scale,
                                        cudaStream_t stream) {
  scaled_softmax_kernel<<<rows, kThreads, 0, stream>>>(reinterpret_cast<const float4*>(x),
                                                       reinterpret_cast<float4*>(out), (int)(cols / 4), scale);
}
