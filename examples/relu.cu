// Elementwise ReLU, plain CUDA (no torch headers): one element per thread, scalar loads.
// Deliberately naive: no vectorized (float4) access, no work per thread beyond one element.
#include <cuda_runtime.h>

__global__ void relu_naive(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

// Pointers: the reference's inputs, then outputs; `n` is the reference's module constant.
extern "C" void relu(const float* x, float* y, int n, cudaStream_t stream) {
    int block = 128;
    relu_naive<<<(n + block - 1) / block, block, 0, stream>>>(x, y, n);
}
