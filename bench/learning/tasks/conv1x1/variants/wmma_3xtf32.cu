// As a GEMM: a 1x1 convolution of NCHW x is, per image, Y[n] = W @ X[n] with W out x in,
// X[n] in x (H*W) and Y[n] out x (H*W); the kernel below runs once per image (blockIdx.z),
// B and C offset by the image strides, A (the weight) shared (stride 0).
// tensor_cores_wmma from reg_tiled: 64x64 block tiles computed by 4 warps on tensor cores
// (WMMA, m16n16k8 TF32). TF32 keeps 10 mantissa bits, too few for fp32 tolerances on a
// 2048-long dot product, so each operand is split into a TF32 "big" part and a TF32 "small"
// remainder and three products are accumulated (3xTF32): about fp32 accuracy at tensor-core
// speed.
#include <cuda_runtime.h>
#include <mma.h>

using namespace nvcuda;

constexpr int kBM = 64, kBN = 64, kBK = 16;
constexpr int kWarps = 4;  // 2 x 2 warps, each computing a 32 x 32 tile (2 x 2 fragments)
constexpr int kLdA = kBK + 4, kLdB = kBN + 4;  // WMMA strides: multiples of 4 floats

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
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
matmul_wmma_3xtf32(const float* __restrict__ a, const float* __restrict__ b,
                   float* __restrict__ c, int M, int N, int K,
                  size_t sa, size_t sb, size_t sc) {
    a += blockIdx.z * sa;
    b += blockIdx.z * sb;
    c += blockIdx.z * sc;
    __shared__ __align__(32) float as[kBM][kLdA];
    __shared__ __align__(32) float bs[kBK][kLdB];
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
            as[r][k] = (bm + r < M && k0 + k < K) ? a[(size_t)(bm + r) * K + k0 + k] : 0.0f;
        }
        for (int i = tid; i < kBK * kBN; i += kWarps * 32) {
            int k = i / kBN, col = i % kBN;
            bs[k][col] = (k0 + k < K && bn + col < N) ? b[(size_t)(k0 + k) * N + bn + col] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kBK; kk += 8) {
            FragA a_big[2], a_small[2];
            FragB b_big[2], b_small[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                wmma::load_matrix_sync(a_big[i], &as[wy * 32 + i * 16][kk], kLdA);
                split(a_big[i], a_small[i]);
            }
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                wmma::load_matrix_sync(b_big[j], &bs[kk][wx * 32 + j * 16], kLdB);
                split(b_big[j], b_small[j]);
            }
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) {  // small terms first: they are the least significant
                    wmma::mma_sync(acc[i][j], a_small[i], b_big[j], acc[i][j]);
                    wmma::mma_sync(acc[i][j], a_big[i], b_small[j], acc[i][j]);
                    wmma::mma_sync(acc[i][j], a_big[i], b_big[j], acc[i][j]);
                }
        }
        __syncthreads();
    }
    // Through a per-warp staging tile, so edge tiles write only their valid elements.
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            wmma::store_matrix_sync(stage[warp], acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            int row0 = bm + wy * 32 + i * 16, col0 = bn + wx * 32 + j * 16;
            for (int e = lane; e < 256; e += 32) {
                int row = row0 + e / 16, col = col0 + e % 16;
                if (row < M && col < N) c[(size_t)row * N + col] = stage[warp][e];
            }
            __syncwarp();
        }
}

extern "C" void conv1x1(const float* x, const float* weight, float* y, int batch_size,
                        int in_channels, int out_channels, int height, int width,
                        cudaStream_t stream) {
    const float* a = weight;
    const float* b = x;
    float* c = y;
    int M = out_channels, N = height * width, K = in_channels, batch = batch_size;
    dim3 grid((N + kBN - 1) / kBN, (M + kBM - 1) / kBM, batch);
    matmul_wmma_3xtf32<<<grid, kWarps * 32, 0, stream>>>(a, b, c, M, N, K, (size_t)0, (size_t)K * N,
        (size_t)M * N);
}
