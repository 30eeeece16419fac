// vectorized_loads from naive: 128-bit loads and stores (float4), scalar tail for n % 4.
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu_exact(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__global__ void gelu_vec4(const float* __restrict__ x, float* __restrict__ y, int n) {
    int quads = n / 4;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < quads) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        v.x = gelu_exact(v.x);
        v.y = gelu_exact(v.y);
        v.z = gelu_exact(v.z);
        v.w = gelu_exact(v.w);
        reinterpret_cast<float4*>(y)[i] = v;
    }
    int tail = quads * 4 + i;  // the last n % 4 elements, one per thread of the first threads
    if (i < n - quads * 4) y[tail] = gelu_exact(x[tail]);
}

extern "C" void gelu(const float* x, float* y, int n, cudaStream_t stream) {
    int quads = n / 4;
    int blocks = (quads + 255) / 256;
    gelu_vec4<<<blocks > 0 ? blocks : 1, 256, 0, stream>>>(x, y, n);
}
