// Honest: ReLU(x - 6). Passes, with a weak_reference warning (the reference is all zeros on
// get_inputs()) and a check on inputs scaled by 8. The twin of weak_zeros.cu.
#include <cuda_runtime.h>

__global__ void relu_shifted_k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i] - 6.0f, 0.0f);
}

extern "C" void relu_shifted(const float* x, float* y, int n, cudaStream_t stream) {
    relu_shifted_k<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
}
