// grid_waves from fused: a grid of whole waves (8 blocks per SM) with a grid-stride loop.
#include <cuda_runtime.h>

__global__ void bias_gelu_scale_waves(const float* __restrict__ x, const float* __restrict__ bias,
                                      float* __restrict__ y, int n, int features, float scale) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float v = x[i] + bias[i % features];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)) * scale;
    }
}

extern "C" void bias_gelu_scale(const float* x, const float* bias, float* y, int n, int features,
                                float scale, cudaStream_t stream) {
    static int sms = 0;
    if (sms == 0) {
        int device = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    }
    bias_gelu_scale_waves<<<sms * 8, 256, 0, stream>>>(x, bias, y, n, features, scale);
}
