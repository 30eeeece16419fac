// warp_shuffle_reduction from naive: a warp per row reduced with shuffles. Does not compile
// for sm_70 and newer: it uses the pre-CUDA-9 __shfl_down, without a lane mask.
#include <cuda_runtime.h>

__global__ void row_sum_shfl(const float* __restrict__ x, float* __restrict__ out, int rows,
                             int cols) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    float acc = 0.0f;
    for (int c = lane; c < cols; c += 32) acc += x[(size_t)row * cols + c];
    for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down(acc, offset);
    if (lane == 0) out[row] = acc;
}

extern "C" void row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    row_sum_shfl<<<(rows + 7) / 8, 256, 0, stream>>>(x, out, rows, cols);
}
