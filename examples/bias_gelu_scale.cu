// y = gelu(x + bias) * scale as a PyTorch extension. forward() receives the inputs, then the
// reference's parameters in state_dict order (here: bias). Deliberately naive: three kernels,
// each a full pass over memory, where one fused pass would do.
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void add_bias(const float* x, const float* bias, float* y, int n, int features) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + bias[i % features];
}

__global__ void gelu_inplace(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = y[i];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

__global__ void scale_inplace(float* y, float scale, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] *= scale;
}

torch::Tensor forward(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.dtype() == torch::kFloat32, "x: contiguous fp32 CUDA");
    auto y = torch::empty_like(x);
    int n = x.numel();
    int features = bias.numel();
    int block = 256, grid = (n + block - 1) / block;
    add_bias<<<grid, block>>>(x.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), n, features);
    gelu_inplace<<<grid, block>>>(y.data_ptr<float>(), n);
    scale_inplace<<<grid, block>>>(y.data_ptr<float>(), 0.5f, n);
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "gelu(x + bias) * 0.5"); }
