// shared_memory_tiling from naive: stage row-lane partials in shared memory sized by the block.
// Does not compile: a __shared__ array's size must be a compile-time constant, and blockDim is
// known only at run time.
#include <cuda_runtime.h>

__global__ void col_sum_shared(const float* __restrict__ x, float* __restrict__ out, int rows,
                               int cols) {
    __shared__ float partial[blockDim.y][blockDim.x];
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    if (col < cols) {
        for (int r = threadIdx.y; r < rows; r += blockDim.y) acc += x[(size_t)r * cols + col];
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        float total = 0.0f;
        for (int lane = 0; lane < blockDim.y; ++lane) total += partial[lane][threadIdx.x];
        out[col] = total;
    }
}

extern "C" void col_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    dim3 block(32, 8);
    col_sum_shared<<<(cols + 31) / 32, block, 0, stream>>>(x, out, rows, cols);
}
