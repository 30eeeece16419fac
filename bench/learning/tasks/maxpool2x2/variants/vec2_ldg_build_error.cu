// read_only_cache from vec2: __ldg of the float2 pairs, but passed the float pointer:
// __ldg(const float*) returns a float, not a float2.
#include <cuda_runtime.h>

__global__ void maxpool_vec2_ldg(const float* __restrict__ x, float* __restrict__ y, int height,
                                 int width) {
    int out_w = width / 2, out_h = height / 2;
    int w = blockIdx.x * blockDim.x + threadIdx.x;
    int h = blockIdx.y * blockDim.y + threadIdx.y;
    if (w >= out_w || h >= out_h) return;
    const float* plane = x + (size_t)blockIdx.z * height * width;
    float2 a = __ldg(plane + (size_t)(2 * h) * width + 2 * w);
    float2 b = __ldg(plane + (size_t)(2 * h + 1) * width + 2 * w);
    y[(size_t)blockIdx.z * out_h * out_w + (size_t)h * out_w + w] =
        fmaxf(fmaxf(a.x, a.y), fmaxf(b.x, b.y));
}

extern "C" void maxpool2x2(const float* x, float* y, int batch_size, int channels, int height,
                           int width, cudaStream_t stream) {
    dim3 grid((width / 2 + 31) / 32, (height / 2 + 7) / 8, batch_size * channels);
    maxpool_vec2_ldg<<<grid, dim3(32, 8), 0, stream>>>(x, y, height, width);
}
