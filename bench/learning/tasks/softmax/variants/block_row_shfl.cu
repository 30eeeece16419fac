// warp_shuffle_reduction from block_row: max and sum reduced with warp shuffles, one value per
// warp through shared memory, instead of 8 barrier-separated shared-memory steps each.
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

// Every thread gets the block's result (xor shuffles leave it in all lanes).
__device__ float block_max(float v, float* scratch) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    v = warp_max(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = warp_max(lane < kWarps ? scratch[lane] : -INFINITY);
    __syncthreads();  // scratch is reused by the next reduction
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

__global__ void softmax_block_shfl(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float scratch[kWarps];
    const float* in = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    int t = threadIdx.x;
    float m = -INFINITY;
    for (int c = t; c < cols; c += kThreads) m = fmaxf(m, in[c]);
    m = block_max(m, scratch);
    float s = 0.0f;
    for (int c = t; c < cols; c += kThreads) s += expf(in[c] - m);
    float inv = 1.0f / block_sum(s, scratch);
    for (int c = t; c < cols; c += kThreads) out[c] = expf(in[c] - m) * inv;
}

extern "C" void softmax(const float* x, float* y, int batch_size, int dim, cudaStream_t stream) {
    softmax_block_shfl<<<batch_size, kThreads, 0, stream>>>(x, y, dim);
}
