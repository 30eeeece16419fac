// register_tiling from grid3d: each thread computes 4 vertically adjacent outputs, sliding a
// 3-row window of its three input columns through registers: 18 loads for 4 outputs instead
// of 36, and the channel's weights held in registers.
#include <cuda_runtime.h>

constexpr int kRowsPerThread = 4;

__global__ void dwconv_reg_rows(const float* __restrict__ x, const float* __restrict__ weight,
                                float* __restrict__ y, int channels, int height, int width) {
    int w = blockIdx.x * blockDim.x + threadIdx.x;
    int h0 = (blockIdx.y * blockDim.y + threadIdx.y) * kRowsPerThread;
    int plane_index = blockIdx.z;
    if (w >= width || h0 >= height) return;
    int c = plane_index % channels;
    const float* plane = x + (size_t)plane_index * height * width;
    float* out = y + (size_t)plane_index * height * width;
    float k[9];
#pragma unroll
    for (int i = 0; i < 9; ++i) k[i] = weight[c * 9 + i];
    auto load_row = [&](int hh, float* r) {
        bool inside = hh >= 0 && hh < height;
        r[0] = (inside && w > 0) ? plane[hh * width + w - 1] : 0.0f;
        r[1] = inside ? plane[hh * width + w] : 0.0f;
        r[2] = (inside && w + 1 < width) ? plane[hh * width + w + 1] : 0.0f;
    };
    float above[3], mid[3], below[3];
    load_row(h0 - 1, above);
    load_row(h0, mid);
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
        int h = h0 + i;
        if (h >= height) break;
        load_row(h + 1, below);
        float acc = 0.0f;
#pragma unroll
        for (int dx = 0; dx < 3; ++dx)
            acc += above[dx] * k[dx] + mid[dx] * k[3 + dx] + below[dx] * k[6 + dx];
        out[h * width + w] = acc;
#pragma unroll
        for (int dx = 0; dx < 3; ++dx) {
            above[dx] = mid[dx];
            mid[dx] = below[dx];
        }
    }
}

extern "C" void dwconv(const float* x, const float* weight, float* y, int batch_size, int channels,
                       int height, int width, cudaStream_t stream) {
    dim3 block(32, 8);
    int rows = (height + kRowsPerThread - 1) / kRowsPerThread;
    dim3 grid((width + 31) / 32, (rows + 7) / 8, batch_size * channels);
    dwconv_reg_rows<<<grid, block, 0, stream>>>(x, weight, y, channels, height, width);
}
