// A block of 256 threads per row: coalesced passes and 256x the threads; max and sum reduced
// with shared-memory trees.
#include <cuda_runtime.h>

constexpr int kThreads = 256;

__global__ void logsumexp_block(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float partial[kThreads];
    const float* in = x + (size_t)blockIdx.x * cols;
    int t = threadIdx.x;
    float m = -INFINITY;
    for (int c = t; c < cols; c += kThreads) m = fmaxf(m, in[c]);
    partial[t] = m;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
        if (t < stride) partial[t] = fmaxf(partial[t], partial[t + stride]);
        __syncthreads();
    }
    m = partial[0];
    __syncthreads();  // everyone has read the max before partial is reused
    float s = 0.0f;
    for (int c = t; c < cols; c += kThreads) s += expf(in[c] - m);
    partial[t] = s;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
        if (t < stride) partial[t] += partial[t + stride];
        __syncthreads();
    }
    if (t == 0) y[blockIdx.x] = m + logf(partial[0]);
}

extern "C" void logsumexp(const float* x, float* y, int batch_size, int dim,
                          cudaStream_t stream) {
    logsumexp_block<<<batch_size, kThreads, 0, stream>>>(x, y, dim);
}
