// y = batch_norm((x @ W^T + b) * scale) with BatchNorm1d in eval mode (running statistics,
// eps 1e-5): 32x32 tiles of x and of W loaded along k (coalesced) into shared memory, each
// value reused by 32 threads; W's tile read transposed from a padded array; the bias, the
// scale and the normalization in the epilogue.
#include <cuda_runtime.h>
#include <cstdint>

#define TILE 32
#define BN_EPS 1e-5f

__global__ void gemm_bn_kernel(const float* __restrict__ x, const float* __restrict__ scale,
                               const float* __restrict__ w, const float* __restrict__ b,
                               const float* __restrict__ bn_w, const float* __restrict__ bn_b,
                               const float* __restrict__ mean, const float* __restrict__ var,
                               float* __restrict__ y, int M, int N, int K) {
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
        float v = (acc + b[n]) * scale[n];
        y[(size_t)m * N + n] = (v - mean[n]) / sqrtf(var[n] + BN_EPS) * bn_w[n] + bn_b[n];
    }
}

extern "C" void gemm_scale_batchnorm(const float* x, const float* scale, const float* weight,
                                     const float* bias, const float* bn_weight,
                                     const float* bn_bias, const float* running_mean,
                                     const float* running_var,
                                     const int64_t* num_batches_tracked, float* y,
                                     int batch_size, int in_features, int out_features,
                                     cudaStream_t stream) {
    dim3 grid((out_features + TILE - 1) / TILE, (batch_size + TILE - 1) / TILE);
    gemm_bn_kernel<<<grid, dim3(TILE, TILE), 0, stream>>>(
        x, scale, weight, bias, bn_weight, bn_bias, running_mean, running_var, y, batch_size,
        out_features, in_features);
}
