// Batched: the kernel below runs once per batch entry (blockIdx.z), with A, B and C offset by
// their batch strides: C[i] = A[i] @ B[i] for 32 products of 512 x 512 by 512 x 512.
// tensor_cores_wmma from naive: WMMA straight from global memory. Does not compile: a WMMA
// matrix_a/matrix_b fragment cannot hold `float`; fp32 data goes through
// wmma::precision::tf32 fragments (m16n16k8).
#include <cuda_runtime.h>
#include <mma.h>

using namespace nvcuda;

__global__ void matmul_wmma_global(const float* __restrict__ a, const float* __restrict__ b,
                                   float* __restrict__ c, int M, int N, int K,
                  size_t sa, size_t sb, size_t sc) {
    a += blockIdx.z * sa;
    b += blockIdx.z * sb;
    c += blockIdx.z * sc;
    int warp_row = (blockIdx.y * blockDim.y + threadIdx.y) * 16;
    int warp_col = (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * 16;
    if (warp_row >= M || warp_col >= N) return;
    wmma::fragment<wmma::matrix_a, 16, 16, 8, float, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, float, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 8) {
        wmma::load_matrix_sync(fa, a + (size_t)warp_row * K + k, K);
        wmma::load_matrix_sync(fb, b + (size_t)k * N + warp_col, N);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + (size_t)warp_row * N + warp_col, acc, N, wmma::mem_row_major);
}

extern "C" void bmm(const float* a, const float* b, float* c, int batch, int M, int N, int K,
                    cudaStream_t stream) {
    dim3 block(128, 4);  // 4 x 4 warps, one 16 x 16 output tile each
    dim3 grid((N + 63) / 64, (M + 63) / 64, batch);
    matmul_wmma_global<<<grid, block, 0, stream>>>(a, b, c, M, N, K, (size_t)M * K, (size_t)K * N,
        (size_t)M * N);
}
