// avoid_global_atomics from split_rows_atomic: the 64 partials of each column go to a scratch
// buffer (stream-ordered allocation) and a second kernel adds them up: no atomics, and the
// result no longer depends on the order the chunks finish in.
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kChunks = 64;

__global__ void col_sum_partials(const float* __restrict__ x, float* __restrict__ partials,
                                 int rows, int cols) {
    int col = blockIdx.x * kThreads + threadIdx.x;
    if (col >= cols) return;
    int per_chunk = (rows + kChunks - 1) / kChunks;
    int begin = blockIdx.y * per_chunk;
    int end = min(rows, begin + per_chunk);
    float acc = 0.0f;
    for (int r = begin; r < end; ++r) acc += x[(size_t)r * cols + col];
    partials[(size_t)blockIdx.y * cols + col] = acc;
}

__global__ void col_sum_finish(const float* __restrict__ partials, float* __restrict__ out,
                               int cols) {
    int col = blockIdx.x * kThreads + threadIdx.x;
    if (col >= cols) return;
    float acc = 0.0f;
    for (int chunk = 0; chunk < kChunks; ++chunk) acc += partials[(size_t)chunk * cols + col];
    out[col] = acc;
}

extern "C" void col_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    float* partials = nullptr;
    cudaMallocAsync(&partials, sizeof(float) * kChunks * cols, stream);
    dim3 grid((cols + kThreads - 1) / kThreads, kChunks);
    col_sum_partials<<<grid, kThreads, 0, stream>>>(x, partials, rows, cols);
    col_sum_finish<<<(cols + kThreads - 1) / kThreads, kThreads, 0, stream>>>(partials, out, cols);
    cudaFreeAsync(partials, stream);
}
