// NDHWC -> NCDHW: per volume, the voxels x channels plane transposed to channels x voxels.
// coalesce_global_access from naive: the thread mapping swapped so that a warp writes 32
// consecutive floats of y; its reads of x are now the ones `cols` floats apart.
#include <cuda_runtime.h>

__global__ void transpose_write_coalesced(const float* x, float* y, int rows, int cols) {
    size_t plane = (size_t)rows * cols;
    x += blockIdx.z * plane;
    y += blockIdx.z * plane;
    int r = blockIdx.x * blockDim.x + threadIdx.x;  // a row of x is a column of y
    int c = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) y[(size_t)c * rows + r] = x[(size_t)r * cols + c];
}

extern "C" void ndhwc_to_ncdhw(const float* x, float* y, int batch_size, int depth, int height, int width, int channels,
    cudaStream_t stream) {
    int batch = batch_size, rows = depth * height * width, cols = channels;
    dim3 grid((rows + 31) / 32, (cols + 7) / 8, batch);
    transpose_write_coalesced<<<grid, dim3(32, 8), 0, stream>>>(x, y, rows, cols);
}
