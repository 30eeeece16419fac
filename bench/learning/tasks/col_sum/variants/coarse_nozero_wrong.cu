// thread_coarsening from split_rows_atomic: two columns per thread, half the blocks. Wrong:
// the rewritten launcher no longer zeroes the output before the atomicAdds accumulate into it.
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kChunks = 64;

__global__ void col_sum_split2(const float* __restrict__ x, float* __restrict__ out, int rows,
                               int cols) {
    int col = blockIdx.x * kThreads * 2 + threadIdx.x;
    int per_chunk = (rows + kChunks - 1) / kChunks;
    int begin = blockIdx.y * per_chunk;
    int end = min(rows, begin + per_chunk);
    float a = 0.0f, b = 0.0f;
    bool second = col + kThreads < cols;
    if (col >= cols) return;
    for (int r = begin; r < end; ++r) {
        a += x[(size_t)r * cols + col];
        if (second) b += x[(size_t)r * cols + col + kThreads];
    }
    atomicAdd(&out[col], a);
    if (second) atomicAdd(&out[col + kThreads], b);
}

extern "C" void col_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    dim3 grid((cols + 2 * kThreads - 1) / (2 * kThreads), kChunks);
    col_sum_split2<<<grid, kThreads, 0, stream>>>(x, out, rows, cols);
}
