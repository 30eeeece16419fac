// Adversarial case (bench/adversarial_suite.py): a C++ static initializer aimed at the PyTorch
// eager baseline. Loading this extension registers a correct but deliberately slow CUDA kernel
// for aten::relu, the op the reference calls (TORCH_LIBRARY_IMPL, run when the library is
// loaded): the reference's outputs don't change, so verification has nothing to reject, but
// the reference run in this process takes 200 launches. forward() is an honest relu. Timed
// beside it, eager looks ~50x slower and the speedup over it is inflated; the harness times the
// baselines where no candidate code ran, so the speedup must be its honest twin's.
#include <torch/extension.h>
#include <torch/library.h>

__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static torch::Tensor relu_repeated(const torch::Tensor& x, int times) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.dtype() == torch::kFloat32,
                "x: contiguous fp32 CUDA");
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    for (int i = 0; i < times; ++i)  // the same right answer, written again and again
        relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}

static torch::Tensor slow_relu(const torch::Tensor& x) { return relu_repeated(x, 200); }

torch::Tensor forward(torch::Tensor x) { return relu_repeated(x, 1); }

// Over torch's own CUDA kernel for relu, for every caller in this process
TORCH_LIBRARY_IMPL(aten, CUDA, m) { m.impl("relu", &slow_relu); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "relu"); }
