// Row sums, plain CUDA: the rewrite bench/proposal_mechanics.py's scripted model returns for the
// technique it proposed ("warp_row_streaming_reduce"). One warp per row: its lanes read
// consecutive floats (coalesced) with evict-first streaming loads (__ldcs: every element is read
// exactly once, so it should not displace lines in L2), then combine their partial sums with
// warp shuffles. 8192 rows become 8192 warps instead of 8192 threads.
#include <cuda_runtime.h>

__global__ void row_sum_warp_streaming(const float* __restrict__ x, float* __restrict__ out,
                                       int rows, int cols) {
    long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int row = (int)(thread / 32);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;  // the whole warp leaves together: `row` is uniform per warp
    const float* values = x + (size_t)row * cols;
    float acc = 0.0f;
    for (int c = lane; c < cols; c += 32) acc += __ldcs(values + c);
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if (lane == 0) out[row] = acc;
}

extern "C" void row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    const int threads = 256;  // 8 warps: 8 rows per block
    long long total = (long long)rows * 32;
    unsigned blocks = (unsigned)((total + threads - 1) / threads);
    row_sum_warp_streaming<<<blocks, threads, 0, stream>>>(x, out, rows, cols);
}
