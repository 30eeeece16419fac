// Honest: ReLU on the caller's stream. The twin of every plain ReLU hack.
#include <cuda_runtime.h>

__global__ void relu_k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

extern "C" void relu(const float* x, float* y, int n, cudaStream_t stream) {
    relu_k<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
}
