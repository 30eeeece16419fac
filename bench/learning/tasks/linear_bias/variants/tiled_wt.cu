// y = x @ W^T + b. shared_memory_tiling from wt_transposed: the GEMM over the
// transposed copy of W now loads 32x32 tiles of x and of W^T along k into shared memory (each
// value reused by 32 threads); the transpose pass stays, as the kernel it tiled had it.
#include <cuda_runtime.h>

constexpr int kTile = 32;

__global__ void transpose_w(const float* __restrict__ w, float* __restrict__ wt, int N, int K) {
    __shared__ float tile[32][33];
    int k = blockIdx.x * 32 + threadIdx.x;
    for (int j = threadIdx.y; j < 32; j += blockDim.y) {
        int n = blockIdx.y * 32 + j;
        if (n < N && k < K) tile[j][threadIdx.x] = w[(size_t)n * K + k];
    }
    __syncthreads();
    int n = blockIdx.y * 32 + threadIdx.x;
    for (int j = threadIdx.y; j < 32; j += blockDim.y) {
        int kk = blockIdx.x * 32 + j;
        if (n < N && kk < K) wt[(size_t)kk * N + n] = tile[threadIdx.x][j];
    }
}

__global__ void linear_wt_tiled(const float* __restrict__ x, const float* __restrict__ wt,
                                const float* __restrict__ b, float* __restrict__ y, int M,
                                int N, int K) {
    __shared__ float xs[kTile][kTile + 1];
    __shared__ float ws[kTile][kTile + 1];  // ws[k][n] = W^T[k0 + k][n]
    int m = blockIdx.y * kTile + threadIdx.y;
    int n = blockIdx.x * kTile + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += kTile) {
        int kx = k0 + threadIdx.x, kw = k0 + threadIdx.y;
        xs[threadIdx.y][threadIdx.x] = (m < M && kx < K) ? x[(size_t)m * K + kx] : 0.0f;
        ws[threadIdx.y][threadIdx.x] = (n < N && kw < K) ? wt[(size_t)kw * N + n] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kTile; ++kk) acc += xs[threadIdx.y][kk] * ws[kk][threadIdx.x];
        __syncthreads();
    }
    if (m < M && n < N) y[(size_t)m * N + n] = acc + b[n];
}

extern "C" void linear_bias(const float* x, const float* weight, const float* bias, float* y,
    int batch_size, int in_features, int out_features, cudaStream_t stream) {
    float* wt = nullptr;
    cudaMallocAsync(&wt, sizeof(float) * in_features * out_features, stream);
    dim3 tgrid((in_features + 31) / 32, (out_features + 31) / 32);
    transpose_w<<<tgrid, dim3(32, 8), 0, stream>>>(weight, wt, out_features, in_features);
    dim3 grid((out_features + kTile - 1) / kTile, (batch_size + kTile - 1) / kTile);
    linear_wt_tiled<<<grid, dim3(kTile, kTile), 0, stream>>>(x, wt, bias, y, batch_size,
                                                             out_features, in_features);
    cudaFreeAsync(wt, stream);
}
