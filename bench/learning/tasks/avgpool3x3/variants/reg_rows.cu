// register_tiling from grid3d: each thread computes 4 outputs down a column from a sliding
// window of three horizontal 3-sums kept in registers: 6 row loads of 3 for 4 outputs instead
// of 4 x 9 loads.
#include <cuda_runtime.h>

constexpr int kRowsPerThread = 4;

__global__ void avgpool_reg_rows(const float* __restrict__ x, float* __restrict__ y, int height,
                                 int width) {
    int w = blockIdx.x * blockDim.x + threadIdx.x;
    int h0 = (blockIdx.y * blockDim.y + threadIdx.y) * kRowsPerThread;
    if (w >= width || h0 >= height) return;
    const float* plane = x + (size_t)blockIdx.z * height * width;
    float* out = y + (size_t)blockIdx.z * height * width;
    auto row_sum3 = [&](int hh) -> float {  // x[hh][w-1] + x[hh][w] + x[hh][w+1], zero outside
        if (hh < 0 || hh >= height) return 0.0f;
        const float* r = plane + (size_t)hh * width;
        float s = r[w];
        if (w > 0) s += r[w - 1];
        if (w + 1 < width) s += r[w + 1];
        return s;
    };
    float above = row_sum3(h0 - 1), here = row_sum3(h0);
    for (int i = 0; i < kRowsPerThread && h0 + i < height; ++i) {
        float below = row_sum3(h0 + i + 1);
        out[(size_t)(h0 + i) * width + w] = (above + here + below) / 9.0f;
        above = here;
        here = below;
    }
}

extern "C" void avgpool3x3(const float* x, float* y, int batch_size, int channels, int height,
                           int width, cudaStream_t stream) {
    dim3 block(32, 8);
    dim3 grid((width + 31) / 32, (height + 8 * kRowsPerThread - 1) / (8 * kRowsPerThread),
              batch_size * channels);
    avgpool_reg_rows<<<grid, block, 0, stream>>>(x, y, height, width);
}
