// index_strength_reduction from naive: a 3-D grid (x: output columns, y: output rows, z: image
// x channel) replaces the divisions and modulos of the flat index.
#include <cuda_runtime.h>

__global__ void maxpool_grid3d(const float* __restrict__ x, float* __restrict__ y, int height,
                               int width) {
    int out_w = width / 2, out_h = height / 2;
    int w = blockIdx.x * blockDim.x + threadIdx.x;
    int h = blockIdx.y * blockDim.y + threadIdx.y;
    if (w >= out_w || h >= out_h) return;
    const float* top = x + (size_t)blockIdx.z * height * width + (size_t)(2 * h) * width + 2 * w;
    y[(size_t)blockIdx.z * out_h * out_w + (size_t)h * out_w + w] =
        fmaxf(fmaxf(top[0], top[1]), fmaxf(top[width], top[width + 1]));
}

extern "C" void maxpool2x2(const float* x, float* y, int batch_size, int channels, int height,
                           int width, cudaStream_t stream) {
    dim3 grid((width / 2 + 31) / 32, (height / 2 + 7) / 8, batch_size * channels);
    maxpool_grid3d<<<grid, dim3(32, 8), 0, stream>>>(x, y, height, width);
}
