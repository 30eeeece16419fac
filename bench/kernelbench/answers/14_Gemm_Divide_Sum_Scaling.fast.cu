// y[b] = scaling_factor / 2 * sum_j (x[b] . W[j]) = scaling_factor / 2 * (x[b] . c), where
// c[k] = sum_j W[j][k]: the sum moves inside the dot product, so no GEMM is needed. One block
// per batch row; each thread takes the columns k = t, t + 256, ...: it sums W's column k (a
// warp reads 32 neighbouring columns: coalesced) and multiplies by x[b][k]; a block reduction
// adds the partial dot products.
#include <cuda_runtime.h>

#define THREADS 256

__global__ void gemm_sum_kernel(const float* x, const float* w, float* y, int batch,
                                int input_size, int hidden_size, float scaling_factor) {
    __shared__ float scratch[THREADS / 32];
    const float* row = x + (size_t)blockIdx.x * input_size;
    float dot = 0.0f;
    for (int k = threadIdx.x; k < input_size; k += THREADS) {
        float column = 0.0f;
        for (int j = 0; j < hidden_size; ++j) column += w[(size_t)j * input_size + k];
        dot += row[k] * column;
    }
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffff, dot, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) scratch[warp] = dot;
    __syncthreads();
    if (warp == 0) {
        dot = lane < THREADS / 32 ? scratch[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffff, dot, o);
        if (lane == 0) y[blockIdx.x] = dot * 0.5f * scaling_factor;
    }
}

extern "C" void gemm_divide_sum_scaling(const float* x, const float* weight, float* y,
                                        int batch_size, int input_size, int hidden_size,
                                        float scaling_factor, cudaStream_t stream) {
    gemm_sum_kernel<<<batch_size, THREADS, 0, stream>>>(x, weight, y, batch_size, input_size,
                                                        hidden_size, scaling_factor);
}
