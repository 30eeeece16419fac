// vectorized_loads from coarse4: four consecutive elements per thread as one float4. Wrong:
// the n % 4 elements past the last whole quad are never written (n = 2^25 + 3).
#include <cuda_runtime.h>

__global__ void gelu_coarse_vec4(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n / 4) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        v.x = 0.5f * v.x * (1.0f + erff(v.x * 0.70710678118654752f));
        v.y = 0.5f * v.y * (1.0f + erff(v.y * 0.70710678118654752f));
        v.z = 0.5f * v.z * (1.0f + erff(v.z * 0.70710678118654752f));
        v.w = 0.5f * v.w * (1.0f + erff(v.w * 0.70710678118654752f));
        reinterpret_cast<float4*>(y)[i] = v;
    }
}

extern "C" void gelu(const float* x, float* y, int n, cudaStream_t stream) {
    gelu_coarse_vec4<<<(n / 4 + 255) / 256, 256, 0, stream>>>(x, y, n);
}
