// shared_memory_tiling from fused_epilogue: 32x32 tiles of x and W in shared memory. Wrong:
// the W tile is loaded as if W were stored in x k-major (in x out) order, w[k * N + n], but
// nn.Linear stores it out x in, so the product uses the wrong weights.
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu_exact(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

constexpr int kTile = 32;

__global__ void linear_gelu_tiled_kn(const float* __restrict__ x, const float* __restrict__ w,
                                     const float* __restrict__ b, float* __restrict__ y, int M,
                                     int N, int K) {
    __shared__ float xs[kTile][kTile];
    __shared__ float ws[kTile][kTile];
    int m = blockIdx.y * kTile + threadIdx.y;
    int n = blockIdx.x * kTile + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += kTile) {
        int xk = k0 + threadIdx.x, wk = k0 + threadIdx.y;
        xs[threadIdx.y][threadIdx.x] = (m < M && xk < K) ? x[(size_t)m * K + xk] : 0.0f;
        ws[threadIdx.y][threadIdx.x] = (wk < K && n < N) ? w[(size_t)wk * N + n] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kTile; ++kk) acc += xs[threadIdx.y][kk] * ws[kk][threadIdx.x];
        __syncthreads();
    }
    if (m < M && n < N) y[(size_t)m * N + n] = gelu_exact(acc + b[n]);
}

extern "C" void linear_gelu(const float* x, const float* weight, const float* bias, float* y,
                            int batch_size, int in_features, int out_features, cudaStream_t stream) {
    dim3 grid((out_features + kTile - 1) / kTile, (batch_size + kTile - 1) / kTile);
    linear_gelu_tiled_kn<<<grid, dim3(kTile, kTile), 0, stream>>>(x, weight, bias, y, batch_size,
                                                                  out_features, in_features);
}
