// y = leaky_relu((x @ W^T + b) * multiplier, negative_slope): 32x32 tiles of x and of W are
// loaded along k (coalesced) into shared memory and each value is reused by 32 threads; W's
// tile is read transposed from a padded array; bias, multiplier and LeakyReLU in the epilogue.
#include <cuda_runtime.h>

#define TILE 32

__global__ void gemm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                            const float* __restrict__ b, float* __restrict__ y, int M, int N,
                            int K, float multiplier, float negative_slope) {
    __shared__ float xs[TILE][TILE + 1];
    __shared__ float ws[TILE][TILE + 1];  // ws[n][k], read as ws[threadIdx.x][k]
    int m = blockIdx.y * TILE + threadIdx.y;
    int n = blockIdx.x * TILE + threadIdx.x;
    int w_row = blockIdx.x * TILE + threadIdx.y;  // the W row (output feature) this thread loads
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        int k = k0 + threadIdx.x;
        xs[threadIdx.y][threadIdx.x] = (m < M && k < K) ? x[(size_t)m * K + k] : 0.0f;
        ws[threadIdx.y][threadIdx.x] = (w_row < N && k < K) ? w[(size_t)w_row * K + k] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) acc += xs[threadIdx.y][kk] * ws[threadIdx.x][kk];
        __syncthreads();
    }
    if (m < M && n < N) {
        float v = (acc + b[n]) * multiplier;
        y[(size_t)m * N + n] = v >= 0.0f ? v : v * negative_slope;
    }
}

extern "C" void gemm_multiply_leaky_relu(const float* x, const float* weight, const float* bias,
                                         float* y, int batch_size, int in_features,
                                         int out_features, float multiplier,
                                         float negative_slope, cudaStream_t stream) {
    dim3 grid((out_features + TILE - 1) / TILE, (batch_size + TILE - 1) / TILE);
    gemm_kernel<<<grid, dim3(TILE, TILE), 0, stream>>>(x, weight, bias, y, batch_size,
                                                       out_features, in_features, multiplier,
                                                       negative_slope);
}
