// read_only_cache from vec4: __ldg on the bias, passed as const float* where a float4 is
// expected (__ldg(const float*) returns a float).
#include <cuda_runtime.h>

__global__ void bias_relu_vec4_ldg(const float* __restrict__ x, const float* __restrict__ b,
                                   float* __restrict__ y, int quads, int col_quads) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= quads) return;
    float4 v = __ldg(reinterpret_cast<const float4*>(x) + i);
    float4 c = __ldg(b + 4 * (i % col_quads));
    reinterpret_cast<float4*>(y)[i] = make_float4(fmaxf(v.x + c.x, 0.0f), fmaxf(v.y + c.y, 0.0f),
                                                  fmaxf(v.z + c.z, 0.0f), fmaxf(v.w + c.w, 0.0f));
}

extern "C" void bias_relu(const float* x, const float* bias, float* y, int rows, int cols,
                          cudaStream_t stream) {
    int quads = rows * cols / 4;
    bias_relu_vec4_ldg<<<(quads + 255) / 256, 256, 0, stream>>>(x, bias, y, quads, cols / 4);
}
