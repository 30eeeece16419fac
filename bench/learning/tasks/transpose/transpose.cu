// Matrix transpose. Naive: reads are coalesced along a row, but each warp's 32 writes land
// `rows` floats apart, one 32-byte sector per 4-byte store.
#include <cuda_runtime.h>

__global__ void transpose_naive(const float* x, float* y, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) y[(size_t)c * rows + r] = x[(size_t)r * cols + c];
}

extern "C" void transpose(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    dim3 block(32, 8);
    dim3 grid((cols + 31) / 32, (rows + 7) / 8);
    transpose_naive<<<grid, block, 0, stream>>>(x, y, rows, cols);
}
