// C = A @ B for N x N matrices: 32x32 shared-memory tiles, each thread computing a 4x1 column
// strip of C from them (register blocking), so every global element is loaded once per tile
// instead of once per multiply-add.
#include <cuda_runtime.h>

#define TILE 32
#define ROWS_PER_THREAD 4

__global__ void matmul_kernel(const float* A, const float* B, float* C, int N) {
    __shared__ float as[TILE][TILE];
    __shared__ float bs[TILE][TILE + 1];
    int col = blockIdx.x * TILE + threadIdx.x;
    int row0 = blockIdx.y * TILE + threadIdx.y * ROWS_PER_THREAD;
    float acc[ROWS_PER_THREAD] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k0 = 0; k0 < N; k0 += TILE) {
        for (int r = 0; r < ROWS_PER_THREAD; ++r) {
            int ty = threadIdx.y * ROWS_PER_THREAD + r;
            int arow = blockIdx.y * TILE + ty, acol = k0 + threadIdx.x;
            as[ty][threadIdx.x] = (arow < N && acol < N) ? A[(size_t)arow * N + acol] : 0.0f;
            int brow = k0 + ty;
            bs[ty][threadIdx.x] = (brow < N && col < N) ? B[(size_t)brow * N + col] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) {
            float bv = bs[k][threadIdx.x];
#pragma unroll
            for (int r = 0; r < ROWS_PER_THREAD; ++r)
                acc[r] = fmaf(as[threadIdx.y * ROWS_PER_THREAD + r][k], bv, acc[r]);
        }
        __syncthreads();
    }
    for (int r = 0; r < ROWS_PER_THREAD; ++r)
        if (row0 + r < N && col < N) C[(size_t)(row0 + r) * N + col] = acc[r];
}

extern "C" void square_matmul(const float* A, const float* B, float* C, int N,
                              cudaStream_t stream) {
    dim3 block(TILE, TILE / ROWS_PER_THREAD);
    dim3 grid((N + TILE - 1) / TILE, (N + TILE - 1) / TILE);
    matmul_kernel<<<grid, block, 0, stream>>>(A, B, C, N);
}
