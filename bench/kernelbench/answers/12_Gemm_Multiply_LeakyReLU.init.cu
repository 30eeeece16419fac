// y = leaky_relu((x @ W^T + b) * multiplier, negative_slope), plain CUDA: nn.Linear (W is
// out_features x in_features), the multiplication and LeakyReLU, one output element per
// thread, every operand read from global memory.
#include <cuda_runtime.h>

__global__ void gemm_kernel(const float* x, const float* w, const float* b, float* y, int M,
                            int N, int K, float multiplier, float negative_slope) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    int m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m >= M || n >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += x[(size_t)m * K + k] * w[(size_t)n * K + k];
    float v = (acc + b[n]) * multiplier;
    y[(size_t)m * N + n] = v >= 0.0f ? v : v * negative_slope;
}

extern "C" void gemm_multiply_leaky_relu(const float* x, const float* weight, const float* bias,
                                         float* y, int batch_size, int in_features,
                                         int out_features, float multiplier,
                                         float negative_slope, cudaStream_t stream) {
    dim3 block(16, 16);
    dim3 grid((out_features + 15) / 16, (batch_size + 15) / 16);
    gemm_kernel<<<grid, block, 0, stream>>>(x, weight, bias, y, batch_size, out_features,
                                            in_features, multiplier, negative_slope);
}
