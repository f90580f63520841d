// GELU, exact (erf) or tanh form, on f32 or bf16 (arithmetic in f32), forward and
// backward, element by element: where the portable path's backward runs ~10 candle ops
// (each a kernel and a pass over the (B, T, 4C) activation). The formulas are the CPU
// kernel's (src/ops/fused/gelu.rs) with CUDA's erff and tanhf. Tested against the portable
// path by tests/gpu.rs.
//
// bias_gelu_*: the MLP's bias add and GELU in one pass (y = gelu(x + b), b the f32 master
// bias), where bias_fwd then gelu_fwd wrote and read the (B, T, 4C) activation once more;
// x + b is rounded to T before the GELU as bias_fwd stores it, so the bits are the two
// kernels'. The backward recomputes it: du = dy gelu'(x + b), the bias's gradient then
// the column sums of du (kernels/bias.cu).

#include "common.cuh"

#define SQRT_2_OVER_PI 0.7978846f
#define INV_SQRT_2 0.70710678f
#define INV_SQRT_2PI 0.3989423f

__device__ __forceinline__ float gelu(float x, int tanh_form) {
    if (tanh_form) return 0.5f * x * (1.f + tanhf(SQRT_2_OVER_PI * (x + 0.044715f * x * x * x)));
    return 0.5f * x * (1.f + erff(x * INV_SQRT_2));
}

__device__ __forceinline__ float gelu_grad(float x, int tanh_form) {
    if (tanh_form) {
        const float t = tanhf(SQRT_2_OVER_PI * (x + 0.044715f * x * x * x));
        const float du = SQRT_2_OVER_PI * (1.f + 3.f * 0.044715f * x * x);
        return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * du;
    }
    // d/dx x Phi(x) = Phi(x) + x phi(x).
    return 0.5f * (1.f + erff(x * INV_SQRT_2)) + x * expf(-0.5f * x * x) * INV_SQRT_2PI;
}

#define GELU(SUFFIX, T)                                                                       \
    extern "C" __global__ void gelu_fwd_##SUFFIX(const T *x, T *y, int64_t n, int tanh_form) { \
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;               \
             i += (int64_t)blockDim.x * gridDim.x)                                            \
            store(y + i, gelu(to_f(x[i]), tanh_form));                                        \
    }                                                                                         \
    extern "C" __global__ void gelu_bwd_##SUFFIX(const T *x, const T *dy, T *dx, int64_t n,   \
                                                 int tanh_form) {                             \
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;               \
             i += (int64_t)blockDim.x * gridDim.x)                                            \
            store(dx + i, to_f(dy[i]) * gelu_grad(to_f(x[i]), tanh_form));                    \
    }

// x + b[c] as bias_fwd stores it in T, read back in f32.
template <typename T>
__device__ __forceinline__ float biased(const T *x, const float *b, int64_t i, int64_t c) {
    T u;
    store(&u, to_f(x[i]) + b[c]);
    return to_f(u);
}

// One thread a column of a row, rows strided over the grid's y (as bias_fwd).
#define BIAS_GELU(SUFFIX, T)                                                                  \
    extern "C" __global__ void bias_gelu_fwd_##SUFFIX(const T *x, const float *b, T *y,       \
                                                      int64_t N, int64_t C, int tanh_form) {  \
        const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;                     \
        if (c >= C) return;                                                                   \
        for (int64_t r = blockIdx.y; r < N; r += gridDim.y)                                   \
            store(y + r * C + c, gelu(biased(x, b, r * C + c, c), tanh_form));                \
    }                                                                                         \
    extern "C" __global__ void bias_gelu_bwd_##SUFFIX(const T *x, const float *b, const T *dy, \
                                                      T *du, int64_t N, int64_t C,            \
                                                      int tanh_form) {                        \
        const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;                     \
        if (c >= C) return;                                                                   \
        for (int64_t r = blockIdx.y; r < N; r += gridDim.y) {                                 \
            const int64_t i = r * C + c;                                                      \
            store(du + i, to_f(dy[i]) * gelu_grad(biased(x, b, i, c), tanh_form));           \
        }                                                                                     \
    }

GELU(f32, float)
GELU(bf16, __nv_bfloat16)
BIAS_GELU(f32, float)
BIAS_GELU(bf16, __nv_bfloat16)
