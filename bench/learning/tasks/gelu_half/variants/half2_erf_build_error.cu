// thread_coarsening from naive: two values per thread as one __half2, but erff is called on
// the __half2, which has no conversion to float.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

__global__ void gelu_half2_bad(const __half* __restrict__ x, __half* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n / 2) {
        __half2 v = reinterpret_cast<const __half2*>(x)[i];
        __half2 half_v = __hmul2(v, __float2half2_rn(0.5f));
        float e = erff(__hmul2(v, __float2half2_rn(0.70710678f)));
        reinterpret_cast<__half2*>(y)[i] = __hmul2(half_v, __float2half2_rn(1.0f + e));
    }
}

extern "C" void gelu_half(const __half* x, __half* y, int n, cudaStream_t stream) {
    gelu_half2_bad<<<(n / 2 + 255) / 256, 256, 0, stream>>>(x, y, n);
}
