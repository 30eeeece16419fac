// fast_math_intrinsics from naive: __expf and __fdividef. For |x| < 80 both are within a few
// ulp (no overflow of the denominator), far inside the fp32 tolerance; the kernel is
// bandwidth-bound, so the cheaper arithmetic changes little.
#include <cuda_runtime.h>

__global__ void silu_fast(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = __fdividef(v, 1.0f + __expf(-v));
    }
}

extern "C" void silu(const float* x, float* y, int n, cudaStream_t stream) {
    silu_fast<<<(n + 127) / 128, 128, 0, stream>>>(x, y, n);
}
