// A standalone program: y = a*x + y over 2^22 floats, then prints a checksum and samples.
// Checked against saxpy_program.golden (numbers within tolerance). Deliberately naive: a
// fixed tiny block size and a blocking cudaMemcpy after every step.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(call)                                                                   \
    do {                                                                              \
        cudaError_t err = (call);                                                     \
        if (err != cudaSuccess) {                                                     \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err)); \
            std::exit(1);                                                             \
        }                                                                             \
    } while (0)

__global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

int main() {
    const int n = 1 << 22;
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; ++i) {
        x[i] = (i % 1000) * 0.001f;
        y[i] = 1.0f;
    }
    float *dx, *dy;
    CHECK(cudaMalloc(&dx, n * sizeof(float)));
    CHECK(cudaMalloc(&dy, n * sizeof(float)));
    CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    saxpy<<<(n + 63) / 64, 64>>>(2.0f, dx, dy, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    double checksum = 0.0;
    for (int i = 0; i < n; ++i) checksum += y[i];
    std::printf("checksum %.6f\n", checksum);
    std::printf("samples %.6f %.6f %.6f %.6f\n", y[0], y[1], y[999], y[n - 1]);
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    return 0;
}
