// Hinge loss, mean(max(1 - p * t, 0)), plain CUDA. p is batch_size x cols (n elements) and the
// targets t (batch_size values) broadcast along p's last dimension, as in PyTorch: element
// (i, j) pairs with t[j]. One block of 256 threads walks all of p, then adds its partial
// sums in shared memory.
#include <cuda_runtime.h>

#define THREADS 256

__global__ void hinge_kernel(const float* p, const float* t, float* out, int n, int cols) {
    __shared__ float partial[THREADS];
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += THREADS) {
        float v = 1.0f - p[i] * t[i % cols];
        sum += v > 0.0f ? v : 0.0f;
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = partial[0] / (float)n;
}

extern "C" void hinge_loss(const float* predictions, const float* targets, float* out, int n,
                           int batch_size, cudaStream_t stream) {
    int cols = n / batch_size;
    hinge_kernel<<<1, THREADS, 0, stream>>>(predictions, targets, out, n, cols);
}
