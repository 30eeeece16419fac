// vectorized_loads from block_row: float4 accesses. Does not compile: CUDA's float4 has no
// arithmetic operators, and the rewrite adds and subtracts float4 values directly.
#include <cuda_runtime.h>

constexpr int kThreads = 256;

__device__ float block_sum(float v, float* scratch) {
    int t = threadIdx.x;
    scratch[t] = v;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
        if (t < stride) scratch[t] += scratch[t + stride];
        __syncthreads();
    }
    float total = scratch[0];
    __syncthreads();
    return total;
}

__global__ void layernorm_vec4(const float* __restrict__ x, const float* __restrict__ weight,
                               const float* __restrict__ bias, float* __restrict__ y, int cols) {
    __shared__ float scratch[kThreads];
    const float4* in = reinterpret_cast<const float4*>(x + (size_t)blockIdx.x * cols);
    float4* out = reinterpret_cast<float4*>(y + (size_t)blockIdx.x * cols);
    int t = threadIdx.x;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int q = t; q < cols / 4; q += kThreads) acc = acc + in[q];
    float mean = block_sum(acc.x + acc.y + acc.z + acc.w, scratch) / cols;
    float sq = 0.0f;
    for (int q = t; q < cols / 4; q += kThreads) {
        float4 d = in[q] - make_float4(mean, mean, mean, mean);
        sq += d.x * d.x + d.y * d.y + d.z * d.z + d.w * d.w;
    }
    float rstd = rsqrtf(block_sum(sq, scratch) / cols + 1e-5f);
    const float4* w = reinterpret_cast<const float4*>(weight);
    const float4* b = reinterpret_cast<const float4*>(bias);
    for (int q = t; q < cols / 4; q += kThreads) {
        float4 d = in[q] - make_float4(mean, mean, mean, mean);
        out[q] = make_float4(d.x * rstd * w[q].x + b[q].x, d.y * rstd * w[q].y + b[q].y,
                             d.z * rstd * w[q].z + b[q].z, d.w * rstd * w[q].w + b[q].w);
    }
}

extern "C" void layernorm(const float* x, const float* weight, const float* bias, float* y,
                          int batch_size, int dim, cudaStream_t stream) {
    layernorm_vec4<<<batch_size, kThreads, 0, stream>>>(x, weight, bias, y, dim);
}
