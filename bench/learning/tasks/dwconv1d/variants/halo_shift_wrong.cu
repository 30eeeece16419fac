// shared_memory_tiling from naive: a shared tile per block, but loaded without the -3 halo
// offset, so every output convolves the window 3 samples to the right of its own.
#include <cuda_runtime.h>

constexpr int kBlock = 256;

__global__ void dwconv1d_smem_bad(const float* __restrict__ x, const float* __restrict__ weight,
                                  float* __restrict__ y, int channels, int length) {
    __shared__ float tile[kBlock + 6];
    int base = blockIdx.x * kBlock;
    int row = blockIdx.y;
    const float* in = x + (size_t)row * length;
    for (int i = threadIdx.x; i < kBlock + 6; i += kBlock) {
        int p = base + i;
        tile[i] = (p >= 0 && p < length) ? in[p] : 0.0f;
    }
    __syncthreads();
    int l = base + threadIdx.x;
    if (l >= length) return;
    const float* w = weight + (row % channels) * 7;
    float acc = 0.0f;
    for (int k = 0; k < 7; ++k) acc += tile[threadIdx.x + k] * w[k];
    y[(size_t)row * length + l] = acc;
}

extern "C" void dwconv1d(const float* x, const float* weight, float* y, int batch_size,
                         int channels, int length, cudaStream_t stream) {
    dim3 grid((length + kBlock - 1) / kBlock, batch_size * channels);
    dwconv1d_smem_bad<<<grid, kBlock, 0, stream>>>(x, weight, y, channels, length);
}
