// warp_shuffle_reduction from block_row: sums reduced with warp shuffles, one partial per warp
// through shared memory.
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

__device__ float block_sum(float v, float* scratch) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = warp_sum(lane < kWarps ? scratch[lane] : 0.0f);
    __syncthreads();
    return v;
}

__global__ void layernorm_block_shfl(const float* __restrict__ x, const float* __restrict__ weight,
                                     const float* __restrict__ bias, float* __restrict__ y,
                                     int cols) {
    __shared__ float scratch[kWarps];
    const float* in = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    int t = threadIdx.x;
    float sum = 0.0f;
    for (int c = t; c < cols; c += kThreads) sum += in[c];
    float mean = block_sum(sum, scratch) / cols;
    float sq = 0.0f;
    for (int c = t; c < cols; c += kThreads) sq += (in[c] - mean) * (in[c] - mean);
    float rstd = rsqrtf(block_sum(sq, scratch) / cols + 1e-5f);
    for (int c = t; c < cols; c += kThreads) out[c] = (in[c] - mean) * rstd * weight[c] + bias[c];
}

extern "C" void layernorm(const float* x, const float* weight, const float* bias, float* y,
                          int batch_size, int dim, cudaStream_t stream) {
    layernorm_block_shfl<<<batch_size, kThreads, 0, stream>>>(x, weight, bias, y, dim);
}
