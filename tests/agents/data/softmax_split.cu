// Row softmax, plain CUDA, split in two kernels: row_stats (a one-warp block per row) reduces
// each row to its max and sum of exponentials and parks them in the row's first two output
// elements; row_normalize (a block per row) reads them back, then overwrites the row.
#include <cuda_runtime.h>

struct Max {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Sum {
    __device__ float operator()(float a, float b) const { return a + b; }
};

// The reduction of one value per lane, given to every lane.
template <typename Op>
__device__ __forceinline__ float warp_reduce(float value, Op op) {
    for (int offset = 16; offset > 0; offset >>= 1)
        value = op(value, __shfl_down_sync(0xffffffffu, value, offset));
    return __shfl_sync(0xffffffffu, value, 0);
}

__global__ void row_stats(const float* x, float* y, int cols) {
    const float* row = x + (size_t)blockIdx.x * cols;
    float top = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += warpSize) top = fmaxf(top, row[c]);
    top = warp_reduce(top, Max());
    float total = 0.0f;
    for (int c = threadIdx.x; c < cols; c += warpSize) total += expf(row[c] - top);
    total = warp_reduce(total, Sum());
    if (threadIdx.x == 0) {
        y[(size_t)blockIdx.x * cols] = top;
        y[(size_t)blockIdx.x * cols + 1] = total;
    }
}

__global__ void row_normalize(const float* x, float* y, int cols) {
    __shared__ float stats[2];
    const float* in = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    if (threadIdx.x < 2) stats[threadIdx.x] = out[threadIdx.x];
    __syncthreads();  // every thread has the row's max and sum before any overwrites them
    float top = stats[0], inv = 1.0f / stats[1];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = expf(in[c] - top) * inv;
}

extern "C" void softmax(const float* x, float* y, int batch_size, int dim, cudaStream_t stream) {
    row_stats<<<batch_size, 32, 0, stream>>>(x, y, dim);
    row_normalize<<<batch_size, 256, 0, stream>>>(x, y, dim);
}
