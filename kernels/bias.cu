// A linear layer's bias: y = x + b over rows of x (N, C) in f32 or bf16 with an f32 bias
// (the master weight, added in f32 and rounded once), and its gradient db = the column
// sums of dy in f32. candle's broadcast add gives each element a strided index (a
// division per dimension) and its row sums one block a column: on the first H200 run
// (2026-11-28) the two took ~12 ms of GPT-2's 77 ms bf16 step, about 5x what their
// memory traffic needs.
//
//   bias_fwd      one thread a column of a row (rows strided over the grid's y, so no
//                 index division): y = x + b[column]
//   bias_partial  one thread a column for `rows` consecutive rows: partial[p, c],
//                 coalesced across a warp's adjacent columns
//   bias_reduce   one warp a column: the partial sums added in a fixed order
// No atomics: the same bits every run. tests/gpu.rs holds both to candle's f32 broadcast
// add on the same values, rounded once: bit for bit (the gradient to 1e-5).

#include "common.cuh"

template <typename T>
__device__ void bias_fwd(const T *x, const float *b, T *y, int64_t N, int64_t C) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const float bc = b[c];
    for (int64_t r = blockIdx.y; r < N; r += gridDim.y)
        store(y + r * C + c, to_f(x[r * C + c]) + bc);
}

// partial (P, C), P = ceil(N / rows): row p holds the sum over rows p*rows .. of dy.
template <typename T>
__device__ void bias_partial(const T *dy, float *partial, int64_t N, int64_t C, int rows) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t p = blockIdx.y;
    if (c >= C) return;
    const int64_t r0 = p * rows;
    const int64_t r1 = r0 + rows < N ? r0 + rows : N;
    float s = 0.f;
    for (int64_t r = r0; r < r1; r++) s += to_f(dy[r * C + c]);
    partial[p * C + c] = s;
}

// db[c] = sum over p of partial[p, c].
extern "C" __global__ void bias_reduce(const float *partial, float *db, int64_t P, int64_t C) {
    sum_partials_by_column(partial, db, P, C);
}

#define BIAS(SUFFIX, T)                                                                       \
    extern "C" __global__ void bias_fwd_##SUFFIX(const T *x, const float *b, T *y, int64_t N, \
                                                 int64_t C) {                                 \
        bias_fwd<T>(x, b, y, N, C);                                                           \
    }                                                                                         \
    extern "C" __global__ void bias_partial_##SUFFIX(const T *dy, float *partial, int64_t N,  \
                                                     int64_t C, int rows) {                   \
        bias_partial<T>(dy, partial, N, C, rows);                                             \
    }

BIAS(f32, float)
BIAS(bf16, __nv_bfloat16)
