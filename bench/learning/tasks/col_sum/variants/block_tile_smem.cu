// block_reduction from naive: a 32x8 block owns 32 columns of a chunk of rows; its 8 row-lanes
// sum strided rows, reduce through shared memory, and one atomicAdd per column and block
// merges the chunks.
#include <cuda_runtime.h>

constexpr int kCols = 32;
constexpr int kRowLanes = 8;
constexpr int kChunks = 32;

__global__ void col_sum_tile(const float* __restrict__ x, float* __restrict__ out, int rows,
                             int cols) {
    __shared__ float partial[kRowLanes][kCols + 1];
    int col = blockIdx.x * kCols + threadIdx.x;
    int per_chunk = (rows + kChunks - 1) / kChunks;
    int begin = blockIdx.y * per_chunk;
    int end = min(rows, begin + per_chunk);
    float acc = 0.0f;
    if (col < cols) {
        for (int r = begin + threadIdx.y; r < end; r += kRowLanes) acc += x[(size_t)r * cols + col];
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        float total = 0.0f;
        for (int lane = 0; lane < kRowLanes; ++lane) total += partial[lane][threadIdx.x];
        atomicAdd(&out[col], total);
    }
}

extern "C" void col_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    cudaMemsetAsync(out, 0, sizeof(float) * cols, stream);
    dim3 grid((cols + kCols - 1) / kCols, kChunks);
    col_sum_tile<<<grid, dim3(kCols, kRowLanes), 0, stream>>>(x, out, rows, cols);
}
