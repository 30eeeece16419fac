// vectorized_loads from grid3d: a float4 per thread along each row of head_dim floats
// (head_dim % 4 == 0 here), 16 threads per row, 16 rows per block.
#include <cuda_runtime.h>

__global__ void permute_grid3d_vec4(const float* __restrict__ x, float* __restrict__ y, int seq,
                                    int heads, int head_quads) {
    int dq = threadIdx.x;
    int h = blockIdx.y * blockDim.y + threadIdx.y;
    int bs = blockIdx.z;
    if (dq >= head_quads || h >= heads) return;
    int b = bs / seq, s = bs - b * seq;
    size_t in = ((size_t)bs * heads + h) * head_quads + dq;
    size_t out = (((size_t)b * heads + h) * seq + s) * head_quads + dq;
    reinterpret_cast<float4*>(y)[out] = reinterpret_cast<const float4*>(x)[in];
}

extern "C" void permute_heads(const float* x, float* y, int batch, int seq, int heads,
                              int head_dim, cudaStream_t stream) {
    int head_quads = head_dim / 4;  // head_dim % 4 == 0 here (64)
    dim3 block(head_quads, 16);
    dim3 grid(1, (heads + 15) / 16, batch * seq);
    permute_grid3d_vec4<<<grid, block, 0, stream>>>(x, y, seq, heads, head_quads);
}
