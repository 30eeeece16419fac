// Depthwise 3x3 convolution, zero padding 1, NCHW. Naive: a flat thread index decoded into
// (n, c, h, w) with divisions and modulos, nine bounds-checked global loads per output and the
// channel's nine weights re-read from global memory by every thread.
#include <cuda_runtime.h>

__global__ void dwconv_naive(const float* x, const float* weight, float* y, int batch, int channels,
                             int height, int width) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long total = (long long)batch * channels * height * width;
    if (idx >= total) return;
    int w = idx % width;
    int h = (idx / width) % height;
    int c = (idx / ((long long)width * height)) % channels;
    const float* plane = x + (idx / ((long long)width * height)) * height * width;
    float acc = 0.0f;
    for (int dy = -1; dy <= 1; ++dy) {
        for (int dx = -1; dx <= 1; ++dx) {
            int hh = h + dy, ww = w + dx;
            if (hh >= 0 && hh < height && ww >= 0 && ww < width)
                acc += plane[hh * width + ww] * weight[c * 9 + (dy + 1) * 3 + (dx + 1)];
        }
    }
    y[idx] = acc;
}

extern "C" void dwconv(const float* x, const float* weight, float* y, int batch_size, int channels,
                       int height, int width, cudaStream_t stream) {
    long long total = (long long)batch_size * channels * height * width;
    dwconv_naive<<<(unsigned)((total + 255) / 256), 256, 0, stream>>>(x, weight, y, batch_size,
                                                                      channels, height, width);
}
