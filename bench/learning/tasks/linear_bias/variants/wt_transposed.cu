// y = x @ W^T + b. coalesce_global_access / data_layout_change from naive: W
// transposed once per call into a scratch buffer (tiled, so both sides are coalesced), so the
// GEMM's warp reads 32 consecutive floats of W^T per k; the bias in the epilogue.
#include <cuda_runtime.h>

__global__ void transpose_w(const float* __restrict__ w, float* __restrict__ wt, int N, int K) {
    __shared__ float tile[32][33];
    int k = blockIdx.x * 32 + threadIdx.x;
    for (int j = threadIdx.y; j < 32; j += blockDim.y) {
        int n = blockIdx.y * 32 + j;
        if (n < N && k < K) tile[j][threadIdx.x] = w[(size_t)n * K + k];
    }
    __syncthreads();
    int n = blockIdx.y * 32 + threadIdx.x;
    for (int j = threadIdx.y; j < 32; j += blockDim.y) {
        int kk = blockIdx.x * 32 + j;
        if (n < N && kk < K) wt[(size_t)kk * N + n] = tile[threadIdx.x][j];
    }
}

__global__ void linear_wt(const float* __restrict__ x, const float* __restrict__ wt,
                          const float* __restrict__ b, float* __restrict__ y, int M, int N,
                          int K) {
    int m = blockIdx.y * blockDim.y + threadIdx.y;
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= M || n >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += x[(size_t)m * K + k] * wt[(size_t)k * N + n];
    y[(size_t)m * N + n] = acc + b[n];
}

extern "C" void linear_bias(const float* x, const float* weight, const float* bias, float* y,
    int batch_size, int in_features, int out_features, cudaStream_t stream) {
    float* wt = nullptr;
    cudaMallocAsync(&wt, sizeof(float) * in_features * out_features, stream);
    dim3 tgrid((in_features + 31) / 32, (out_features + 31) / 32);
    transpose_w<<<tgrid, dim3(32, 8), 0, stream>>>(weight, wt, out_features, in_features);
    dim3 grid((out_features + 15) / 16, (batch_size + 15) / 16);
    linear_wt<<<grid, dim3(16, 16), 0, stream>>>(x, wt, bias, y, batch_size, out_features,
                                                 in_features);
    cudaFreeAsync(wt, stream);
}
