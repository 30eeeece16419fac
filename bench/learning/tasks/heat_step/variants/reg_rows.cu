// register_tiling from grid3d: each thread walks 8 rows down its column keeping the row above,
// its own and the row below in registers: per output one new centre load plus left and right,
// instead of five loads.
#include <cuda_runtime.h>

constexpr int kRowsPerThread = 8;

__global__ void heat_step_reg_rows(const float* __restrict__ x, float* __restrict__ y, int height,
                                   int width) {
    int w = blockIdx.x * blockDim.x + threadIdx.x;
    int h0 = (blockIdx.y * blockDim.y + threadIdx.y) * kRowsPerThread;
    if (w >= width || h0 >= height) return;
    const float* plane = x + (size_t)blockIdx.z * height * width;
    float* out = y + (size_t)blockIdx.z * height * width;
    float up = h0 > 0 ? plane[(size_t)(h0 - 1) * width + w] : 0.0f;
    float here = plane[(size_t)h0 * width + w];
    for (int i = 0; i < kRowsPerThread && h0 + i < height; ++i) {
        int h = h0 + i;
        const float* row = plane + (size_t)h * width;
        float down = h + 1 < height ? row[width + w] : 0.0f;
        float left = w > 0 ? row[w - 1] : 0.0f;
        float right = w + 1 < width ? row[w + 1] : 0.0f;
        out[(size_t)h * width + w] = here + 0.1f * ((up + down + left + right) - 4.0f * here);
        up = here;
        here = down;
    }
}

extern "C" void heat_step(const float* x, float* y, int batch, int height, int width,
                          cudaStream_t stream) {
    dim3 block(32, 8);
    dim3 grid((width + 31) / 32, (height + 8 * kRowsPerThread - 1) / (8 * kRowsPerThread), batch);
    heat_step_reg_rows<<<grid, block, 0, stream>>>(x, y, height, width);
}
