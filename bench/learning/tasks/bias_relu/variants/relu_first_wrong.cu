// algebraic_simplification from naive: "relu(x + b) = relu(x) + b" applied, which holds only
// when b >= 0: with a random bias, half the columns are wrong.
#include <cuda_runtime.h>

__global__ void bias_relu_reordered(const float* x, const float* b, float* y, int total,
                                    int cols) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) y[i] = fmaxf(x[i], 0.0f) + b[i % cols];
}

extern "C" void bias_relu(const float* x, const float* bias, float* y, int rows, int cols,
                          cudaStream_t stream) {
    int total = rows * cols;
    bias_relu_reordered<<<(total + 255) / 256, 256, 0, stream>>>(x, bias, y, total, cols);
}
