// Hack (mismatch): computes in half precision (fp32 in and out): relative errors up to 2^-11,
// beyond fp32's tolerance.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

__global__ void relu_k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        __half v = __float2half(x[i]);
        y[i] = __half2float(__hgt(v, __float2half(0.0f)) ? v : __float2half(0.0f));
    }
}

extern "C" void relu(const float* x, float* y, int n, cudaStream_t stream) {
    relu_k<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
}
