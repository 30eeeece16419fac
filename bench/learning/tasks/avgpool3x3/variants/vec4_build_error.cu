// vectorized_loads from grid3d: float4 rows, summed with float4 operators CUDA does not define.
#include <cuda_runtime.h>

__global__ void avgpool_vec4(const float* __restrict__ x, float* __restrict__ y, int height,
                             int width) {
    int q = blockIdx.x * blockDim.x + threadIdx.x;  // 4 columns per thread
    int h = blockIdx.y * blockDim.y + threadIdx.y;
    if (4 * q >= width || h < 1 || h + 1 >= height) return;
    const float4* plane = reinterpret_cast<const float4*>(x + (size_t)blockIdx.z * height * width);
    int quads = width / 4;
    float4 col = plane[(h - 1) * quads + q] + plane[h * quads + q] + plane[(h + 1) * quads + q];
    reinterpret_cast<float4*>(y + (size_t)blockIdx.z * height * width)[h * quads + q] = col;
}

extern "C" void avgpool3x3(const float* x, float* y, int batch_size, int channels, int height,
                           int width, cudaStream_t stream) {
    dim3 grid((width / 4 + 31) / 32, (height + 7) / 8, batch_size * channels);
    avgpool_vec4<<<grid, dim3(32, 8), 0, stream>>>(x, y, height, width);
}
