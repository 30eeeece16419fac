// vectorized_loads from fused (or kernel_fusion from naive_vec4): one fused pass with float4
// accesses; features is a multiple of 4 here (checked), so a quad never straddles a row.
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu_scaled(float v, float scale) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)) * scale;
}

__global__ void bias_gelu_scale_vec4(const float* __restrict__ x, const float* __restrict__ bias,
                                     float* __restrict__ y, int n, int features, float scale) {
    int q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= n / 4) return;
    float4 v = reinterpret_cast<const float4*>(x)[q];
    float4 b = reinterpret_cast<const float4*>(bias)[q % (features / 4)];
    v.x = gelu_scaled(v.x + b.x, scale);
    v.y = gelu_scaled(v.y + b.y, scale);
    v.z = gelu_scaled(v.z + b.z, scale);
    v.w = gelu_scaled(v.w + b.w, scale);
    reinterpret_cast<float4*>(y)[q] = v;
}

__global__ void bias_gelu_scale_scalar(const float* __restrict__ x, const float* __restrict__ bias,
                                       float* __restrict__ y, int n, int features, float scale) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = gelu_scaled(x[i] + bias[i % features], scale);
}

extern "C" void bias_gelu_scale(const float* x, const float* bias, float* y, int n, int features,
                                float scale, cudaStream_t stream) {
    if (features % 4 == 0) {
        bias_gelu_scale_vec4<<<(n / 4 + 255) / 256, 256, 0, stream>>>(x, bias, y, n, features, scale);
    } else {
        bias_gelu_scale_scalar<<<(n + 255) / 256, 256, 0, stream>>>(x, bias, y, n, features, scale);
    }
}
