// Row softmax, plain CUDA, split in two kernels: row_stats finds each row's max and sum of
// exponentials (one warp per row, warp shuffles) and parks them in the row's first two output
// elements; row_normalize (one block per row) reads them back, then overwrites the row.
#include <cuda_runtime.h>

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__global__ void row_stats(const float* x, float* y, int rows, int cols) {
    int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;  // whole warps leave together: rows are warp-uniform
    const float* in = x + (size_t)row * cols;
    float m = -INFINITY;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, in[c]);
    m = warp_max(m);
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) s += expf(in[c] - m);
    s = warp_sum(s);
    if (lane == 0) {
        y[(size_t)row * cols] = m;
        y[(size_t)row * cols + 1] = s;
    }
}

__global__ void row_normalize(const float* x, float* y, int rows, int cols) {
    __shared__ float stats[2];
    const float* in = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    if (threadIdx.x < 2) stats[threadIdx.x] = out[threadIdx.x];
    __syncthreads();  // every thread has the row's max and sum before any overwrites them
    float m = stats[0], inv = 1.0f / stats[1];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = expf(in[c] - m) * inv;
}

extern "C" void softmax(const float* x, float* y, int batch_size, int dim, cudaStream_t stream) {
    const int threads = 256;  // 8 rows per block
    row_stats<<<(batch_size * 32 + threads - 1) / threads, threads, 0, stream>>>(x, y, batch_size, dim);
    row_normalize<<<batch_size, threads, 0, stream>>>(x, y, batch_size, dim);
}
