// The token embedding's lookup and its backward, on f32 or bf16 tables (sums in f32):
// candle's CUDA index_add, which the lookup's backward runs, gives each of the table's C
// columns one thread that walks all N ids in turn (GPT-2 at batch 8: 768 threads, 8192
// steps each) after zero-filling and copying the whole table's gradient. Here one warp a
// table row scans the ids (ballots of 32) and adds the gradient rows of its matches in
// ascending position: the same additions in the same order as index_add into zeros, so
// the same bits, and no atomics. Tested by tests/gpu.rs (the models' gradients).

#include "common.cuh"

// Columns a lane accumulates per scan: GPT-2's 768 in one scan of the ids.
#define PER_LANE 24

// out[r, :] = table[ids[r], :]; an id outside the table gives NaN (the trainer's guard
// names it) where candle's lookup would read out of bounds.
template <typename T>
__device__ void emb_fwd(const T *table, const uint32_t *ids, T *out, int64_t n, int C,
                        int64_t V) {
    const int64_t r = warp_index();
    if (r >= n) return;
    const uint32_t id = ids[r];
    T *dst = out + r * C;
    for (int c = threadIdx.x; c < C; c += 32)
        store(dst + c, id < V ? to_f(table[(int64_t)id * C + c]) : NAN);
}

// dtable[v, :] = sum over positions r with ids[r] == v, ascending, of dy[r, :].
template <typename T>
__device__ void emb_bwd(const uint32_t *ids, const T *dy, T *dtable, int64_t n, int C,
                        int64_t V) {
    const int64_t v = warp_index();
    if (v >= V) return;
    const int lane = threadIdx.x;
    for (int c0 = 0; c0 < C; c0 += 32 * PER_LANE) {
        float acc[PER_LANE];
#pragma unroll
        for (int e = 0; e < PER_LANE; e++) acc[e] = 0.f;
        for (int64_t r0 = 0; r0 < n; r0 += 32) {
            const int64_t r = r0 + lane;
            unsigned hits = __ballot_sync(0xffffffffu, r < n && ids[r] == (uint32_t)v);
            while (hits) {
                const int k = __ffs(hits) - 1;  // the lowest position first
                hits &= hits - 1;
                const T *g = dy + (r0 + k) * C;
#pragma unroll
                for (int e = 0; e < PER_LANE; e++) {
                    const int c = c0 + lane + 32 * e;
                    if (c < C) acc[e] += to_f(g[c]);
                }
            }
        }
#pragma unroll
        for (int e = 0; e < PER_LANE; e++) {
            const int c = c0 + lane + 32 * e;
            if (c < C) store(dtable + v * C + c, acc[e]);
        }
    }
}

#define EMBEDDING(SUFFIX, T)                                                                  \
    extern "C" __global__ void emb_fwd_##SUFFIX(const T *table, const uint32_t *ids, T *out,  \
                                                int64_t n, int C, int64_t V) {                \
        emb_fwd<T>(table, ids, out, n, C, V);                                                 \
    }                                                                                         \
    extern "C" __global__ void emb_bwd_##SUFFIX(const uint32_t *ids, const T *dy, T *dtable,  \
                                                int64_t n, int C, int64_t V) {                \
        emb_bwd<T>(ids, dy, dtable, n, C, V);                                                 \
    }

EMBEDDING(f32, float)
EMBEDDING(bf16, __nv_bfloat16)
