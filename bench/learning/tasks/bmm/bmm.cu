// Batched: the kernel below runs once per batch entry (blockIdx.z), with A, B and C offset by
// their batch strides: C[i] = A[i] @ B[i] for 32 products of 512 x 512 by 512 x 512.
// C = A @ B in fp32. Naive: one output per thread, every operand read from global memory
// (no shared-memory tiling, no register blocking, no tensor cores).
#include <cuda_runtime.h>

__global__ void matmul_naive(const float* a, const float* b, float* c, int M, int N, int K,
                  size_t sa, size_t sb, size_t sc) {
    a += blockIdx.z * sa;
    b += blockIdx.z * sb;
    c += blockIdx.z * sc;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += a[(size_t)row * K + k] * b[(size_t)k * N + col];
    c[(size_t)row * N + col] = acc;
}

extern "C" void bmm(const float* a, const float* b, float* c, int batch, int M, int N, int K,
                    cudaStream_t stream) {
    dim3 block(16, 16);
    dim3 grid((N + 15) / 16, (M + 15) / 16, batch);
    matmul_naive<<<grid, block, 0, stream>>>(a, b, c, M, N, K, (size_t)M * K, (size_t)K * N,
        (size_t)M * N);
}
