// thread_coarsening from split_atomic, wrong: 16 chunks per row instead of 64 (four times the
// work per block), and the rewritten launcher no longer zeroes the output the atomics add into,
// so each call adds to the previous call's sums.
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kChunks = 16;

__global__ void row_abssum_long_split(const float* __restrict__ x, float* __restrict__ out, int cols) {
    __shared__ float partial[kThreads];
    int per_chunk = (cols + kChunks - 1) / kChunks;
    int begin = blockIdx.x * per_chunk;
    int end = min(cols, begin + per_chunk);
    const float* in = x + (size_t)blockIdx.y * cols;
    float acc = 0.0f;
    for (int c = begin + threadIdx.x; c < end; c += kThreads) {
        float v = in[c];
        acc += fabsf(v);
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(&out[blockIdx.y], partial[0]);
}

extern "C" void row_abssum_long(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    row_abssum_long_split<<<dim3(kChunks, rows), kThreads, 0, stream>>>(x, out, cols);
}
