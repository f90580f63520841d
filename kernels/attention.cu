// Causal self-attention on a packed qkv (B, T, 3L), L = H * D (Q, K, V blocks of L
// columns, head h at columns h*D..(h+1)*D of each), to y (B, T, L), without ever holding
// the (B, H, T, T) probabilities: the forward keeps a running max and sum per query row
// (online softmax, as flash attention does), the backward recomputes them.
//
// One warp per row. A lane holds elements d = lane + 32 k (k < D_MAX / 32) of a row, so a
// dot product is a per-lane partial sum and a butterfly reduction, which every lane ends
// with; the same lane split in every kernel makes q.k identical wherever it is recomputed.
//
// Backward, without atomics (deterministic):
//   attn_bwd_q  (one warp per query row i): delta_i = dy_i . y_i, the row's log-sum-exp,
//                and dq_i = scale * sum_{j<=i} p_ij (dy_i . v_j - delta_i) k_j
//   attn_bwd_kv (one warp per key row j):   dv_j = sum_{i>=j} p_ij dy_i,
//                dk_j = scale * sum_{i>=j} p_ij (dy_i . v_j - delta_i) q_i
// Tested against the portable path by tests/gpu.rs.

#include "common.cuh"

#define D_MAX 128
#define PER_LANE (D_MAX / 32)

template <typename T>
__device__ __forceinline__ void load_row(const T *p, int D, int lane, float *r) {
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) {
        int d = lane + 32 * k;
        r[k] = d < D ? to_f(p[d]) : 0.f;
    }
}

template <typename T>
__device__ __forceinline__ float dot_row(const float *r, const T *p, int D, int lane) {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) {
        int d = lane + 32 * k;
        if (d < D) s += r[k] * to_f(p[d]);
    }
    return warp_sum(s);
}

// The (batch, head, position) of this warp's row; false past the last row.
__device__ __forceinline__ bool row_of(int B, int T, int H, int64_t *b, int *h, int *i) {
    int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
    if (r >= (int64_t)B * H * T) return false;
    *i = (int)(r % T);
    int64_t bh = r / T;
    *h = (int)(bh % H);
    *b = bh / H;
    return true;
}

template <typename T>
__device__ void attn_fwd(const T *qkv, T *y, int B, int T_, int H, int D, float scale) {
    int64_t b; int h, i;
    if (!row_of(B, T_, H, &b, &h, &i)) return;
    const int lane = threadIdx.x;
    const int64_t L = (int64_t)H * D, row = 3 * L;
    const T *base = qkv + b * T_ * row + (int64_t)h * D;
    float q[PER_LANE], acc[PER_LANE];
    load_row(base + i * row, D, lane, q);
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) acc[k] = 0.f;
    float m = -INFINITY, l = 0.f;
    for (int j = 0; j <= i; j++) {
        float s = dot_row(q, base + j * row + L, D, lane) * scale;
        float m_new = fmaxf(m, s);
        float c = expf(m - m_new);
        float p = expf(s - m_new);
        l = l * c + p;
        const T *v = base + j * row + 2 * L;
#pragma unroll
        for (int k = 0; k < PER_LANE; k++) {
            int d = lane + 32 * k;
            if (d < D) acc[k] = acc[k] * c + p * to_f(v[d]);
        }
        m = m_new;
    }
    T *out = y + (b * T_ + i) * L + (int64_t)h * D;
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) {
        int d = lane + 32 * k;
        if (d < D) store(out + d, acc[k] / l);
    }
}

template <typename T>
__device__ void attn_bwd_q(const T *qkv, const T *y, const T *dy, T *dqkv, float *lse,
                           float *delta, int B, int T_, int H, int D, float scale) {
    int64_t b; int h, i;
    if (!row_of(B, T_, H, &b, &h, &i)) return;
    const int lane = threadIdx.x;
    const int64_t L = (int64_t)H * D, row = 3 * L;
    const T *base = qkv + b * T_ * row + (int64_t)h * D;
    const int64_t yrow = (b * T_ + i) * L + (int64_t)h * D;
    float q[PER_LANE], g[PER_LANE], dq[PER_LANE];
    load_row(base + i * row, D, lane, q);
    load_row(dy + yrow, D, lane, g);
    const float dlt = dot_row(g, y + yrow, D, lane);
    float m = -INFINITY, l = 0.f;
    for (int j = 0; j <= i; j++) {
        float s = dot_row(q, base + j * row + L, D, lane) * scale;
        float m_new = fmaxf(m, s);
        l = l * expf(m - m_new) + expf(s - m_new);
        m = m_new;
    }
    const float lse_i = m + logf(l);
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) dq[k] = 0.f;
    for (int j = 0; j <= i; j++) {
        const T *kj = base + j * row + L;
        float p = expf(dot_row(q, kj, D, lane) * scale - lse_i);
        float ds = p * (dot_row(g, kj + L, D, lane) - dlt);
#pragma unroll
        for (int k = 0; k < PER_LANE; k++) {
            int d = lane + 32 * k;
            if (d < D) dq[k] += ds * to_f(kj[d]);
        }
    }
    T *out = dqkv + (b * T_ + i) * row + (int64_t)h * D;
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) {
        int d = lane + 32 * k;
        if (d < D) store(out + d, dq[k] * scale);
    }
    if (lane == 0) {
        const int64_t r = (b * H + h) * T_ + i;
        lse[r] = lse_i;
        delta[r] = dlt;
    }
}

template <typename T>
__device__ void attn_bwd_kv(const T *qkv, const T *dy, T *dqkv, const float *lse,
                            const float *delta, int B, int T_, int H, int D, float scale) {
    int64_t b; int h, j;
    if (!row_of(B, T_, H, &b, &h, &j)) return;
    const int lane = threadIdx.x;
    const int64_t L = (int64_t)H * D, row = 3 * L;
    const T *base = qkv + b * T_ * row + (int64_t)h * D;
    const T *dyb = dy + b * T_ * L + (int64_t)h * D;
    const int64_t stats = (b * H + h) * T_;
    float kj[PER_LANE], vj[PER_LANE], dk[PER_LANE], dv[PER_LANE];
    load_row(base + j * row + L, D, lane, kj);
    load_row(base + j * row + 2 * L, D, lane, vj);
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) { dk[k] = 0.f; dv[k] = 0.f; }
    for (int i = j; i < T_; i++) {
        const T *qi = base + i * row;
        const T *gi = dyb + i * L;
        float p = expf(dot_row(kj, qi, D, lane) * scale - lse[stats + i]);
        float ds = p * (dot_row(vj, gi, D, lane) - delta[stats + i]);
#pragma unroll
        for (int k = 0; k < PER_LANE; k++) {
            int d = lane + 32 * k;
            if (d < D) {
                dk[k] += ds * to_f(qi[d]);
                dv[k] += p * to_f(gi[d]);
            }
        }
    }
    T *out = dqkv + (b * T_ + j) * row + (int64_t)h * D;
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) {
        int d = lane + 32 * k;
        if (d < D) {
            store(out + L + d, dk[k] * scale);
            store(out + 2 * L + d, dv[k]);
        }
    }
}

#define ATTENTION(SUFFIX, T)                                                                  \
    extern "C" __global__ void attn_fwd_##SUFFIX(const T *qkv, T *y, int B, int T_, int H,    \
                                                 int D, float scale) {                        \
        attn_fwd<T>(qkv, y, B, T_, H, D, scale);                                              \
    }                                                                                         \
    extern "C" __global__ void attn_bwd_q_##SUFFIX(const T *qkv, const T *y, const T *dy,     \
                                                   T *dqkv, float *lse, float *delta, int B,  \
                                                   int T_, int H, int D, float scale) {       \
        attn_bwd_q<T>(qkv, y, dy, dqkv, lse, delta, B, T_, H, D, scale);                      \
    }                                                                                         \
    extern "C" __global__ void attn_bwd_kv_##SUFFIX(const T *qkv, const T *dy, T *dqkv,       \
                                                    const float *lse, const float *delta,     \
                                                    int B, int T_, int H, int D,              \
                                                    float scale) {                            \
        attn_bwd_kv<T>(qkv, dy, dqkv, lse, delta, B, T_, H, D, scale);                        \
    }

ATTENTION(f32, float)
ATTENTION(bf16, __nv_bfloat16)
