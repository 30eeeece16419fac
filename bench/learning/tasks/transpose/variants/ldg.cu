// read_only_cache from naive: const __restrict__ and __ldg on the input. The reads were never
// the problem: the writes stay uncoalesced.
#include <cuda_runtime.h>

__global__ void transpose_ldg(const float* __restrict__ x, float* __restrict__ y, int rows,
                              int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) y[(size_t)c * rows + r] = __ldg(&x[(size_t)r * cols + c]);
}

extern "C" void transpose(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    dim3 block(32, 8);
    dim3 grid((cols + 31) / 32, (rows + 7) / 8);
    transpose_ldg<<<grid, block, 0, stream>>>(x, y, rows, cols);
}
