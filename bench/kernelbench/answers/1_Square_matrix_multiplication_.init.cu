// C = A @ B for N x N matrices, plain CUDA: one output element per thread, every operand read
// from global memory.
#include <cuda_runtime.h>

__global__ void matmul_kernel(const float* A, const float* B, float* C, int N) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[(size_t)row * N + k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = acc;
}

extern "C" void square_matmul(const float* A, const float* B, float* C, int N,
                              cudaStream_t stream) {
    dim3 block(16, 16);
    dim3 grid((N + 15) / 16, (N + 15) / 16);
    matmul_kernel<<<grid, block, 0, stream>>>(A, B, C, N);
}
