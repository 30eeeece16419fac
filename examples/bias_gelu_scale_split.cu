// bias_gelu_scale.cu's kernels, as the kernels file of a two-file PyTorch extension: no torch
// headers here, so an edit rebuilds in about a second; the torch side (forward, PYBIND11_MODULE)
// is in bias_gelu_scale_split.cpp, compiled once and reused from the build cache.
#include <cuda_runtime.h>

__global__ void add_bias(const float* x, const float* bias, float* y, int n, int features) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + bias[i % features];
}

__global__ void gelu_inplace(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = y[i];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

__global__ void scale_inplace(float* y, float scale, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] *= scale;
}

// Called by forward() in bias_gelu_scale_split.cpp, which declares it the same way.
void bias_gelu_scale(const float* x, const float* bias, float* y, int n, int features) {
    int block = 256, grid = (n + block - 1) / block;
    add_bias<<<grid, block>>>(x, bias, y, n, features);
    gelu_inplace<<<grid, block>>>(y, n);
    scale_inplace<<<grid, block>>>(y, 0.5f, n);
}
