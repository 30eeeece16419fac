// Softmax over each row: one 256-thread block per row. The threads stride the row together, so
// each warp's loads are contiguous (coalesced), and the maximum and the sum are block
// reductions (warp shuffles, then shared memory) instead of one thread walking the row alone.
#include <cuda_runtime.h>

__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    return v;
}
__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}
__device__ float block_reduce(float v, bool is_max, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? scratch[lane] : (is_max ? -INFINITY : 0.0f);
    if (warp == 0) v = is_max ? warp_max(v) : warp_sum(v);
    if (threadIdx.x == 0) scratch[0] = v;
    __syncthreads();
    v = scratch[0];
    __syncthreads();
    return v;
}

__global__ void softmax_kernel(const float* x, float* y, int rows, int cols) {
    __shared__ float scratch[32];
    const float* in = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, in[c]);
    m = block_reduce(m, true, scratch);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += __expf(in[c] - m);
    s = block_reduce(s, false, scratch);
    float inv = 1.0f / s;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = __expf(in[c] - m) * inv;
}

extern "C" void softmax(const float* x, float* y, int batch_size, int dim, cudaStream_t stream) {
    softmax_kernel<<<batch_size, 256, 0, stream>>>(x, y, batch_size, dim);
}
