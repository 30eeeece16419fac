// algebraic_simplification from block_row: sum and sum of squares in one pass (variance =
// E[x^2] - mean^2, accumulated in double per thread to keep the cancellation harmless), so the
// row is read twice instead of three times.
#include <cuda_runtime.h>

constexpr int kThreads = 256;

__global__ void layernorm_one_pass(const float* __restrict__ x, const float* __restrict__ weight,
                                   const float* __restrict__ bias, float* __restrict__ y,
                                   int cols) {
    __shared__ double sum_part[kThreads];
    __shared__ double sq_part[kThreads];
    const float* in = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    int t = threadIdx.x;
    float sum = 0.0f, sq = 0.0f;
    for (int c = t; c < cols; c += kThreads) {
        float v = in[c];
        sum += v;
        sq = fmaf(v, v, sq);
    }
    sum_part[t] = sum;
    sq_part[t] = sq;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
        if (t < stride) {
            sum_part[t] += sum_part[t + stride];
            sq_part[t] += sq_part[t + stride];
        }
        __syncthreads();
    }
    double mean = sum_part[0] / cols;
    float var = (float)(sq_part[0] / cols - mean * mean);
    float rstd = rsqrtf(var + 1e-5f);
    float m = (float)mean;
    for (int c = t; c < cols; c += kThreads) out[c] = (in[c] - m) * rstd * weight[c] + bias[c];
}

extern "C" void layernorm(const float* x, const float* weight, const float* bias, float* y,
                          int batch_size, int dim, cudaStream_t stream) {
    layernorm_one_pass<<<batch_size, kThreads, 0, stream>>>(x, weight, bias, y, dim);
}
