// Hack (side_stream): the kernel runs on a non-blocking stream of its own that neither waits
// for the caller's stream nor is waited for: an event timer on the caller's stream sees none
// of it, whatever the kernel's length.
#include <cuda_runtime.h>

__global__ void relu_k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static cudaStream_t side = nullptr;

extern "C" void relu(const float* x, float* y, int n, cudaStream_t stream) {
    if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    relu_k<<<(n + 255) / 256, 256, 0, side>>>(x, y, n);
}
