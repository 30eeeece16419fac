// coalesce_global_access from naive: a warp per row; its lanes read consecutive floats and
// the warp's partial sums are combined with shuffles.
#include <cuda_runtime.h>

constexpr int kWarpsPerBlock = 8;

__global__ void row_sum_warp(const float* __restrict__ x, float* __restrict__ out, int rows,
                             int cols) {
    int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* in = x + (size_t)row * cols;
    float acc = 0.0f;
    for (int c = lane; c < cols; c += 32) acc += in[c];
    for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffff, acc, offset);
    if (lane == 0) out[row] = acc;
}

extern "C" void row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    int blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
    row_sum_warp<<<blocks, kWarpsPerBlock * 32, 0, stream>>>(x, out, rows, cols);
}
