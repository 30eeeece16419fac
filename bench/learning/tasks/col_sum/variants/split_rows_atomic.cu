// increase_parallelism from naive: split the rows into 64 chunks (blockIdx.y); each thread sums
// its column over one chunk and adds the partial to the zeroed output with one atomicAdd.
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kChunks = 64;

__global__ void col_sum_split(const float* __restrict__ x, float* __restrict__ out, int rows,
                              int cols) {
    int col = blockIdx.x * kThreads + threadIdx.x;
    if (col >= cols) return;
    int per_chunk = (rows + kChunks - 1) / kChunks;
    int begin = blockIdx.y * per_chunk;
    int end = min(rows, begin + per_chunk);
    float acc = 0.0f;
    for (int r = begin; r < end; ++r) acc += x[(size_t)r * cols + col];
    atomicAdd(&out[col], acc);
}

extern "C" void col_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    cudaMemsetAsync(out, 0, sizeof(float) * cols, stream);
    dim3 grid((cols + kThreads - 1) / kThreads, kChunks);
    col_sum_split<<<grid, kThreads, 0, stream>>>(x, out, rows, cols);
}
