// algebraic_simplification from block_row_shfl: online softmax with shuffle reductions. Wrong:
// when a thread's running max grows, its running sum is not rescaled, so terms added under an
// older, smaller max stay too large and the sum overestimates.
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    float top = fmaxf(m, m2);
    if (top == -INFINITY) return;
    s = s * expf(m - top) + s2 * expf(m2 - top);
    m = top;
}

__global__ void softmax_online_shfl(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float max_part[kWarps];
    __shared__ float sum_part[kWarps];
    const float* in = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    int t = threadIdx.x, warp = t / 32, lane = t % 32;
    float m = -INFINITY, s = 0.0f;
    for (int c = t; c < cols; c += kThreads) {
        float v = in[c];
        m = fmaxf(m, v);
        s += expf(v - m);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        float m2 = __shfl_xor_sync(0xffffffff, m, offset);
        float s2 = __shfl_xor_sync(0xffffffff, s, offset);
        merge(m, s, m2, s2);
    }
    if (lane == 0) {
        max_part[warp] = m;
        sum_part[warp] = s;
    }
    __syncthreads();
    m = lane < kWarps ? max_part[lane] : -INFINITY;
    s = lane < kWarps ? sum_part[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) {
        float m2 = __shfl_xor_sync(0xffffffff, m, offset);
        float s2 = __shfl_xor_sync(0xffffffff, s, offset);
        merge(m, s, m2, s2);
    }
    float inv = 1.0f / s;
    for (int c = t; c < cols; c += kThreads) out[c] = expf(in[c] - m) * inv;
}

extern "C" void softmax(const float* x, float* y, int batch_size, int dim, cudaStream_t stream) {
    softmax_online_shfl<<<batch_size, kThreads, 0, stream>>>(x, y, dim);
}
