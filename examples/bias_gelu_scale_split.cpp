// The torch side of the two-file extension: forward() receives the inputs, then the reference's
// parameters in state_dict order (here: bias), and launches the kernels of
// bias_gelu_scale_split.cu through the function declared below.
#include <torch/extension.h>

void bias_gelu_scale(const float* x, const float* bias, float* y, int n, int features);

torch::Tensor forward(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.dtype() == torch::kFloat32, "x: contiguous fp32 CUDA");
    auto y = torch::empty_like(x);
    bias_gelu_scale(x.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), x.numel(), bias.numel());
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "gelu(x + bias) * 0.5"); }
