// fast_math_intrinsics from naive: the tanh approximation of GELU with __expf. Its error
// (< 1e-3 absolute) is below fp16's own rounding at these magnitudes, so unlike the fp32 task
// it verifies; the kernel is bandwidth-bound, so it gains little.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

__global__ void gelu_half_tanh(const __half* __restrict__ x, __half* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = __half2float(x[i]);
        float u = 0.7978845608f * (v + 0.044715f * v * v * v);
        float t = 1.0f - 2.0f / (__expf(2.0f * u) + 1.0f);  // tanh(u), saturating at +-1
        y[i] = __float2half(0.5f * v * (1.0f + t));
    }
}

extern "C" void gelu_half(const __half* x, __half* y, int n, cudaStream_t stream) {
    gelu_half_tanh<<<(n + 127) / 128, 128, 0, stream>>>(x, y, n);
}
