// Cross-entropy of logits (N, V) in f32 or bf16 against u32 targets, one thread block per
// row (arithmetic in f32): each row's loss `log sum exp(x) - x[target]` forward, and
// `(softmax(x) - onehot(target)) * g` backward. The portable path does this in ~7 candle
// ops forward and ~10 backward over an f32 copy of the logits; GPT-2's are 8192 x 50304
// at batch 8: each of those passes moves 1.6 GB. The same arithmetic as the CPU kernel
// (src/ops/fused/cross_entropy.rs) with the max and the sum taken together (online
// softmax); the backward takes their log back from the forward's loss. Threads combine in
// a fixed order: the same bits every run. Tested against the portable path by tests/gpu.rs.

#include "common.cuh"

// (m, s) <- the running max and sum of exp(x - max) of two parts together. Two empty
// parts (max -inf) stay empty instead of computing exp(-inf + inf).
__device__ __forceinline__ void combine(float &m, float &s, float m2, float s2) {
    const float mn = fmaxf(m, m2);
    if (mn == -INFINITY) {
        m = mn;
        s = 0.f;
        return;
    }
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}

// The row's max and sum of exp(x - max), in every thread of the block (blockDim.x a
// multiple of 32, at most 1024). Called once a kernel: its shared memory is not re-armed.
template <typename T>
__device__ __forceinline__ void row_max_sum(const T *x, int64_t V, float *m_out, float *s_out) {
    float m = -INFINITY, s = 0.f;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
        const float xv = to_f(x[v]);
        if (xv > m) {
            s = s * expf(m - xv) + 1.f;
            m = xv;
        } else {
            s += expf(xv - m);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        combine(m, s, m2, s2);
    }
    __shared__ float sm[32], ss[32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    if (lane == 0) {
        sm[warp] = m;
        ss[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
        m = lane < warps ? sm[lane] : -INFINITY;
        s = lane < warps ? ss[lane] : 0.f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
            const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
            combine(m, s, m2, s2);
        }
        if (lane == 0) {
            sm[0] = m;
            ss[0] = s;
        }
    }
    __syncthreads();
    *m_out = sm[0];
    *s_out = ss[0];
}

// loss[row] = log(sum exp(x - max)) - (x[target] - max); a target outside the row gives
// NaN, which the trainer's divergence guard names.
template <typename T>
__device__ void ce_fwd(const T *logits, const uint32_t *targets, float *loss, int64_t V) {
    const int64_t row = blockIdx.x;
    const T *x = logits + row * V;
    float m, s;
    row_max_sum(x, V, &m, &s);
    if (threadIdx.x == 0) {
        const uint32_t t = targets[row];
        const float xt = t < V ? to_f(x[t]) : NAN;
        loss[row] = logf(s) - (xt - m);
    }
}

// dx[row, v] = (exp(x - log sum exp(x)) - [v == target]) * g[row], in one pass over the
// row: the forward's loss gives the log-sum-exp back, loss[row] + x[target] (exact but for
// one f32 rounding), where recomputing the max and the sum read the row twice (1.65 ms of
// the H200's step, call 2). gl holds g (N,) then the forward's losses (N,).
template <typename T>
__device__ void ce_bwd(const T *logits, const uint32_t *targets, const float *gl, T *dx,
                       int64_t V, int64_t N) {
    const int64_t row = blockIdx.x;
    const T *x = logits + row * V;
    const uint32_t t = targets[row];
    const float lse = gl[N + row] + (t < V ? to_f(x[t]) : NAN), gr = gl[row];
    T *d = dx + row * V;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
        const float p = expf(to_f(x[v]) - lse);
        store(d + v, (v == t ? p - 1.f : p) * gr);
    }
}

// The same gradient with each row's max and sum recomputed (what the one pass replaced;
// TP_CUDA_OFF=ce-one-pass runs it).
template <typename T>
__device__ void ce_bwd_recompute(const T *logits, const uint32_t *targets, const float *gl,
                                 T *dx, int64_t V) {
    const int64_t row = blockIdx.x;
    const T *x = logits + row * V;
    float m, s;
    row_max_sum(x, V, &m, &s);
    const float lse = logf(s), gr = gl[row];
    const uint32_t t = targets[row];
    T *d = dx + row * V;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
        const float p = expf(to_f(x[v]) - m - lse);
        store(d + v, (v == t ? p - 1.f : p) * gr);
    }
}

#define CROSS_ENTROPY(SUFFIX, T)                                                              \
    extern "C" __global__ void ce_fwd_##SUFFIX(const T *logits, const uint32_t *targets,      \
                                               float *loss, int64_t V) {                      \
        ce_fwd<T>(logits, targets, loss, V);                                                  \
    }                                                                                         \
    extern "C" __global__ void ce_bwd_##SUFFIX(const T *logits, const uint32_t *targets,      \
                                               const float *gl, T *dx, int64_t V, int64_t N) { \
        ce_bwd<T>(logits, targets, gl, dx, V, N);                                             \
    }                                                                                         \
    extern "C" __global__ void ce_bwd_recompute_##SUFFIX(const T *logits,                      \
                                                         const uint32_t *targets,             \
                                                         const float *gl, T *dx, int64_t V) { \
        ce_bwd_recompute<T>(logits, targets, gl, dx, V);                                      \
    }

CROSS_ENTROPY(f32, float)
CROSS_ENTROPY(bf16, __nv_bfloat16)
