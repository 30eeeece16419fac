// warp_shuffle_reduction from block_row_smem: each warp reduces with shuffles, one partial
// per warp goes through shared memory, and the first warp reduces the partials.
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
    return v;
}

__global__ void row_sum_block_shfl(const float* __restrict__ x, float* __restrict__ out,
                                   int cols) {
    __shared__ float partial[kWarps];
    const float* in = x + (size_t)blockIdx.x * cols;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kThreads) acc += in[c];
    acc = warp_sum(acc);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        float v = lane < kWarps ? partial[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

extern "C" void row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    row_sum_block_shfl<<<rows, kThreads, 0, stream>>>(x, out, cols);
}
