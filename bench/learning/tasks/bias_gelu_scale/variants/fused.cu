// kernel_fusion from naive: one kernel reads x once and writes y once; the intermediate stays
// in a register.
#include <cuda_runtime.h>

__global__ void bias_gelu_scale_fused(const float* __restrict__ x, const float* __restrict__ bias,
                                      float* __restrict__ y, int n, int features, float scale) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i] + bias[i % features];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)) * scale;
    }
}

extern "C" void bias_gelu_scale(const float* x, const float* bias, float* y, int n, int features,
                                float scale, cudaStream_t stream) {
    bias_gelu_scale_fused<<<(n + 255) / 256, 256, 0, stream>>>(x, bias, y, n, features, scale);
}
