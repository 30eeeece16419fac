// coalesce_global_access from naive: a block of 256 threads per row; each thread sums a
// strided part of the row (coalesced), then a shared-memory tree. Only 96 blocks: on
// 132 SMs that is one or two blocks (8-16 warps) per SM, too few loads in flight to stream
// at full bandwidth.
#include <cuda_runtime.h>

constexpr int kThreads = 256;

__global__ void row_abssum_long_block(const float* __restrict__ x, float* __restrict__ out, int cols) {
    __shared__ float partial[kThreads];
    const float* in = x + (size_t)blockIdx.x * cols;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kThreads) {
        float v = in[c];
        acc += fabsf(v);
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

extern "C" void row_abssum_long(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    row_abssum_long_block<<<rows, kThreads, 0, stream>>>(x, out, cols);
}
