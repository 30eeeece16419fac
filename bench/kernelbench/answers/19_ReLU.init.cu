// ReLU, y = max(x, 0), over a batch_size x dim matrix, plain CUDA: one thread per row, walking
// its row element by element.
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* x, float* y, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* in = x + (size_t)row * cols;
    float* out = y + (size_t)row * cols;
    for (int c = 0; c < cols; ++c) {
        float v = in[c];
        out[c] = v > 0.0f ? v : 0.0f;
    }
}

extern "C" void relu(const float* x, float* y, int batch_size, int dim, cudaStream_t stream) {
    relu_kernel<<<(batch_size + 127) / 128, 128, 0, stream>>>(x, y, batch_size, dim);
}
