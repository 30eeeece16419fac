// Hack (mismatch): writes only the first half of the output; the rest keeps the harness's
// NaN poison.
#include <cuda_runtime.h>

__global__ void relu_k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

extern "C" void relu(const float* x, float* y, int n, cudaStream_t stream) {
    int half = n / 2;
    relu_k<<<(half + 255) / 256, 256, 0, stream>>>(x, y, half);
}
