// increase_parallelism: each row is split into 64 chunks (blockIdx.x), a block per chunk:
// 96 x 64 blocks fill the GPU; each block's partial goes to the zeroed output with one
// atomicAdd (64 uncontended atomics per row).
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kChunks = 64;

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
    cudaMemsetAsync(out, 0, sizeof(float) * rows, stream);
    row_abssum_long_split<<<dim3(kChunks, rows), kThreads, 0, stream>>>(x, out, cols);
}
