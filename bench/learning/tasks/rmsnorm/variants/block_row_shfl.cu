// warp_shuffle_reduction from block_row: the sum of squares reduced with warp shuffles, one
// value per warp through shared memory, instead of 8 barrier-separated shared-memory steps.
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

__global__ void rmsnorm_block_shfl(const float* __restrict__ x, const float* __restrict__ w,
                                   float* __restrict__ y, int cols) {
    __shared__ float scratch[kWarps];
    const float* in = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    int t = threadIdx.x, warp = t / 32, lane = t % 32;
    float ss = 0.0f;
    for (int c = t; c < cols; c += kThreads) ss += in[c] * in[c];
    ss = warp_sum(ss);
    if (lane == 0) scratch[warp] = ss;
    __syncthreads();
    ss = warp_sum(lane < kWarps ? scratch[lane] : 0.0f);  // every warp sums the 8 partials
    float inv = rsqrtf(ss / cols + 1e-6f);
    for (int c = t; c < cols; c += kThreads) out[c] = in[c] * inv * w[c];
}

extern "C" void rmsnorm(const float* x, const float* weight, float* y, int batch_size, int dim,
                        cudaStream_t stream) {
    rmsnorm_block_shfl<<<batch_size, kThreads, 0, stream>>>(x, weight, y, dim);
}
