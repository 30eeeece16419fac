// vectorized_loads from grid3d: each thread's two input pairs read as two float2 (8-byte
// aligned: 2 * w is even and the width is even).
#include <cuda_runtime.h>

__global__ void maxpool_vec2(const float* __restrict__ x, float* __restrict__ y, int height,
                             int width) {
    int out_w = width / 2, out_h = height / 2;
    int w = blockIdx.x * blockDim.x + threadIdx.x;
    int h = blockIdx.y * blockDim.y + threadIdx.y;
    if (w >= out_w || h >= out_h) return;
    const float2* rows = reinterpret_cast<const float2*>(x + (size_t)blockIdx.z * height * width);
    float2 a = rows[(size_t)(2 * h) * out_w + w];      // a row holds out_w float2
    float2 b = rows[(size_t)(2 * h + 1) * out_w + w];
    y[(size_t)blockIdx.z * out_h * out_w + (size_t)h * out_w + w] =
        fmaxf(fmaxf(a.x, a.y), fmaxf(b.x, b.y));
}

extern "C" void maxpool2x2(const float* x, float* y, int batch_size, int channels, int height,
                           int width, cudaStream_t stream) {
    dim3 grid((width / 2 + 31) / 32, (height / 2 + 7) / 8, batch_size * channels);
    maxpool_vec2<<<grid, dim3(32, 8), 0, stream>>>(x, y, height, width);
}
