// Exact GELU on fp16, computed in fp32. Naive: one 2-byte element per thread, 128 threads.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

__global__ void gelu_half_naive(const __half* x, __half* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = __half2float(x[i]);
        y[i] = __float2half(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
    }
}

extern "C" void gelu_half(const __half* x, __half* y, int n, cudaStream_t stream) {
    gelu_half_naive<<<(n + 127) / 128, 128, 0, stream>>>(x, y, n);
}
