// NDHWC -> NCDHW: per volume, the voxels x channels plane transposed to channels x voxels.
// shared_memory_tiling from naive: a 32x32 tile is read row by row (coalesced) into shared
// memory and written out transposed, row by row of y (coalesced too).
#include <cuda_runtime.h>

constexpr int kTile = 32;
constexpr int kRows = 8;  // threads per block in y; each handles kTile / kRows rows

__global__ void transpose_tiled(const float* __restrict__ x, float* __restrict__ y, int rows,
                                int cols) {
    __shared__ float tile[kTile][kTile];
    size_t plane = (size_t)rows * cols;
    x += blockIdx.z * plane;
    y += blockIdx.z * plane;
    int c = blockIdx.x * kTile + threadIdx.x;
    int r0 = blockIdx.y * kTile + threadIdx.y;
    for (int j = 0; j < kTile; j += kRows)
        if (r0 + j < rows && c < cols) tile[threadIdx.y + j][threadIdx.x] = x[(size_t)(r0 + j) * cols + c];
    __syncthreads();
    int out_c = blockIdx.y * kTile + threadIdx.x;  // a column of x is a row of y
    int out_r0 = blockIdx.x * kTile + threadIdx.y;
    for (int j = 0; j < kTile; j += kRows)
        if (out_r0 + j < cols && out_c < rows)
            y[(size_t)(out_r0 + j) * rows + out_c] = tile[threadIdx.x][threadIdx.y + j];
}

extern "C" void ndhwc_to_ncdhw(const float* x, float* y, int batch_size, int depth, int height, int width, int channels,
    cudaStream_t stream) {
    int batch = batch_size, rows = depth * height * width, cols = channels;
    dim3 grid((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile, batch);
    transpose_tiled<<<grid, dim3(kTile, kRows), 0, stream>>>(x, y, rows, cols);
}
