// grid_waves from vec4: a grid of whole waves with a grid-stride loop, but the loop strides by
// the grid size times 4 (elements, not quads): three quads in four are never written.
#include <cuda_runtime.h>

__global__ void permute_vec4_waves(const float* __restrict__ x, float* __restrict__ y,
                                   size_t quads, int seq, int heads, int head_dim) {
    size_t stride = (size_t)gridDim.x * blockDim.x * 4;
    for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < quads; q += stride) {
        size_t i = q * 4;
        size_t d = i % head_dim;
        size_t h = (i / head_dim) % heads;
        size_t s = (i / ((size_t)head_dim * heads)) % seq;
        size_t b = i / ((size_t)head_dim * heads * seq);
        float4 v = reinterpret_cast<const float4*>(x)[q];
        *reinterpret_cast<float4*>(&y[((b * heads + h) * seq + s) * head_dim + d]) = v;
    }
}

extern "C" void permute_heads(const float* x, float* y, int batch, int seq, int heads,
                              int head_dim, cudaStream_t stream) {
    int sms = 0, device = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    size_t quads = (size_t)batch * seq * heads * head_dim / 4;
    permute_vec4_waves<<<sms * 8, 256, 0, stream>>>(x, y, quads, seq, heads, head_dim);
}
