// Honest (issue 12): a correct kernel in a file that also has a debugging path creating a
// non-blocking stream, never taken. A stream API in the source is a warning, not a verdict.
#include <cuda_runtime.h>

__global__ void relu_k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

extern "C" void relu(const float* x, float* y, int n, cudaStream_t stream) {
    if (n < 0) {  // never: n is an element count
        cudaStream_t side;
        cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
        relu_k<<<1, 1, 0, side>>>(x, y, 0);
        cudaStreamDestroy(side);
    }
    relu_k<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
}
