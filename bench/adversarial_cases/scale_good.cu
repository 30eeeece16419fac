// Honest: y = 2x with its own kernel. The twin of calls_cublas.cu.
#include <cuda_runtime.h>

__global__ void scale_k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}

extern "C" void scale(const float* x, float* y, int n, cudaStream_t stream) {
    scale_k<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
}
