// shared_memory_tiling from grid3d: each 32x8 block stages its (8+2) x (32+2) input tile with
// the halo in shared memory once, and the nine taps read shared memory.
#include <cuda_runtime.h>

constexpr int kTW = 32, kTH = 8;

__global__ void dwconv_smem(const float* __restrict__ x, const float* __restrict__ weight,
                            float* __restrict__ y, int channels, int height, int width) {
    __shared__ float tile[kTH + 2][kTW + 2];
    int plane_index = blockIdx.z;
    int c = plane_index % channels;
    const float* plane = x + (size_t)plane_index * height * width;
    int w0 = blockIdx.x * kTW - 1, h0 = blockIdx.y * kTH - 1;  // tile origin, halo included
    for (int i = threadIdx.y * kTW + threadIdx.x; i < (kTH + 2) * (kTW + 2); i += kTW * kTH) {
        int ty = i / (kTW + 2), tx = i % (kTW + 2);
        int hh = h0 + ty, ww = w0 + tx;
        tile[ty][tx] = (hh >= 0 && hh < height && ww >= 0 && ww < width) ? plane[hh * width + ww] : 0.0f;
    }
    __syncthreads();
    int w = blockIdx.x * kTW + threadIdx.x, h = blockIdx.y * kTH + threadIdx.y;
    if (w >= width || h >= height) return;
    float acc = 0.0f;
#pragma unroll
    for (int dy = 0; dy < 3; ++dy)
#pragma unroll
        for (int dx = 0; dx < 3; ++dx)
            acc += tile[threadIdx.y + dy][threadIdx.x + dx] * weight[c * 9 + dy * 3 + dx];
    y[(size_t)plane_index * height * width + h * width + w] = acc;
}

extern "C" void dwconv(const float* x, const float* weight, float* y, int batch_size, int channels,
                       int height, int width, cudaStream_t stream) {
    dim3 grid((width + kTW - 1) / kTW, (height + kTH - 1) / kTH, batch_size * channels);
    dwconv_smem<<<grid, dim3(kTW, kTH), 0, stream>>>(x, weight, y, channels, height, width);
}
