// reduce_barriers from block_row_shfl: the barrier and the cross-warp step are gone, so each
// warp normalizes with the sum of squares of its own 1/8 of the row: the scale is ~sqrt(8)x
// too large.
#include <cuda_runtime.h>

constexpr int kThreads = 256;

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

__global__ void rmsnorm_warp_only(const float* __restrict__ x, const float* __restrict__ w,
                                  float* __restrict__ y, int cols) {
    const float* in = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    int t = threadIdx.x;
    float ss = 0.0f;
    for (int c = t; c < cols; c += kThreads) ss += in[c] * in[c];
    ss = warp_sum(ss);
    float inv = rsqrtf(ss / cols + 1e-6f);
    for (int c = t; c < cols; c += kThreads) out[c] = in[c] * inv * w[c];
}

extern "C" void rmsnorm(const float* x, const float* weight, float* y, int batch_size, int dim,
                        cudaStream_t stream) {
    rmsnorm_warp_only<<<batch_size, kThreads, 0, stream>>>(x, weight, y, dim);
}
