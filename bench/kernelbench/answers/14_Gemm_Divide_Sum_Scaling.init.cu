// y[b] = scaling_factor * sum_j (x[b] . W[j]) / 2, plain CUDA: one thread per batch row,
// computing every dot product of its row with W's rows, one after another.
#include <cuda_runtime.h>

__global__ void gemm_sum_kernel(const float* x, const float* w, float* y, int batch,
                                int input_size, int hidden_size, float scaling_factor) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= batch) return;
    const float* row = x + (size_t)b * input_size;
    float total = 0.0f;
    for (int j = 0; j < hidden_size; ++j) {
        const float* wj = w + (size_t)j * input_size;
        float dot = 0.0f;
        for (int k = 0; k < input_size; ++k) dot += row[k] * wj[k];
        total += dot / 2.0f;
    }
    y[b] = total * scaling_factor;
}

extern "C" void gemm_divide_sum_scaling(const float* x, const float* weight, float* y,
                                        int batch_size, int input_size, int hidden_size,
                                        float scaling_factor, cudaStream_t stream) {
    gemm_sum_kernel<<<(batch_size + 127) / 128, 128, 0, stream>>>(
        x, weight, y, batch_size, input_size, hidden_size, scaling_factor);
}
