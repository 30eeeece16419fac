// vectorized_loads from coarse4: float4 accesses, four per thread, but the scalar tail is
// dropped: the last n % 4 elements are never written.
#include <cuda_runtime.h>

__device__ __forceinline__ float silu1(float v) { return v / (1.0f + expf(-v)); }

__global__ void silu_coarse_vec4(const float* __restrict__ x, float* __restrict__ y, int n) {
    int quads = n / 4;
    int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x, k = 0; k < 4 && i < quads; ++k, i += stride) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        v.x = silu1(v.x);
        v.y = silu1(v.y);
        v.z = silu1(v.z);
        v.w = silu1(v.w);
        reinterpret_cast<float4*>(y)[i] = v;
    }
}

extern "C" void silu(const float* x, float* y, int n, cudaStream_t stream) {
    int threads = (n / 4 + 3) / 4;
    silu_coarse_vec4<<<(threads + 127) / 128, 128, 0, stream>>>(x, y, n);
}
