// NDHWC -> NCDHW: per volume, the voxels x channels plane transposed to channels x voxels.
// Naive: a thread per element; reads are coalesced along a row of x, but each warp's 32
// writes land `rows` floats apart, one 32-byte sector per 4-byte store.
#include <cuda_runtime.h>

__global__ void transpose_naive(const float* x, float* y, int rows, int cols) {
    size_t plane = (size_t)rows * cols;
    x += blockIdx.z * plane;
    y += blockIdx.z * plane;
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) y[(size_t)c * rows + r] = x[(size_t)r * cols + c];
}

extern "C" void ndhwc_to_ncdhw(const float* x, float* y, int batch_size, int depth, int height, int width, int channels,
    cudaStream_t stream) {
    int batch = batch_size, rows = depth * height * width, cols = channels;
    dim3 grid((cols + 31) / 32, (rows + 7) / 8, batch);
    transpose_naive<<<grid, dim3(32, 8), 0, stream>>>(x, y, rows, cols);
}
