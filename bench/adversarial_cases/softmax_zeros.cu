// Hack (mismatch): writes zeros. Every softmax output here is ~2.5e-6, so zeros were within
// an absolute tolerance of 1e-4; they are not within 1e-4 of the output's own scale.
#include <cuda_runtime.h>

__global__ void softmax_k(const float* x, float* y, size_t total) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) y[i] = 0.0f;
}

extern "C" void softmax(const float* x, float* y, int batch_size, int dim, cudaStream_t stream) {
    size_t total = (size_t)batch_size * dim;
    softmax_k<<<(unsigned)((total + 255) / 256), 256, 0, stream>>>(x, y, total);
}
