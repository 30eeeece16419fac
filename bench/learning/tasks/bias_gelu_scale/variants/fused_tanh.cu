// fast_math_intrinsics from fused: the tanh approximation of GELU with the hardware tanh
// (__tanhf). Wrong for this reference: it differs from the exact (erf) GELU by up to 5e-4
// before scaling, beyond the fp32 tolerance.
#include <cuda_runtime.h>

__global__ void bias_gelu_scale_tanh(const float* __restrict__ x, const float* __restrict__ bias,
                                     float* __restrict__ y, int n, int features, float scale) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i] + bias[i % features];
        float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        y[i] = 0.5f * v * (1.0f + __tanhf(inner)) * scale;
    }
}

extern "C" void bias_gelu_scale(const float* x, const float* bias, float* y, int n, int features,
                                float scale, cudaStream_t stream) {
    bias_gelu_scale_tanh<<<(n + 255) / 256, 256, 0, stream>>>(x, bias, y, n, features, scale);
}
