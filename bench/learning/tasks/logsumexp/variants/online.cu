// algebraic_simplification from block_row_shfl: an online max and rescaled sum in one read of
// the row instead of two; the per-thread (max, sum) pairs are merged with the same rescaling.
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Merge (m, s) with (om, os): the sum of exp(x - max) over both halves.
__device__ __forceinline__ void merge(float& m, float& s, float om, float os) {
    float nm = fmaxf(m, om);
    if (nm == -INFINITY) return;  // both empty
    s = s * expf(m - nm) + os * expf(om - nm);
    m = nm;
}

__global__ void logsumexp_online(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float sm[kWarps], ss[kWarps];
    const float* in = x + (size_t)blockIdx.x * cols;
    int t = threadIdx.x, warp = t / 32, lane = t % 32;
    float m = -INFINITY, s = 0.0f;
    for (int c = t; c < cols; c += kThreads) {
        float v = in[c];
        if (v > m) {
            s = s * expf(m - v) + 1.0f;
            m = v;
        } else {
            s += expf(v - m);
        }
    }
    for (int offset = 16; offset > 0; offset /= 2)
        merge(m, s, __shfl_xor_sync(0xffffffff, m, offset), __shfl_xor_sync(0xffffffff, s, offset));
    if (lane == 0) sm[warp] = m, ss[warp] = s;
    __syncthreads();
    if (warp == 0) {
        m = lane < kWarps ? sm[lane] : -INFINITY;
        s = lane < kWarps ? ss[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset /= 2)
            merge(m, s, __shfl_xor_sync(0xffffffff, m, offset), __shfl_xor_sync(0xffffffff, s, offset));
        if (lane == 0) y[blockIdx.x] = m + logf(s);
    }
}

extern "C" void logsumexp(const float* x, float* y, int batch_size, int dim,
                          cudaStream_t stream) {
    logsumexp_online<<<batch_size, kThreads, 0, stream>>>(x, y, dim);
}
