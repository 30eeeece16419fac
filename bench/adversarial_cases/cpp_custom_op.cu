// Adversarial suite (bench/adversarial_suite.py), honest twin of the C++ tampering cases: its
// own operator in its own namespace, defined and given a CUDA kernel by static initializers
// (TORCH_LIBRARY, TORCH_LIBRARY_IMPL) and called through torch's dispatcher. It changes
// nothing of what torch's own operators compute: must pass.
#include <torch/extension.h>
#include <torch/library.h>
#include <ATen/core/dispatch/Dispatcher.h>

__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static torch::Tensor relu_cuda(const torch::Tensor& x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.dtype() == torch::kFloat32,
                "x: contiguous fp32 CUDA");
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}

TORCH_LIBRARY(kb_adversarial_cpp, m) { m.def("relu(Tensor x) -> Tensor"); }

TORCH_LIBRARY_IMPL(kb_adversarial_cpp, CUDA, m) { m.impl("relu", &relu_cuda); }

torch::Tensor forward(torch::Tensor x) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("kb_adversarial_cpp::relu", "")
                         .typed<torch::Tensor(const torch::Tensor&)>();
    return op.call(x);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "relu through its own op"); }
