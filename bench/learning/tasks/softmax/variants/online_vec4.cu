// vectorized_loads from online: both passes read (and the second writes) float4s; dim is a
// multiple of 4 here, checked, with the scalar loops as the fallback.
#include <cuda_runtime.h>

constexpr int kThreads = 256;

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    float top = fmaxf(m, m2);
    if (top == -INFINITY) return;  // both empty
    s = s * expf(m - top) + s2 * expf(m2 - top);
    m = top;
}

__global__ void softmax_online_vec4(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float max_part[kThreads];
    __shared__ float sum_part[kThreads];
    const float* in = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    int t = threadIdx.x;
    float m = -INFINITY, s = 0.0f;
    bool vec = cols % 4 == 0;
    if (vec) {
        const float4* in4 = reinterpret_cast<const float4*>(in);
        for (int q = t; q < cols / 4; q += kThreads) {
            float4 v4 = in4[q];
            float top = fmaxf(fmaxf(v4.x, v4.y), fmaxf(v4.z, v4.w));
            if (top > m) {
                s *= expf(m - top);
                m = top;
            }
            s += expf(v4.x - m) + expf(v4.y - m) + expf(v4.z - m) + expf(v4.w - m);
        }
    } else {
        for (int c = t; c < cols; c += kThreads) {
            float v = in[c];
            if (v > m) {
                s *= expf(m - v);
                m = v;
            }
            s += expf(v - m);
        }
    }
    max_part[t] = m;
    sum_part[t] = s;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
        if (t < stride) {
            float mm = max_part[t], ss = sum_part[t];
            merge(mm, ss, max_part[t + stride], sum_part[t + stride]);
            max_part[t] = mm;
            sum_part[t] = ss;
        }
        __syncthreads();
    }
    float row_max = max_part[0];
    float inv = 1.0f / sum_part[0];
    if (vec) {
        const float4* in4 = reinterpret_cast<const float4*>(in);
        float4* out4 = reinterpret_cast<float4*>(out);
        for (int q = t; q < cols / 4; q += kThreads) {
            float4 v4 = in4[q];
            out4[q] = make_float4(expf(v4.x - row_max) * inv, expf(v4.y - row_max) * inv,
                                  expf(v4.z - row_max) * inv, expf(v4.w - row_max) * inv);
        }
    } else {
        for (int c = t; c < cols; c += kThreads) out[c] = expf(in[c] - row_max) * inv;
    }
}

extern "C" void softmax(const float* x, float* y, int batch_size, int dim, cudaStream_t stream) {
    softmax_online_vec4<<<batch_size, kThreads, 0, stream>>>(x, y, dim);
}
