// NCDHW -> NDHWC: per volume, the channels x voxels plane transposed to voxels x channels.
// shared_memory_padding from smem_tiled: one float of padding per tile row, so the column
// reads of a warp spread over all 32 banks instead of hitting one 32 times.
#include <cuda_runtime.h>

constexpr int kTile = 32;
constexpr int kRows = 8;

__global__ void transpose_padded(const float* __restrict__ x, float* __restrict__ y, int rows,
                                 int cols) {
    __shared__ float tile[kTile][kTile + 1];
    size_t plane = (size_t)rows * cols;
    x += blockIdx.z * plane;
    y += blockIdx.z * plane;
    int c = blockIdx.x * kTile + threadIdx.x;
    int r0 = blockIdx.y * kTile + threadIdx.y;
    for (int j = 0; j < kTile; j += kRows)
        if (r0 + j < rows && c < cols) tile[threadIdx.y + j][threadIdx.x] = x[(size_t)(r0 + j) * cols + c];
    __syncthreads();
    int out_c = blockIdx.y * kTile + threadIdx.x;
    int out_r0 = blockIdx.x * kTile + threadIdx.y;
    for (int j = 0; j < kTile; j += kRows)
        if (out_r0 + j < cols && out_c < rows)
            y[(size_t)(out_r0 + j) * rows + out_c] = tile[threadIdx.x][threadIdx.y + j];
}

extern "C" void ncdhw_to_ndhwc(const float* x, float* y, int batch_size, int channels, int depth, int height, int width,
    cudaStream_t stream) {
    int batch = batch_size, rows = channels, cols = depth * height * width;
    dim3 grid((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile, batch);
    transpose_padded<<<grid, dim3(kTile, kRows), 0, stream>>>(x, y, rows, cols);
}
