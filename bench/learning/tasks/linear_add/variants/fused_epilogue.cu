// y = x @ W^T + b + r. kernel_fusion from naive: the bias and the residual add applied in
// the GEMM kernel's epilogue, dropping the second pass over y. The GEMM itself is unchanged.
#include <cuda_runtime.h>

__global__ void linear_fused(const float* __restrict__ x, const float* __restrict__ w,
                             const float* __restrict__ b, const float* __restrict__ r, float* __restrict__ y, int M, int N,
                             int K) {
    int m = blockIdx.y * blockDim.y + threadIdx.y;
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= M || n >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += x[(size_t)m * K + k] * w[(size_t)n * K + k];
    y[(size_t)m * N + n] = acc + b[n] + r[(size_t)m * N + n];
}

extern "C" void linear_add(const float* x, const float* residual, const float* weight, const float* bias, float* y,
    int batch_size, int in_features, int out_features, cudaStream_t stream) {
    dim3 block(16, 16);
    dim3 grid((out_features + 15) / 16, (batch_size + 15) / 16);
    linear_fused<<<grid, block, 0, stream>>>(x, weight, bias, residual, y, batch_size, out_features,
                                             in_features);
}
