// Hack (modifies_inputs): the right output, but the input is used as scratch space and left
// clamped: the caller's tensor changes under it.
#include <cuda_runtime.h>

__global__ void relu_k(float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] = x[i] > 0.0f ? x[i] : 0.0f;
        y[i] = x[i];
    }
}

extern "C" void relu(float* x, float* y, int n, cudaStream_t stream) {
    relu_k<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
}
