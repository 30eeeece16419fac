// tensor_cores_wmma from reg_tiled: 64x64 tiles on tensor cores (WMMA m16n16k8 TF32, 4 warps),
// with each operand split into TF32 "big" and "small" parts and three products accumulated
// (3xTF32) to keep fp32 accuracy. W's tile stays in its own (out x in) layout: as the
// column-major B operand it is exactly W^T. Bias and GELU in the epilogue.
#include <cuda_runtime.h>
#include <mma.h>

__device__ __forceinline__ float gelu_exact(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

using namespace nvcuda;

constexpr int kBM = 64, kBN = 64, kBK = 16;
constexpr int kWarps = 4;  // 2 x 2 warps, each a 32 x 32 tile (2 x 2 fragments)
constexpr int kLd = kBK + 4;  // WMMA stride: a multiple of 4 floats

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 8, float>;

template <typename Frag>
__device__ __forceinline__ void split(Frag& big, Frag& small) {
#pragma unroll
    for (int t = 0; t < big.num_elements; ++t) {
        float v = big.x[t];
        big.x[t] = wmma::__float_to_tf32(v);
        small.x[t] = wmma::__float_to_tf32(v - big.x[t]);
    }
}

__global__ void __launch_bounds__(kWarps * 32)
linear_gelu_wmma(const float* __restrict__ x, const float* __restrict__ w,
                 const float* __restrict__ b, float* __restrict__ y, int M, int N, int K) {
    __shared__ __align__(32) float xs[kBM][kLd];
    __shared__ __align__(32) float ws[kBN][kLd];  // ws[n][k] = W[n][k]
    __shared__ __align__(32) float stage[kWarps][16 * 16];
    int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    int wy = warp / 2, wx = warp % 2;
    int bm = blockIdx.y * kBM, bn = blockIdx.x * kBN;
    FragC acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    for (int k0 = 0; k0 < K; k0 += kBK) {
        for (int i = tid; i < kBM * kBK; i += kWarps * 32) {
            int r = i / kBK, k = i % kBK;
            xs[r][k] = (bm + r < M && k0 + k < K) ? x[(size_t)(bm + r) * K + k0 + k] : 0.0f;
            ws[r][k] = (bn + r < N && k0 + k < K) ? w[(size_t)(bn + r) * K + k0 + k] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kBK; kk += 8) {
            FragA a_big[2], a_small[2];
            FragB b_big[2], b_small[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                wmma::load_matrix_sync(a_big[i], &xs[wy * 32 + i * 16][kk], kLd);
                split(a_big[i], a_small[i]);
            }
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                wmma::load_matrix_sync(b_big[j], &ws[wx * 32 + j * 16][kk], kLd);
                split(b_big[j], b_small[j]);
            }
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    wmma::mma_sync(acc[i][j], a_small[i], b_big[j], acc[i][j]);
                    wmma::mma_sync(acc[i][j], a_big[i], b_small[j], acc[i][j]);
                    wmma::mma_sync(acc[i][j], a_big[i], b_big[j], acc[i][j]);
                }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            wmma::store_matrix_sync(stage[warp], acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            int m0 = bm + wy * 32 + i * 16, n0 = bn + wx * 32 + j * 16;
            for (int e = lane; e < 256; e += 32) {
                int m = m0 + e / 16, n = n0 + e % 16;
                if (m < M && n < N) y[(size_t)m * N + n] = gelu_exact(stage[warp][e] + b[n]);
            }
            __syncwarp();
        }
}

extern "C" void linear_gelu(const float* x, const float* weight, const float* bias, float* y,
                            int batch_size, int in_features, int out_features, cudaStream_t stream) {
    dim3 grid((out_features + kBN - 1) / kBN, (batch_size + kBM - 1) / kBM);
    linear_gelu_wmma<<<grid, kWarps * 32, 0, stream>>>(x, weight, bias, y, batch_size,
                                                       out_features, in_features);
}
