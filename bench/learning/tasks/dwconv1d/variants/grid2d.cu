// index_strength_reduction from naive: a 2-D grid (x: position, y: image x channel) replaces
// the divisions and modulos; the 7 weights are loaded once per thread.
#include <cuda_runtime.h>

__global__ void dwconv1d_grid2d(const float* __restrict__ x, const float* __restrict__ weight,
                                float* __restrict__ y, int channels, int length) {
    int l = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y;
    if (l >= length) return;
    const float* in = x + (size_t)row * length;
    const float* w = weight + (row % channels) * 7;
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < 7; ++k) {
        int p = l + k - 3;
        if (p >= 0 && p < length) acc += in[p] * w[k];
    }
    y[(size_t)row * length + l] = acc;
}

extern "C" void dwconv1d(const float* x, const float* weight, float* y, int batch_size,
                         int channels, int length, cudaStream_t stream) {
    dim3 grid((length + 255) / 256, batch_size * channels);
    dwconv1d_grid2d<<<grid, 256, 0, stream>>>(x, weight, y, channels, length);
}
