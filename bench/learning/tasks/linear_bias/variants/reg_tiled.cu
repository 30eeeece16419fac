// y = x @ W^T + b. register_tiling from tiled: 64x64 output tiles with 16-deep k
// slices; each of 256 threads accumulates a 4x4 tile in registers (four FMAs per shared-memory
// load); the bias in the epilogue.
#include <cuda_runtime.h>

constexpr int kBM = 64, kBN = 64, kBK = 16, kTM = 4, kTN = 4;
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);  // 256

__global__ void __launch_bounds__(kThreads)
linear_reg_tiled(const float* __restrict__ x, const float* __restrict__ w,
                 const float* __restrict__ b, float* __restrict__ y, int M, int N, int K) {
    __shared__ float xs[kBK][kBM];  // k-major: a thread's four rows are adjacent
    __shared__ float ws[kBK][kBN];  // W^T tile: ws[k][n] = W[n][k]
    int tid = threadIdx.x;
    int tx = tid % (kBN / kTN), ty = tid / (kBN / kTN);
    int bm = blockIdx.y * kBM, bn = blockIdx.x * kBN;
    float acc[kTM][kTN] = {};
    for (int k0 = 0; k0 < K; k0 += kBK) {
        for (int i = tid; i < kBM * kBK; i += kThreads) {  // 16 consecutive k per row: coalesced
            int row = i / kBK, k = i % kBK;
            xs[k][row] = (bm + row < M && k0 + k < K) ? x[(size_t)(bm + row) * K + k0 + k] : 0.0f;
            ws[k][row] = (bn + row < N && k0 + k < K) ? w[(size_t)(bn + row) * K + k0 + k] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < kBK; ++k) {
            float rx[kTM], rw[kTN];
#pragma unroll
            for (int i = 0; i < kTM; ++i) rx[i] = xs[k][ty * kTM + i];
#pragma unroll
            for (int j = 0; j < kTN; ++j) rw[j] = ws[k][tx * kTN + j];
#pragma unroll
            for (int i = 0; i < kTM; ++i)
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(rx[i], rw[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        int m = bm + ty * kTM + i;
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
            int n = bn + tx * kTN + j;
            if (m < M && n < N) y[(size_t)m * N + n] = acc[i][j] + b[n];
        }
    }
}

extern "C" void linear_bias(const float* x, const float* weight, const float* bias, float* y,
    int batch_size, int in_features, int out_features, cudaStream_t stream) {
    dim3 grid((out_features + kBN - 1) / kBN, (batch_size + kBM - 1) / kBM);
    linear_reg_tiled<<<grid, kThreads, 0, stream>>>(x, weight, bias, y, batch_size,
                                                    out_features, in_features);
}
