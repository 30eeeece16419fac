// coalesce_global_access from naive: a block of 256 threads per row; each pass reads the row
// with consecutive threads on consecutive floats, and shared-memory trees reduce max and sum.
#include <cuda_runtime.h>

constexpr int kThreads = 256;

__global__ void softmax_block(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float scratch[kThreads];
    const float* in = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    int t = threadIdx.x;

    float m = -INFINITY;
    for (int c = t; c < cols; c += kThreads) m = fmaxf(m, in[c]);
    scratch[t] = m;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
        if (t < stride) scratch[t] = fmaxf(scratch[t], scratch[t + stride]);
        __syncthreads();
    }
    m = scratch[0];
    __syncthreads();  // everyone has read the max before scratch is reused

    float s = 0.0f;
    for (int c = t; c < cols; c += kThreads) s += expf(in[c] - m);
    scratch[t] = s;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
        if (t < stride) scratch[t] += scratch[t + stride];
        __syncthreads();
    }
    float inv = 1.0f / scratch[0];

    for (int c = t; c < cols; c += kThreads) out[c] = expf(in[c] - m) * inv;
}

extern "C" void softmax(const float* x, float* y, int batch_size, int dim, cudaStream_t stream) {
    softmax_block<<<batch_size, kThreads, 0, stream>>>(x, y, dim);
}
