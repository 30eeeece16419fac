// tensor_cores_wmma from tiled: fp16 WMMA fragments fed from the fp32 shared-memory tiles.
// Does not compile: load_matrix_sync for a __half fragment takes a __half pointer, and the
// tiles hold float.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

__device__ __forceinline__ float gelu_exact(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

using namespace nvcuda;

constexpr int kTile = 32;

__global__ void linear_gelu_wmma_half(const float* __restrict__ x, const float* __restrict__ w,
                                      const float* __restrict__ b, float* __restrict__ y, int M,
                                      int N, int K) {
    __shared__ __align__(32) float xs[kTile][kTile];
    __shared__ __align__(32) float ws[kTile][kTile];
    __shared__ __align__(32) float out[kTile][kTile];
    int warp = threadIdx.x / 32;  // 4 warps, one 16x16 output fragment each
    int wy = warp / 2, wx = warp % 2;
    int bm = blockIdx.y * kTile, bn = blockIdx.x * kTile;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k0 = 0; k0 < K; k0 += kTile) {
        for (int i = threadIdx.x; i < kTile * kTile; i += blockDim.x) {
            int r = i / kTile, k = i % kTile;
            xs[r][k] = (bm + r < M && k0 + k < K) ? x[(size_t)(bm + r) * K + k0 + k] : 0.0f;
            ws[r][k] = (bn + r < N && k0 + k < K) ? w[(size_t)(bn + r) * K + k0 + k] : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < kTile; kk += 16) {
            wmma::load_matrix_sync(fa, &xs[wy * 16][kk], kTile);
            wmma::load_matrix_sync(fb, &ws[wx * 16][kk], kTile);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        __syncthreads();
    }
    wmma::store_matrix_sync(&out[wy * 16][wx * 16], acc, kTile, wmma::mem_row_major);
    __syncthreads();
    for (int i = threadIdx.x; i < kTile * kTile; i += blockDim.x) {
        int m = bm + i / kTile, n = bn + i % kTile;
        if (m < M && n < N) y[(size_t)m * N + n] = gelu_exact(out[i / kTile][i % kTile] + b[n]);
    }
}

extern "C" void linear_gelu(const float* x, const float* weight, const float* bias, float* y,
                            int batch_size, int in_features, int out_features, cudaStream_t stream) {
    dim3 grid((out_features + kTile - 1) / kTile, (batch_size + kTile - 1) / kTile);
    linear_gelu_wmma_half<<<grid, 128, 0, stream>>>(x, weight, bias, y, batch_size, out_features,
                                                    in_features);
}
