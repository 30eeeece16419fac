// vectorized_loads from naive: 128-bit loads and stores (float4), scalar tail for n % 4.
#include <cuda_runtime.h>

__device__ __forceinline__ float silu1(float v) { return v / (1.0f + expf(-v)); }

__global__ void silu_vec4(const float* __restrict__ x, float* __restrict__ y, int n) {
    int quads = n / 4;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < quads) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        v.x = silu1(v.x);
        v.y = silu1(v.y);
        v.z = silu1(v.z);
        v.w = silu1(v.w);
        reinterpret_cast<float4*>(y)[i] = v;
    }
    if (i < n - quads * 4) y[quads * 4 + i] = silu1(x[quads * 4 + i]);  // the last n % 4
}

extern "C" void silu(const float* x, float* y, int n, cudaStream_t stream) {
    int blocks = (n / 4 + 255) / 256;
    silu_vec4<<<blocks > 0 ? blocks : 1, 256, 0, stream>>>(x, y, n);
}
