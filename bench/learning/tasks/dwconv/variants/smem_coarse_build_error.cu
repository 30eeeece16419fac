// thread_coarsening from smem_tile: each thread computes two rows of the tile. Does not
// compile: the tile height is derived from blockDim, which is not a compile-time constant, so
// it can't size the __shared__ array.
#include <cuda_runtime.h>

constexpr int kTW = 32;

__global__ void dwconv_smem_coarse(const float* __restrict__ x, const float* __restrict__ weight,
                                   float* __restrict__ y, int channels, int height, int width) {
    constexpr int kTH = 2 * blockDim.y;
    __shared__ float tile[kTH + 2][kTW + 2];
    int plane_index = blockIdx.z;
    int c = plane_index % channels;
    const float* plane = x + (size_t)plane_index * height * width;
    int w0 = blockIdx.x * kTW - 1, h0 = blockIdx.y * kTH - 1;
    for (int i = threadIdx.y * kTW + threadIdx.x; i < (kTH + 2) * (kTW + 2); i += kTW * blockDim.y) {
        int ty = i / (kTW + 2), tx = i % (kTW + 2);
        int hh = h0 + ty, ww = w0 + tx;
        tile[ty][tx] = (hh >= 0 && hh < height && ww >= 0 && ww < width) ? plane[hh * width + ww] : 0.0f;
    }
    __syncthreads();
    int w = blockIdx.x * kTW + threadIdx.x;
    for (int r = 0; r < 2; ++r) {
        int ty = threadIdx.y * 2 + r, h = blockIdx.y * kTH + ty;
        if (w >= width || h >= height) continue;
        float acc = 0.0f;
        for (int dy = 0; dy < 3; ++dy)
            for (int dx = 0; dx < 3; ++dx) acc += tile[ty + dy][threadIdx.x + dx] * weight[c * 9 + dy * 3 + dx];
        y[(size_t)plane_index * height * width + h * width + w] = acc;
    }
}

extern "C" void dwconv(const float* x, const float* weight, float* y, int batch_size, int channels,
                       int height, int width, cudaStream_t stream) {
    dim3 grid((width + kTW - 1) / kTW, (height + 15) / 16, batch_size * channels);
    dwconv_smem_coarse<<<grid, dim3(kTW, 8), 0, stream>>>(x, weight, y, channels, height, width);
}
