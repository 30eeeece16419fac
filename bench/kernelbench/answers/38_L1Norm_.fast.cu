// L1 normalization of each row, y = x / mean(|x|): one 256-thread block per row. The threads
// stride the row together (coalesced), the sum is a block reduction (warp shuffles, then
// shared memory), and the division becomes one multiplication per element.
#include <cuda_runtime.h>

__device__ float block_sum(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < blockDim.x / 32 ? scratch[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
        if (lane == 0) scratch[0] = v;
    }
    __syncthreads();
    return scratch[0];
}

__global__ void l1norm_kernel(const float* x, float* y, int rows, int cols) {
    __shared__ float scratch[32];
    const float* in = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += fabsf(in[c]);
    float inverse_mean = cols / block_sum(sum, scratch);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = in[c] * inverse_mean;
}

extern "C" void l1_norm(const float* x, float* y, int batch_size, int dim, cudaStream_t stream) {
    l1norm_kernel<<<batch_size, 256, 0, stream>>>(x, y, batch_size, dim);
}
