// Honest: softmax over 393,216 columns, a block per row (max, then sum of exponentials, then
// the quotients), in fp32. The twin of softmax_zeros.cu.
#include <cuda_runtime.h>

constexpr int THREADS = 1024;

__device__ float block_reduce(float v, float* shared, bool is_max) {
    for (int offset = 16; offset > 0; offset /= 2) {
        float other = __shfl_down_sync(0xffffffff, v, offset);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < THREADS / 32 ? shared[lane] : (is_max ? -INFINITY : 0.0f);
        for (int offset = 16; offset > 0; offset /= 2) {
            float other = __shfl_down_sync(0xffffffff, v, offset);
            v = is_max ? fmaxf(v, other) : v + other;
        }
        if (lane == 0) shared[0] = v;
    }
    __syncthreads();
    float result = shared[0];
    __syncthreads();
    return result;
}

__global__ void softmax_k(const float* x, float* y, int dim) {
    __shared__ float shared[THREADS / 32];
    const float* row = x + (size_t)blockIdx.x * dim;
    float* out = y + (size_t)blockIdx.x * dim;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < dim; i += THREADS) m = fmaxf(m, row[i]);
    m = block_reduce(m, shared, true);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < dim; i += THREADS) sum += expf(row[i] - m);
    sum = block_reduce(sum, shared, false);
    for (int i = threadIdx.x; i < dim; i += THREADS) out[i] = expf(row[i] - m) / sum;
}

extern "C" void softmax(const float* x, float* y, int batch_size, int dim, cudaStream_t stream) {
    softmax_k<<<batch_size, THREADS, 0, stream>>>(x, y, dim);
}
