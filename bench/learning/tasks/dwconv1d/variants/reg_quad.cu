// register_tiling from grid2d: 4 consecutive outputs per thread from three float4 loads (the
// quad before, its own, the quad after) held in registers: 3 loads for 4 outputs instead of
// 28. Needs length % 4 == 0 (16384 here), so a quad is entirely inside or outside the row.
#include <cuda_runtime.h>

__global__ void dwconv1d_reg_quad(const float* __restrict__ x, const float* __restrict__ weight,
                                  float* __restrict__ y, int channels, int length) {
    int q = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y;
    int quads = length / 4;
    if (q >= quads) return;
    const float4* in = reinterpret_cast<const float4*>(x + (size_t)row * length);
    const float* w = weight + (row % channels) * 7;
    float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float4 prev = q > 0 ? in[q - 1] : zero, mid = in[q], next = q + 1 < quads ? in[q + 1] : zero;
    // v[j] = x[4q - 4 + j] for j = 0..11; output 4q + i needs x[4q + i - 3 + k] = v[i + 1 + k].
    float v[12] = {prev.x, prev.y, prev.z, prev.w, mid.x, mid.y, mid.z, mid.w,
                   next.x, next.y, next.z, next.w};
    float out[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < 7; ++k) acc += v[i + 1 + k] * w[k];
        out[i] = acc;
    }
    reinterpret_cast<float4*>(y + (size_t)row * length)[q] = make_float4(out[0], out[1], out[2], out[3]);
}

extern "C" void dwconv1d(const float* x, const float* weight, float* y, int batch_size,
                         int channels, int length, cudaStream_t stream) {
    dim3 grid((length / 4 + 255) / 256, batch_size * channels);
    dwconv1d_reg_quad<<<grid, 256, 0, stream>>>(x, weight, y, channels, length);
}
