// index_strength_reduction from naive: a 3-D grid (x: head_dim, y: heads, z: batch x seq), so
// no division or modulo is left; a block moves 4 whole rows of 64 floats.
#include <cuda_runtime.h>

__global__ void permute_grid3d(const float* __restrict__ x, float* __restrict__ y, int seq,
                               int heads, int head_dim) {
    int d = threadIdx.x;
    int h = blockIdx.y * blockDim.y + threadIdx.y;
    int bs = blockIdx.z;  // b * seq + s
    if (d >= head_dim || h >= heads) return;
    int b = bs / seq, s = bs - b * seq;  // once per thread, 32-bit
    size_t in = ((size_t)bs * heads + h) * head_dim + d;
    size_t out = (((size_t)b * heads + h) * seq + s) * head_dim + d;
    y[out] = x[in];
}

extern "C" void permute_heads(const float* x, float* y, int batch, int seq, int heads,
                              int head_dim, cudaStream_t stream) {
    dim3 block(head_dim, 4);  // head_dim <= 256 here (64)
    dim3 grid(1, (heads + 3) / 4, batch * seq);
    permute_grid3d<<<grid, block, 0, stream>>>(x, y, seq, heads, head_dim);
}
