// vectorized_loads from block_row_shfl: float4 loads of x and w and float4 stores (rows start
// 16-byte aligned when dim % 4 == 0; otherwise the scalar loops run).
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

__global__ void rmsnorm_vec4(const float* __restrict__ x, const float* __restrict__ w,
                             float* __restrict__ y, int cols) {
    __shared__ float scratch[kWarps];
    const float* in = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    int t = threadIdx.x, warp = t / 32, lane = t % 32;
    bool vec = cols % 4 == 0;
    int quads = vec ? cols / 4 : 0;
    const float4* in4 = reinterpret_cast<const float4*>(in);
    float ss = 0.0f;
    for (int q = t; q < quads; q += kThreads) {
        float4 v = in4[q];
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    for (int c = quads * 4 + t; c < cols; c += kThreads) ss += in[c] * in[c];
    ss = warp_sum(ss);
    if (lane == 0) scratch[warp] = ss;
    __syncthreads();
    ss = warp_sum(lane < kWarps ? scratch[lane] : 0.0f);
    float inv = rsqrtf(ss / cols + 1e-6f);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    float4* out4 = reinterpret_cast<float4*>(out);
    for (int q = t; q < quads; q += kThreads) {
        float4 v = in4[q], g = w4[q];
        out4[q] = make_float4(v.x * inv * g.x, v.y * inv * g.y, v.z * inv * g.z, v.w * inv * g.w);
    }
    for (int c = quads * 4 + t; c < cols; c += kThreads) out[c] = in[c] * inv * w[c];
}

extern "C" void rmsnorm(const float* x, const float* weight, float* y, int batch_size, int dim,
                        cudaStream_t stream) {
    rmsnorm_vec4<<<batch_size, kThreads, 0, stream>>>(x, weight, y, dim);
}
