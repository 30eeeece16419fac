// vectorized_loads from vec2: two outputs per thread from float4 reads of both input rows and
// one float2 store (out_w is even here: width % 4 == 0; else the float2 kernel runs).
#include <cuda_runtime.h>

__global__ void maxpool_vec4(const float* __restrict__ x, float* __restrict__ y, int height,
                             int width) {
    int out_w = width / 2, out_h = height / 2;
    int q = blockIdx.x * blockDim.x + threadIdx.x;  // output pair q: columns 2q, 2q + 1
    int h = blockIdx.y * blockDim.y + threadIdx.y;
    if (2 * q >= out_w || h >= out_h) return;
    const float4* rows = reinterpret_cast<const float4*>(x + (size_t)blockIdx.z * height * width);
    int quads = width / 4;
    float4 a = rows[(size_t)(2 * h) * quads + q];
    float4 b = rows[(size_t)(2 * h + 1) * quads + q];
    float2 out = make_float2(fmaxf(fmaxf(a.x, a.y), fmaxf(b.x, b.y)),
                             fmaxf(fmaxf(a.z, a.w), fmaxf(b.z, b.w)));
    reinterpret_cast<float2*>(y + (size_t)blockIdx.z * out_h * out_w)[(size_t)h * (out_w / 2) + q] = out;
}

__global__ void maxpool_vec2(const float* __restrict__ x, float* __restrict__ y, int height,
                             int width) {
    int out_w = width / 2, out_h = height / 2;
    int w = blockIdx.x * blockDim.x + threadIdx.x;
    int h = blockIdx.y * blockDim.y + threadIdx.y;
    if (w >= out_w || h >= out_h) return;
    const float2* rows = reinterpret_cast<const float2*>(x + (size_t)blockIdx.z * height * width);
    float2 a = rows[(size_t)(2 * h) * out_w + w];
    float2 b = rows[(size_t)(2 * h + 1) * out_w + w];
    y[(size_t)blockIdx.z * out_h * out_w + (size_t)h * out_w + w] =
        fmaxf(fmaxf(a.x, a.y), fmaxf(b.x, b.y));
}

extern "C" void maxpool2x2(const float* x, float* y, int batch_size, int channels, int height,
                           int width, cudaStream_t stream) {
    if (width % 4 == 0) {
        dim3 grid((width / 4 + 31) / 32, (height / 2 + 7) / 8, batch_size * channels);
        maxpool_vec4<<<grid, dim3(32, 8), 0, stream>>>(x, y, height, width);
    } else {
        dim3 grid((width / 2 + 31) / 32, (height / 2 + 7) / 8, batch_size * channels);
        maxpool_vec2<<<grid, dim3(32, 8), 0, stream>>>(x, y, height, width);
    }
}
