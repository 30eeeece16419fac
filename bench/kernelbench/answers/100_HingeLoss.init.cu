// Hinge loss, mean(max(1 - p * t, 0)), plain CUDA. p is batch_size x cols (n elements) and the
// targets t (batch_size values) broadcast along p's last dimension, as in PyTorch: element
// (i, j) pairs with t[j]. One thread per row of p walks its row and adds the row's share of
// the mean into the output (zeroed first, on the same stream) with an atomic add.
#include <cuda_runtime.h>

__global__ void hinge_kernel(const float* p, const float* t, float* out, int n, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n / cols) return;
    const float* values = p + (size_t)row * cols;
    float sum = 0.0f;
    for (int j = 0; j < cols; ++j) {
        float v = 1.0f - values[j] * t[j];
        sum += v > 0.0f ? v : 0.0f;
    }
    atomicAdd(out, sum / (float)n);
}

extern "C" void hinge_loss(const float* predictions, const float* targets, float* out, int n,
                           int batch_size, cudaStream_t stream) {
    int cols = n / batch_size;
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    hinge_kernel<<<(batch_size + 127) / 128, 128, 0, stream>>>(predictions, targets, out, n,
                                                                cols);
}
