// The token embedding's lookup and its backward, on f32 or bf16 tables (sums in f32):
// candle's CUDA index_add, which the lookup's backward runs, gives each of the table's C
// columns one thread that walks all N ids in turn (GPT-2 at batch 8: 768 threads, 8192
// steps each) after zero-filling and copying the whole table's gradient. Here one warp a
// table row scans the ids (ballots of 32) and adds the gradient rows of its matches in
// ascending position: the same additions in the same order as index_add into zeros, so
// the same bits, and no atomics. Faster where the ids fit one block's sort (below): the
// ids bucketed first, each row's warp reads only its own positions. Tested by
// tests/gpu.rs (the models' gradients) and tests/gpu/kernels.rs (both paths' bits).

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

// The ids bucketed for the backward: keys id * n + position (ascending: by id, then by
// position), sorted in one block's shared memory by a bitonic network (SORT_N keys,
// padded with 0xffffffff; ids outside the table get the padding key, matching no row).
// The caller takes this path when n <= SORT_N and V * n < 2^32 - 1 (GPT-2 at batch 8:
// n = 8192, V n = 4.1e8).
#define SORT_N 8192
extern "C" __global__ void emb_sort_ids(const uint32_t *ids, uint32_t *keys, uint32_t n,
                                        uint32_t V) {
    __shared__ uint32_t s[SORT_N];
    for (uint32_t i = threadIdx.x; i < SORT_N; i += blockDim.x)
        s[i] = (i < n && ids[i] < V) ? ids[i] * n + i : 0xffffffffu;
    __syncthreads();
    for (uint32_t k = 2; k <= SORT_N; k <<= 1) {
        for (uint32_t j = k >> 1; j > 0; j >>= 1) {
            for (uint32_t i = threadIdx.x; i < SORT_N; i += blockDim.x) {
                const uint32_t l = i ^ j;
                if (l > i) {
                    const uint32_t a = s[i], b = s[l];
                    if ((a > b) == ((i & k) == 0)) {
                        s[i] = b;
                        s[l] = a;
                    }
                }
            }
            __syncthreads();
        }
    }
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) keys[i] = s[i];
}

// The first of the n sorted keys that is >= key.
__device__ uint32_t lower_bound(const uint32_t *keys, uint32_t n, uint32_t key) {
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        const uint32_t mid = (lo + hi) / 2;
        if (keys[mid] < key) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// Columns one warp of the sorted path takes (8 a lane): GPT-2's 768 in three warps a row.
// Positions it loads before adding them, in order. A frequent id (a space is ~16% of
// Shakespeare's characters: ~1300 of GPT-2's 8192 positions) made one warp a row walk its
// positions one dependent key-then-row load at a time: 2.6 ms of the H200's 39.7 ms step
// (2026-11-29). Now the keys come 32 at a time and 8 rows' loads are in flight at once,
// and three warps share the row's columns. `src/ops/cuda/embedding.rs` launches
// V x ceil(C / SORTED_WARP_COLUMNS) warps.
#define SORTED_PER_LANE 8
#define SORTED_WARP_COLUMNS (32 * SORTED_PER_LANE)
#define SORTED_UNROLL 8

// dtable[v, c0 .. c0 + 256] as emb_bwd computes it, from the sorted keys: the warp finds
// its row's bucket by binary search and adds its positions' gradient rows in ascending
// order (the same additions in the same order: the same bits), instead of scanning all
// n ids.
template <typename T>
__device__ void emb_bwd_sorted(const uint32_t *keys, const T *dy, T *dtable, uint32_t n, int C,
                               int64_t V) {
    const int64_t slices = (C + SORTED_WARP_COLUMNS - 1) / SORTED_WARP_COLUMNS;
    const int64_t w = warp_index();
    if (w >= V * slices) return;  // warp-uniform: the shuffles below have every lane
    const int64_t v = w / slices;
    const int c0 = (int)(w % slices) * SORTED_WARP_COLUMNS;
    const int lane = threadIdx.x;
    const uint32_t first = (uint32_t)v * n;
    const uint32_t lo = lower_bound(keys, n, first), hi = lower_bound(keys, n, first + n);
    float acc[SORTED_PER_LANE];
#pragma unroll
    for (int e = 0; e < SORTED_PER_LANE; e++) acc[e] = 0.f;
    for (uint32_t k0 = lo; k0 < hi; k0 += 32) {
        // 32 positions' rows, one a lane, handed round by shuffles.
        const uint32_t m = min(32u, hi - k0);
        const uint32_t mine = (uint32_t)lane < m ? keys[k0 + lane] - first : 0u;
        for (uint32_t j0 = 0; j0 < m; j0 += SORTED_UNROLL) {
            float g[SORTED_UNROLL][SORTED_PER_LANE];
#pragma unroll
            for (int u = 0; u < SORTED_UNROLL; u++) {
                const uint32_t r = __shfl_sync(0xffffffffu, mine, (j0 + u) & 31);
#pragma unroll
                for (int e = 0; e < SORTED_PER_LANE; e++) {
                    const int c = c0 + lane + 32 * e;
                    g[u][e] = (j0 + u < m && c < C) ? to_f(dy[(int64_t)r * C + c]) : 0.f;
                }
            }
            // Added in ascending position, and only the rows that exist (adding a 0 to
            // a -0 would change its bits).
#pragma unroll
            for (int u = 0; u < SORTED_UNROLL; u++) {
                if (j0 + u < m) {
#pragma unroll
                    for (int e = 0; e < SORTED_PER_LANE; e++) acc[e] += g[u][e];
                }
            }
        }
    }
#pragma unroll
    for (int e = 0; e < SORTED_PER_LANE; e++) {
        const int c = c0 + lane + 32 * e;
        if (c < C) store(dtable + v * C + c, acc[e]);
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
    }                                                                                         \
    extern "C" __global__ void emb_bwd_sorted_##SUFFIX(const uint32_t *keys, const T *dy,      \
                                                       T *dtable, uint32_t n, int C,          \
                                                       int64_t V) {                           \
        emb_bwd_sorted<T>(keys, dy, dtable, n, C, V);                                         \
    }

EMBEDDING(f32, float)
EMBEDDING(bf16, __nv_bfloat16)
