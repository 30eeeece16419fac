// Head split [B, S, H, D] -> [B, H, S, D]. Naive: a thread per element over the flat input
// index, decoded with 64-bit divisions and modulos; scalar accesses. Rows of D floats move
// whole, so reads and writes are both coalesced in 256-byte runs.
#include <cuda_runtime.h>

__global__ void permute_naive(const float* x, float* y, size_t total, int seq, int heads,
                              int head_dim) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    size_t d = i % head_dim;
    size_t h = (i / head_dim) % heads;
    size_t s = (i / ((size_t)head_dim * heads)) % seq;
    size_t b = i / ((size_t)head_dim * heads * seq);
    y[((b * heads + h) * seq + s) * head_dim + d] = x[i];
}

extern "C" void permute_heads(const float* x, float* y, int batch, int seq, int heads,
                              int head_dim, cudaStream_t stream) {
    size_t total = (size_t)batch * seq * heads * head_dim;
    permute_naive<<<(unsigned)((total + 255) / 256), 256, 0, stream>>>(x, y, total, seq, heads,
                                                                       head_dim);
}
