// fuse_launches from naive: one persistent kernel applies all three steps per element. Does not
// compile: the kernel calls gelu_scaled before anything declares it.
#include <cuda_runtime.h>

__global__ void bias_gelu_scale_persistent(const float* __restrict__ x,
                                           const float* __restrict__ bias, float* __restrict__ y,
                                           int n, int features, float scale) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = gelu_scaled(x[i] + bias[i % features], scale);
}

__device__ __forceinline__ float gelu_scaled(float v, float scale) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)) * scale;
}

extern "C" void bias_gelu_scale(const float* x, const float* bias, float* y, int n, int features,
                                float scale, cudaStream_t stream) {
    bias_gelu_scale_persistent<<<132 * 8, 256, 0, stream>>>(x, bias, y, n, features, scale);
}
