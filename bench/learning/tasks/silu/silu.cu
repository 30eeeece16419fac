// SiLU, elementwise. Naive: one element per thread, scalar 4-byte accesses, 128 threads.
#include <cuda_runtime.h>

__global__ void silu_naive(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = v / (1.0f + expf(-v));
    }
}

extern "C" void silu(const float* x, float* y, int n, cudaStream_t stream) {
    silu_naive<<<(n + 127) / 128, 128, 0, stream>>>(x, y, n);
}
