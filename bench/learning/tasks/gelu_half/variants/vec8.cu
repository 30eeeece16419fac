// vectorized_loads from half2: eight values per 16-byte access (uint4 reinterpreted as four
// __half2), the last n % 8 values one per thread.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu1(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__global__ void gelu_vec8(const __half* __restrict__ x, __half* __restrict__ y, int n) {
    int octs = n / 8;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < octs) {
        uint4 raw = reinterpret_cast<const uint4*>(x)[i];
        __half2* h = reinterpret_cast<__half2*>(&raw);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            float2 v = __half22float2(h[j]);
            h[j] = __floats2half2_rn(gelu1(v.x), gelu1(v.y));
        }
        reinterpret_cast<uint4*>(y)[i] = raw;
    }
    int tail = octs * 8 + i;
    if (i < n - octs * 8) y[tail] = __float2half(gelu1(__half2float(x[tail])));
}

extern "C" void gelu_half(const __half* x, __half* y, int n, cudaStream_t stream) {
    int blocks = (n / 8 + 255) / 256;
    gelu_vec8<<<blocks > 0 ? blocks : 1, 256, 0, stream>>>(x, y, n);
}
