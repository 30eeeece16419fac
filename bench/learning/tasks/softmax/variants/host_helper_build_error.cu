// warp_shuffle_reduction from naive: a warp per row with shuffle reductions. Does not compile:
// the reduction helpers lack __device__, so the kernel calls host functions.
#include <cuda_runtime.h>

float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    return v;
}

float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

__global__ void softmax_warp(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* in = x + (size_t)row * cols;
    float* out = y + (size_t)row * cols;
    float m = -INFINITY;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, in[c]);
    m = warp_max(m);
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) s += expf(in[c] - m);
    float inv = 1.0f / warp_sum(s);
    for (int c = lane; c < cols; c += 32) out[c] = expf(in[c] - m) * inv;
}

extern "C" void softmax(const float* x, float* y, int batch_size, int dim, cudaStream_t stream) {
    softmax_warp<<<(batch_size + 7) / 8, 256, 0, stream>>>(x, y, batch_size, dim);
}
