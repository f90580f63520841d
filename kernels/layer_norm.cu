// LayerNorm over the last dimension, `y = (x - mean) / sqrt(var + eps) * w (+ b)`, for
// rows of x (N, C) in f32 or bf16 (statistics and arithmetic in f32; w, b, dw, db f32):
// what the portable path does in ~10 candle ops forward and ~25 backward, each a kernel
// launch and a pass over memory. The same arithmetic as the CPU kernel
// (src/ops/fused/layer_norm.rs): two-pass mean and variance, the backward recomputing
// the row statistics instead of keeping them.
//
//   ln_fwd        one warp per row: y
//   ln_dx         one warp per row: dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w
//   ln_dw_partial one warp per ROWS_PER_WARP rows: its rows' sums of dy xhat (dw) and of
//                 dy (db) per column
//   ln_dw_reduce  one warp per column: the warps' partial sums in a fixed order
// The bias is added, and its gradient summed, in f32 here: added as a bf16 tensor after
// the norm, it and its gradient would each be rounded to bf16 (and cost two more passes).
// No atomics: the same bits every run. Tested against the portable path by tests/gpu.rs.

#include "common.cuh"

// Mean and 1 / std of a row (every lane ends with both).
template <typename T>
__device__ __forceinline__ void row_stats(const T *x, int C, int lane, float eps, float *mean,
                                          float *rstd) {
    float s = 0.f;
    for (int c = lane; c < C; c += 32) s += to_f(x[c]);
    const float m = warp_sum(s) / C;
    float q = 0.f;
    for (int c = lane; c < C; c += 32) {
        const float d = to_f(x[c]) - m;
        q += d * d;
    }
    *mean = m;
    *rstd = 1.f / sqrtf(warp_sum(q) / C + eps);
}

// b is read only where has_bias (else any valid pointer).
template <typename T>
__device__ void ln_fwd(const T *x, const float *w, const float *b, int has_bias, T *y,
                       int64_t N, int C, float eps) {
    const int64_t row = warp_index();
    if (row >= N) return;
    const int lane = threadIdx.x;
    const T *xr = x + row * C;
    T *yr = y + row * C;
    float mean, rstd;
    row_stats(xr, C, lane, eps, &mean, &rstd);
    for (int c = lane; c < C; c += 32)
        store(yr + c, (to_f(xr[c]) - mean) * rstd * w[c] + (has_bias ? b[c] : 0.f));
}

template <typename T>
__device__ void ln_dx(const T *x, const float *w, const T *dy, T *dx, int64_t N, int C,
                      float eps) {
    const int64_t row = warp_index();
    if (row >= N) return;
    const int lane = threadIdx.x;
    const T *xr = x + row * C;
    const T *gr = dy + row * C;
    float mean, rstd;
    row_stats(xr, C, lane, eps, &mean, &rstd);
    float s1 = 0.f, s2 = 0.f;
    for (int c = lane; c < C; c += 32) {
        const float xhat = (to_f(xr[c]) - mean) * rstd;
        const float g = to_f(gr[c]) * w[c];
        s1 += g;
        s2 += g * xhat;
    }
    const float m1 = warp_sum(s1) / C, m2 = warp_sum(s2) / C;
    T *dr = dx + row * C;
    for (int c = lane; c < C; c += 32) {
        const float xhat = (to_f(xr[c]) - mean) * rstd;
        const float g = to_f(gr[c]) * w[c];
        store(dr + c, rstd * (g - m1 - xhat * m2));
    }
}

// Columns a lane sums in registers in ln_dw_partial: rows up to 32 x 32 = 1024 wide (GPT-2's
// 768: 24 a lane). Wider rows sum in the partial's global memory instead.
#define LN_LANE_COLS 32

// partial (P, 2C), P = ceil(N / rows_per_warp): row p holds the sums over warp p's rows
// of dy * xhat (columns 0..C) and of dy (C..2C). Each lane reads and writes only its own
// columns: no race. The sums are kept in registers and written once (a read-modify-write
// of the partial row a row made it 1.8 ms of an H200's 39.7 ms GPT-2 step, 2026-11-29);
// the same additions in the same order either way. in_registers 0 (TP_CUDA_OFF=
// ln-register-sums) sums in the partial's memory as before.
template <typename T>
__device__ void ln_dw_partial(const T *x, const T *dy, float *partial, int64_t N, int C,
                              float eps, int rows_per_warp, int in_registers) {
    const int64_t wid = warp_index();
    const int64_t r0 = wid * rows_per_warp;
    if (r0 >= N) return;
    const int64_t r1 = r0 + rows_per_warp < N ? r0 + rows_per_warp : N;
    const int lane = threadIdx.x;
    float *pw = partial + wid * 2 * C;
    if (in_registers && C <= 32 * LN_LANE_COLS) {
        float dw[LN_LANE_COLS], db[LN_LANE_COLS];
#pragma unroll
        for (int e = 0; e < LN_LANE_COLS; e++) dw[e] = db[e] = 0.f;
        for (int64_t r = r0; r < r1; r++) {
            const T *xr = x + r * C;
            const T *gr = dy + r * C;
            float mean, rstd;
            row_stats(xr, C, lane, eps, &mean, &rstd);
#pragma unroll
            for (int e = 0; e < LN_LANE_COLS; e++) {
                const int c = lane + 32 * e;
                if (c < C) {
                    const float g = to_f(gr[c]);
                    dw[e] += g * (to_f(xr[c]) - mean) * rstd;
                    db[e] += g;
                }
            }
        }
#pragma unroll
        for (int e = 0; e < LN_LANE_COLS; e++) {
            const int c = lane + 32 * e;
            if (c < C) {
                pw[c] = dw[e];
                pw[C + c] = db[e];
            }
        }
        return;
    }
    for (int c = lane; c < 2 * C; c += 32) pw[c] = 0.f;
    for (int64_t r = r0; r < r1; r++) {
        const T *xr = x + r * C;
        const T *gr = dy + r * C;
        float mean, rstd;
        row_stats(xr, C, lane, eps, &mean, &rstd);
        for (int c = lane; c < C; c += 32) {
            const float g = to_f(gr[c]);
            pw[c] += g * (to_f(xr[c]) - mean) * rstd;
            pw[C + c] += g;
        }
    }
}

// out[c] = sum over p of partial[p, c] for partial (P, cols).
extern "C" __global__ void ln_dw_reduce(const float *partial, float *out, int64_t P, int cols) {
    sum_partials_by_column(partial, out, P, cols);
}

#define LAYER_NORM(SUFFIX, T)                                                                 \
    extern "C" __global__ void ln_fwd_##SUFFIX(const T *x, const float *w, const float *b,    \
                                               int has_bias, T *y, int64_t N, int C,          \
                                               float eps) {                                   \
        ln_fwd<T>(x, w, b, has_bias, y, N, C, eps);                                           \
    }                                                                                         \
    extern "C" __global__ void ln_dx_##SUFFIX(const T *x, const float *w, const T *dy, T *dx, \
                                              int64_t N, int C, float eps) {                  \
        ln_dx<T>(x, w, dy, dx, N, C, eps);                                                    \
    }                                                                                         \
    extern "C" __global__ void ln_dw_partial_##SUFFIX(const T *x, const T *dy, float *partial, \
                                                      int64_t N, int C, float eps,            \
                                                      int rows_per_warp, int in_registers) {  \
        ln_dw_partial<T>(x, dy, partial, N, C, eps, rows_per_warp, in_registers);             \
    }

LAYER_NORM(f32, float)
LAYER_NORM(bf16, __nv_bfloat16)
