// vectorized_loads from grid2d: float4 accesses along each row (cols % 4 == 0 here; the
// launcher falls back to scalar columns otherwise).
#include <cuda_runtime.h>

__global__ void bias_relu_2d_vec4(const float* __restrict__ x, const float* __restrict__ b,
                                  float* __restrict__ y, int rows, int col_quads) {
    int q = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y;
    if (q >= col_quads || r >= rows) return;
    size_t i = (size_t)r * col_quads + q;
    float4 v = reinterpret_cast<const float4*>(x)[i];
    float4 c = reinterpret_cast<const float4*>(b)[q];
    reinterpret_cast<float4*>(y)[i] = make_float4(fmaxf(v.x + c.x, 0.0f), fmaxf(v.y + c.y, 0.0f),
                                                  fmaxf(v.z + c.z, 0.0f), fmaxf(v.w + c.w, 0.0f));
}

__global__ void bias_relu_2d(const float* x, const float* b, float* y, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y;
    if (c < cols && r < rows) y[(size_t)r * cols + c] = fmaxf(x[(size_t)r * cols + c] + b[c], 0.0f);
}

extern "C" void bias_relu(const float* x, const float* bias, float* y, int rows, int cols,
                          cudaStream_t stream) {
    if (cols % 4 == 0) {
        dim3 grid((cols / 4 + 255) / 256, rows);
        bias_relu_2d_vec4<<<grid, 256, 0, stream>>>(x, bias, y, rows, cols / 4);
    } else {
        dim3 grid((cols + 255) / 256, rows);
        bias_relu_2d<<<grid, 256, 0, stream>>>(x, bias, y, rows, cols);
    }
}
