// tune_block_size from block_row_shfl: 512 threads per row. Wrong: the final reduction still
// reads 8 warp partials, as for 256 threads, so half the row is dropped.
#include <cuda_runtime.h>

constexpr int kThreads = 512;

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
    return v;
}

__global__ void row_sum_block512(const float* __restrict__ x, float* __restrict__ out, int cols) {
    __shared__ float partial[kThreads / 32];
    const float* in = x + (size_t)blockIdx.x * cols;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kThreads) acc += in[c];
    acc = warp_sum(acc);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        float v = lane < 8 ? partial[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

extern "C" void row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    row_sum_block512<<<rows, kThreads, 0, stream>>>(x, out, cols);
}
