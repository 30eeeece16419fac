// C = A @ B in fp32. Naive: one output per thread, every operand read from global memory
// (no shared-memory tiling, no register blocking, no tensor cores).
#include <cuda_runtime.h>

__global__ void matmul_naive(const float* a, const float* b, float* c, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += a[(size_t)row * K + k] * b[(size_t)k * N + col];
    c[(size_t)row * N + col] = acc;
}

extern "C" void matmul(const float* a, const float* b, float* c, int M, int N, int K,
                       cudaStream_t stream) {
    dim3 block(16, 16);
    dim3 grid((N + 15) / 16, (M + 15) / 16);
    matmul_naive<<<grid, block, 0, stream>>>(a, b, c, M, N, K);
}
