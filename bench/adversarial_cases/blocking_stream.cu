// Honest: a stream created without cudaStreamNonBlocking. Such a stream synchronizes with the
// legacy default stream (the caller's stream here) both ways, so nothing escapes.
#include <cuda_runtime.h>

__global__ void relu_k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static cudaStream_t side = nullptr;

extern "C" void relu(const float* x, float* y, int n, cudaStream_t stream) {
    if (!side) cudaStreamCreate(&side);
    relu_k<<<(n + 255) / 256, 256, 0, side>>>(x, y, n);
}
