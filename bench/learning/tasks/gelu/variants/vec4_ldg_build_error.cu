// read_only_cache from vec4: loads through the read-only path with __ldg. Does not compile: the
// input pointer is converted to `const float4*` implicitly, which C++ does not allow.
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu_exact(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__global__ void gelu_vec4_ldg(const float* __restrict__ x, float* __restrict__ y, int n) {
    const float4* __restrict__ x4 = x;
    int quads = n / 4;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < quads) {
        float4 v = __ldg(&x4[i]);
        v.x = gelu_exact(v.x);
        v.y = gelu_exact(v.y);
        v.z = gelu_exact(v.z);
        v.w = gelu_exact(v.w);
        reinterpret_cast<float4*>(y)[i] = v;
    }
    if (i < n - quads * 4) y[quads * 4 + i] = gelu_exact(__ldg(&x[quads * 4 + i]));
}

extern "C" void gelu(const float* x, float* y, int n, cudaStream_t stream) {
    int quads = n / 4;
    gelu_vec4_ldg<<<(quads + 255) / 256, 256, 0, stream>>>(x, y, n);
}
