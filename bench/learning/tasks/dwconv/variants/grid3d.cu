// index_strength_reduction from naive: a 3-D grid (x: columns, y: rows, z: image x channel)
// replaces the divisions and modulos of the flat index.
#include <cuda_runtime.h>

__global__ void dwconv_grid3d(const float* __restrict__ x, const float* __restrict__ weight,
                              float* __restrict__ y, int channels, int height, int width) {
    int w = blockIdx.x * blockDim.x + threadIdx.x;
    int h = blockIdx.y * blockDim.y + threadIdx.y;
    int plane_index = blockIdx.z;  // n * channels + c
    if (w >= width || h >= height) return;
    int c = plane_index % channels;
    const float* plane = x + (size_t)plane_index * height * width;
    float acc = 0.0f;
#pragma unroll
    for (int dy = -1; dy <= 1; ++dy) {
#pragma unroll
        for (int dx = -1; dx <= 1; ++dx) {
            int hh = h + dy, ww = w + dx;
            if (hh >= 0 && hh < height && ww >= 0 && ww < width)
                acc += plane[hh * width + ww] * weight[c * 9 + (dy + 1) * 3 + (dx + 1)];
        }
    }
    y[(size_t)plane_index * height * width + h * width + w] = acc;
}

extern "C" void dwconv(const float* x, const float* weight, float* y, int batch_size, int channels,
                       int height, int width, cudaStream_t stream) {
    dim3 block(32, 8);
    dim3 grid((width + 31) / 32, (height + 7) / 8, batch_size * channels);
    dwconv_grid3d<<<grid, block, 0, stream>>>(x, weight, y, channels, height, width);
}
