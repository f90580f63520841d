// Causal softmax of attention scores (.., T, T), scaled, in f32 or bf16 (arithmetic in
// f32), one warp a row: row r is query position i = r % T, which attends to keys j <= i;
// the rest of its row is 0. Forward p = softmax(scale * s) over j <= i; backward
// ds = scale * p * (dp - sum_j dp_j p_j). With cuBLAS's batched matmuls around it this is
// the attention PyTorch runs without SDPA, where the portable path makes an f32 copy of
// the scores and runs ~10 candle ops (a host-built mask among them) forward and more
// backward. Tested against the portable path by tests/gpu.rs.

#include "common.cuh"

template <typename T>
__device__ void csm_fwd(const T *s, T *p, int64_t rows, int T_, float scale) {
    const int64_t row = warp_index();
    if (row >= rows) return;
    const int i = (int)(row % T_), lane = threadIdx.x;
    const T *sr = s + row * T_;
    T *pr = p + row * T_;
    float m = -INFINITY;
    for (int j = lane; j <= i; j += 32) m = fmaxf(m, to_f(sr[j]) * scale);
    m = warp_max(m);
    float l = 0.f;
    for (int j = lane; j <= i; j += 32) l += expf(to_f(sr[j]) * scale - m);
    const float inv = 1.f / warp_sum(l);
    for (int j = lane; j < T_; j += 32) store(pr + j, j <= i ? expf(to_f(sr[j]) * scale - m) * inv : 0.f);
}

template <typename T>
__device__ void csm_bwd(const T *p, const T *dp, T *ds, int64_t rows, int T_, float scale) {
    const int64_t row = warp_index();
    if (row >= rows) return;
    const int i = (int)(row % T_), lane = threadIdx.x;
    const T *pr = p + row * T_;
    const T *gr = dp + row * T_;
    float dot = 0.f;
    for (int j = lane; j <= i; j += 32) dot += to_f(gr[j]) * to_f(pr[j]);
    dot = warp_sum(dot);
    T *dr = ds + row * T_;
    for (int j = lane; j < T_; j += 32)
        store(dr + j, j <= i ? scale * to_f(pr[j]) * (to_f(gr[j]) - dot) : 0.f);
}

#define CAUSAL_SOFTMAX(SUFFIX, T)                                                             \
    extern "C" __global__ void csm_fwd_##SUFFIX(const T *s, T *p, int64_t rows, int T_,       \
                                                float scale) {                                \
        csm_fwd<T>(s, p, rows, T_, scale);                                                    \
    }                                                                                         \
    extern "C" __global__ void csm_bwd_##SUFFIX(const T *p, const T *dp, T *ds, int64_t rows, \
                                                int T_, float scale) {                        \
        csm_bwd<T>(p, dp, ds, rows, T_, scale);                                               \
    }

CAUSAL_SOFTMAX(f32, float)
CAUSAL_SOFTMAX(bf16, __nv_bfloat16)
