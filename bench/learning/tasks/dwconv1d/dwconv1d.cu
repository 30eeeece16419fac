// Depthwise 1-D convolution, kernel 7, zero padding 3. Naive: a flat thread index decoded into
// (row, position) with 64-bit divisions and modulos, seven bounds-checked loads per output and
// the channel's weights re-read from global memory by every thread.
#include <cuda_runtime.h>

__global__ void dwconv1d_naive(const float* x, const float* weight, float* y, long long total,
                               int channels, int length) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return;
    int l = idx % length;
    long long row = idx / length;  // n * channels + c
    int c = row % channels;
    const float* in = x + row * length;
    float acc = 0.0f;
    for (int k = 0; k < 7; ++k) {
        int p = l + k - 3;
        if (p >= 0 && p < length) acc += in[p] * weight[c * 7 + k];
    }
    y[idx] = acc;
}

extern "C" void dwconv1d(const float* x, const float* weight, float* y, int batch_size,
                         int channels, int length, cudaStream_t stream) {
    long long total = (long long)batch_size * channels * length;
    dwconv1d_naive<<<(unsigned)((total + 255) / 256), 256, 0, stream>>>(x, weight, y, total,
                                                                        channels, length);
}
