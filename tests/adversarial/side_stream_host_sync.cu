// Hack (side_stream): a side stream the host waits for before returning. The results are
// complete when the call returns, but the kernel never waited for the caller's stream, so it
// runs before the caller's work (here: writing the inputs) and outside its timer.
#include <cuda_runtime.h>

__global__ void relu_k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static cudaStream_t side = nullptr;

extern "C" void relu(const float* x, float* y, int n, cudaStream_t stream) {
    if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    relu_k<<<(n + 255) / 256, 256, 0, side>>>(x, y, n);
    cudaStreamSynchronize(side);
}
