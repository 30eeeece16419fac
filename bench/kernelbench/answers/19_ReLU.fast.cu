// ReLU, y = max(x, 0): the matrix as one flat array, four elements per thread and step as one
// float4 (coalesced 16-byte accesses), in a grid-stride loop; the elements past the last full
// float4 are done one by one.
#include <cuda_runtime.h>

__device__ __forceinline__ float relu1(float v) { return v > 0.0f ? v : 0.0f; }

__global__ void relu_kernel(const float* x, float* y, int rows, int cols) {
    size_t n = (size_t)rows * cols;
    size_t vectors = n / 4;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (size_t i = first; i < vectors; i += stride) {
        float4 v = x4[i];
        v.x = relu1(v.x);
        v.y = relu1(v.y);
        v.z = relu1(v.z);
        v.w = relu1(v.w);
        y4[i] = v;
    }
    for (size_t i = vectors * 4 + first; i < n; i += stride) y[i] = relu1(x[i]);
}

extern "C" void relu(const float* x, float* y, int batch_size, int dim, cudaStream_t stream) {
    relu_kernel<<<1024, 256, 0, stream>>>(x, y, batch_size, dim);
}
