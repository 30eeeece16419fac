// grid_waves from vec4: a grid of whole waves (8 blocks of 256 per SM) with a grid-stride loop
// over float4 quads, scalar tail as before.
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu_exact(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__global__ void gelu_vec4_gridstride(const float* __restrict__ x, float* __restrict__ y, int n) {
    int quads = n / 4;
    int stride = gridDim.x * blockDim.x;
    int first = blockIdx.x * blockDim.x + threadIdx.x;
    for (int i = first; i < quads; i += stride) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        v.x = gelu_exact(v.x);
        v.y = gelu_exact(v.y);
        v.z = gelu_exact(v.z);
        v.w = gelu_exact(v.w);
        reinterpret_cast<float4*>(y)[i] = v;
    }
    if (first < n - quads * 4) y[quads * 4 + first] = gelu_exact(x[quads * 4 + first]);
}

extern "C" void gelu(const float* x, float* y, int n, cudaStream_t stream) {
    static int sms = 0;
    if (sms == 0) {
        int device = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    }
    gelu_vec4_gridstride<<<sms * 8, 256, 0, stream>>>(x, y, n);
}
