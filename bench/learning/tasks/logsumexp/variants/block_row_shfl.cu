// warp_shuffle_reduction from block_row: max and sum reduced with warp shuffles, one value per
// warp through shared memory.
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

__global__ void logsumexp_shfl(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float scratch[2][kWarps];
    const float* in = x + (size_t)blockIdx.x * cols;
    int t = threadIdx.x, warp = t / 32, lane = t % 32;
    float m = -INFINITY;
    for (int c = t; c < cols; c += kThreads) m = fmaxf(m, in[c]);
    m = warp_max(m);
    if (lane == 0) scratch[0][warp] = m;
    __syncthreads();
    m = warp_max(lane < kWarps ? scratch[0][lane] : -INFINITY);
    float s = 0.0f;
    for (int c = t; c < cols; c += kThreads) s += expf(in[c] - m);
    s = warp_sum(s);
    if (lane == 0) scratch[1][warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = warp_sum(lane < kWarps ? scratch[1][lane] : 0.0f);
        if (lane == 0) y[blockIdx.x] = m + logf(s);
    }
}

extern "C" void logsumexp(const float* x, float* y, int batch_size, int dim,
                          cudaStream_t stream) {
    logsumexp_shfl<<<batch_size, kThreads, 0, stream>>>(x, y, dim);
}
