// Exact GELU, elementwise. Naive: one element per thread, scalar 4-byte accesses, 128 threads.
#include <cuda_runtime.h>

__global__ void gelu_naive(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

extern "C" void gelu(const float* x, float* y, int n, cudaStream_t stream) {
    gelu_naive<<<(n + 127) / 128, 128, 0, stream>>>(x, y, n);
}
