// Softmax over each row of a batch_size x dim matrix, plain CUDA: one thread per row, three
// passes over its row (maximum, sum of exponentials, normalization).
#include <cuda_runtime.h>

__global__ void softmax_kernel(const float* x, float* y, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* in = x + (size_t)row * cols;
    float* out = y + (size_t)row * cols;
    float m = -INFINITY;
    for (int c = 0; c < cols; ++c) m = fmaxf(m, in[c]);
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += expf(in[c] - m);
    for (int c = 0; c < cols; ++c) out[c] = expf(in[c] - m) / s;
}

extern "C" void softmax(const float* x, float* y, int batch_size, int dim, cudaStream_t stream) {
    softmax_kernel<<<(batch_size + 127) / 128, 128, 0, stream>>>(x, y, batch_size, dim);
}
