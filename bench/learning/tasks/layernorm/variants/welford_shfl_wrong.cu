// algebraic_simplification from block_row_shfl: Welford's one-pass mean and M2 per thread,
// merged across lanes and warps with shuffles. Wrong: the merge adds the M2s but drops the
// between-group term delta^2 * na * nb / n, so the variance is underestimated.
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct Stats {
    float n, mean, m2;
};

__device__ __forceinline__ Stats merge(Stats a, Stats b) {
    float n = a.n + b.n;
    if (n == 0.0f) return a;
    float delta = b.mean - a.mean;
    return {n, a.mean + delta * b.n / n, a.m2 + b.m2};
}

__device__ __forceinline__ Stats warp_merge(Stats s) {
    for (int offset = 16; offset > 0; offset /= 2) {
        Stats o{__shfl_xor_sync(0xffffffff, s.n, offset), __shfl_xor_sync(0xffffffff, s.mean, offset),
                __shfl_xor_sync(0xffffffff, s.m2, offset)};
        s = merge(s, o);
    }
    return s;
}

__global__ void layernorm_welford(const float* __restrict__ x, const float* __restrict__ weight,
                                  const float* __restrict__ bias, float* __restrict__ y, int cols) {
    __shared__ Stats part[kWarps];
    const float* in = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    int t = threadIdx.x, warp = t / 32, lane = t % 32;
    Stats s{0.0f, 0.0f, 0.0f};
    for (int c = t; c < cols; c += kThreads) {
        float v = in[c];
        s.n += 1.0f;
        float delta = v - s.mean;
        s.mean += delta / s.n;
        s.m2 += delta * (v - s.mean);
    }
    s = warp_merge(s);
    if (lane == 0) part[warp] = s;
    __syncthreads();
    s = lane < kWarps ? part[lane] : Stats{0.0f, 0.0f, 0.0f};
    s = warp_merge(s);
    float rstd = rsqrtf(s.m2 / cols + 1e-5f);
    for (int c = t; c < cols; c += kThreads) out[c] = (in[c] - s.mean) * rstd * weight[c] + bias[c];
}

extern "C" void layernorm(const float* x, const float* weight, const float* bias, float* y,
                          int batch_size, int dim, cudaStream_t stream) {
    layernorm_welford<<<batch_size, kThreads, 0, stream>>>(x, weight, bias, y, dim);
}
