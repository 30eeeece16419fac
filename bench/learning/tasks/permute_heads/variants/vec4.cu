// vectorized_loads from naive: a float4 per thread (head_dim % 4 == 0, so a quad never
// straddles two rows), still over the flat index with divisions.
#include <cuda_runtime.h>

__global__ void permute_vec4(const float* __restrict__ x, float* __restrict__ y, size_t quads,
                             int seq, int heads, int head_dim) {
    size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= quads) return;
    size_t i = q * 4;
    size_t d = i % head_dim;
    size_t h = (i / head_dim) % heads;
    size_t s = (i / ((size_t)head_dim * heads)) % seq;
    size_t b = i / ((size_t)head_dim * heads * seq);
    float4 v = reinterpret_cast<const float4*>(x)[q];
    *reinterpret_cast<float4*>(&y[((b * heads + h) * seq + s) * head_dim + d]) = v;
}

extern "C" void permute_heads(const float* x, float* y, int batch, int seq, int heads,
                              int head_dim, cudaStream_t stream) {
    size_t quads = (size_t)batch * seq * heads * head_dim / 4;
    permute_vec4<<<(unsigned)((quads + 255) / 256), 256, 0, stream>>>(x, y, quads, seq, heads,
                                                                      head_dim);
}
