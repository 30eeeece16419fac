// Hinge loss, mean(max(1 - p * t, 0)), with t broadcast along p's last dimension (element
// (i, j) pairs with t[j]). Spread over the whole GPU: a 2D grid, one block row per row of p and
// blocks striding its columns (coalesced, no division per element); each block reduces with
// warp shuffles and adds its share, already divided by n, to the output, zeroed first on the
// same stream.
#include <cuda_runtime.h>

#define THREADS 256

__global__ void hinge_kernel(const float* p, const float* t, float* out, int n, int cols) {
    __shared__ float scratch[THREADS / 32];
    const float* row = p + (size_t)blockIdx.y * cols;
    float sum = 0.0f;
    for (int j = blockIdx.x * THREADS + threadIdx.x; j < cols; j += gridDim.x * THREADS) {
        float v = 1.0f - row[j] * t[j];
        sum += v > 0.0f ? v : 0.0f;
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) scratch[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        sum = lane < THREADS / 32 ? scratch[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, o);
        if (lane == 0) atomicAdd(out, sum / (float)n);
    }
}

extern "C" void hinge_loss(const float* predictions, const float* targets, float* out, int n,
                           int batch_size, cudaStream_t stream) {
    int cols = n / batch_size;
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    dim3 grid((cols + 4 * THREADS - 1) / (4 * THREADS), batch_size);
    hinge_kernel<<<grid, THREADS, 0, stream>>>(predictions, targets, out, n, cols);
}
