// Causal attention without the (B, H, T, T) scores: FlashAttention-2's tiling on the
// tensor cores (WMMA, bf16 in, f32 accumulate), reading Q, K and V inside the packed qkv
// (B, T, 3L) and writing y (B, T, L) merged, for head size 64 and T a multiple of 64 (the
// caller checks, and that qkv starts 32-byte aligned, as WMMA's loads need; GPT-2's 12
// heads of 64 at T 1024). Where the packed path holds the scores and probabilities (~2.4
// GB of traffic a GPT-2 layer at batch 8) and computes the masked half of every product,
// here a block of 4 warps owns 64 rows, each warp 16, and walks the key tiles up to the
// diagonal only.
//
//   flash_fwd    y and each row's log-sum-exp (lse, kept for the backward)
//   flash_delta  D = rowsum(dy * y), one warp a row
//   flash_dkdv   one block a 64-key tile: dK and dV over the query tiles at and after it
//   flash_dq     one block a 64-query tile: dQ over the key tiles up to it
// No atomics (dK, dV and dQ each have one writer): the same bits every run. Each warp
// stages its 16 x 64 tile of scores (f32) and probabilities (bf16) in shared memory, one
// lane a half row. Tested against the portable path by tests/gpu/kernels.rs.

#include <mma.h>
#include "common.cuh"

using namespace nvcuda;

#define FA_D 64       // head size
#define FA_TILE 64    // rows a block, keys a step
#define FA_WARPS 4    // 16 rows a warp
typedef __nv_bfloat16 bf16;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> FragB;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> FragBt;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

// Per warp: a 16 x 64 f32 staging tile and a 16 x 64 bf16 tile (probabilities or dS).
struct __align__(128) WarpTiles {
    float f[16 * FA_TILE];
    bf16 h[16 * FA_TILE];
};

// acc[n] (16 x 16, n over 4 column blocks) = A (16 x 64, row-major at a, ld lda) times
// B^T, B (64 x 64) row-major at b with ld ldb: a 16 x 64 product of A with the transposes
// of B's rows (scores: Q K^T, or K Q^T, or dO V^T).
__device__ __forceinline__ void times_rows_t(FragC acc[4], const bf16 *a, int lda,
                                             const bf16 *b, int ldb) {
#pragma unroll
    for (int n = 0; n < 4; n++) wmma::fill_fragment(acc[n], 0.f);
#pragma unroll
    for (int k = 0; k < FA_D / 16; k++) {
        FragA fa;
        wmma::load_matrix_sync(fa, a + k * 16, lda);
#pragma unroll
        for (int n = 0; n < 4; n++) {
            FragBt fb;  // B^T's (k, n) block: B's rows n*16.., columns k*16.., col-major
            wmma::load_matrix_sync(fb, b + (int64_t)n * 16 * ldb + k * 16, ldb);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

// acc[n] += A (16 x 64, bf16 row-major in shared memory, ld 64) times B (64 x 64)
// row-major at b with ld ldb.
__device__ __forceinline__ void add_times(FragC acc[4], const bf16 *a, const bf16 *b, int ldb) {
#pragma unroll
    for (int k = 0; k < FA_TILE / 16; k++) {
        FragA fa;
        wmma::load_matrix_sync(fa, a + k * 16, FA_TILE);
#pragma unroll
        for (int n = 0; n < 4; n++) {
            FragB fb;
            wmma::load_matrix_sync(fb, b + (int64_t)k * 16 * ldb + n * 16, ldb);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

__device__ __forceinline__ void stage(float *f, FragC acc[4]) {
#pragma unroll
    for (int n = 0; n < 4; n++) wmma::store_matrix_sync(f + n * 16, acc[n], FA_TILE, wmma::mem_row_major);
    __syncwarp();
}

// A lane's half row of the staging tile (row r, columns half*32..), times `by`, as bf16
// at dst (the row's 64 columns of one head).
__device__ __forceinline__ void store_half_row(bf16 *dst, const float *f, int r, int half,
                                               float by) {
#pragma unroll
    for (int c = 0; c < 32; c++) dst[half * 32 + c] = __float2bfloat16(f[r * FA_TILE + half * 32 + c] * by);
}

// The sizes and where head h of sequence b starts in qkv (Q; K at +L, V at +2L), y and
// the per-row statistics.
struct Heads {
    int64_t T, H, L;
    __device__ int64_t qkv(int64_t b, int64_t h, int64_t row) const { return (b * T + row) * 3 * L + h * FA_D; }
    __device__ int64_t y(int64_t b, int64_t h, int64_t row) const { return (b * T + row) * L + h * FA_D; }
    __device__ int64_t stat(int64_t b, int64_t h, int64_t row) const { return (b * H + h) * T + row; }
};

// Grid (T / 64, B * H), block 32 x 4.
extern "C" __global__ void flash_fwd(const bf16 *qkv, bf16 *y, float *lse, int64_t T,
                                     int64_t H, float scale) {
    __shared__ WarpTiles tiles[FA_WARPS];
    const Heads hd{T, H, H * FA_D};
    const int64_t b = blockIdx.y / H, h = blockIdx.y % H;
    const int warp = threadIdx.y, lane = threadIdx.x;
    const int64_t q0 = (int64_t)blockIdx.x * FA_TILE + warp * 16;  // this warp's first row
    const int r = lane / 2, half = lane % 2;                         // a lane's half row
    const int64_t q = q0 + r;
    float *f = tiles[warp].f;
    bf16 *p = tiles[warp].h;
    const int ld = 3 * hd.L;
    FragC o[4];
#pragma unroll
    for (int n = 0; n < 4; n++) wmma::fill_fragment(o[n], 0.f);
    float m = -INFINITY, l = 0.f;
    for (int64_t k0 = 0; k0 <= (int64_t)blockIdx.x * FA_TILE; k0 += FA_TILE) {
        FragC s[4];
        times_rows_t(s, qkv + hd.qkv(b, h, q0), ld, qkv + hd.qkv(b, h, k0) + hd.L, ld);
        stage(f, s);
        // The half row's masked, scaled scores: its max, then exp and sum.
        float v[32], mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < 32; c++) {
            const int64_t k = k0 + half * 32 + c;
            v[c] = k <= q ? f[r * FA_TILE + half * 32 + c] * scale : -INFINITY;
            mx = fmaxf(mx, v[c]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float mn = fmaxf(m, mx);  // finite: key k0 <= q in every tile walked
        float sum = 0.f;
#pragma unroll
        for (int c = 0; c < 32; c++) {
            const float e = expf(v[c] - mn);
            sum += e;
            p[r * FA_TILE + half * 32 + c] = __float2bfloat16(e);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        const float alpha = expf(m - mn);
        l = l * alpha + sum;
        m = mn;
        // o *= alpha row by row (through the staging tile, once every lane has read its
        // scores from it), then o += p V.
        __syncwarp();
        stage(f, o);
#pragma unroll
        for (int c = 0; c < 32; c++) f[r * FA_TILE + half * 32 + c] *= alpha;
        __syncwarp();
#pragma unroll
        for (int n = 0; n < 4; n++) wmma::load_matrix_sync(o[n], f + n * 16, FA_TILE, wmma::mem_row_major);
        add_times(o, p, qkv + hd.qkv(b, h, k0) + 2 * hd.L, ld);
        __syncwarp();
    }
    stage(f, o);
    store_half_row(y + hd.y(b, h, q), f, r, half, 1.f / l);
    if (half == 0) lse[hd.stat(b, h, q)] = m + logf(l);
}

// D[b, h, row] = sum over the head's 64 columns of dy * y (as the forward rounded y).
// Grid: one warp a row of B * T * H (blocks of 4 warps).
extern "C" __global__ void flash_delta(const bf16 *y, const bf16 *dy, float *delta, int64_t T,
                                       int64_t H, int64_t rows) {
    const int64_t w = warp_index();
    if (w >= rows) return;
    const Heads hd{T, H, H * FA_D};
    const int64_t h = w % H, row = (w / H) % T, b = w / (H * T);
    const int64_t at = hd.y(b, h, row);
    float s = 0.f;
    for (int c = threadIdx.x; c < FA_D; c += 32) s += to_f(dy[at + c]) * to_f(y[at + c]);
    s = warp_sum(s);
    if (threadIdx.x == 0) delta[hd.stat(b, h, row)] = s;
}

// Grid (T / 64, B * H), block 32 x 4: block x owns keys x*64.., warp w 16 of them. For
// each query tile at or after it: P^T = exp(K Q^T scale - lse) (masked), dV += P^T dO,
// dP^T = V dO^T, dS^T = P^T (dP^T - D) scale, dK += dS^T Q.
extern "C" __global__ void flash_dkdv(const bf16 *qkv, const bf16 *dy, const float *lse,
                                      const float *delta, bf16 *dqkv, int64_t T, int64_t H,
                                      float scale) {
    __shared__ WarpTiles tiles[FA_WARPS];
    const Heads hd{T, H, H * FA_D};
    const int64_t b = blockIdx.y / H, h = blockIdx.y % H;
    const int warp = threadIdx.y, lane = threadIdx.x;
    const int64_t k0 = (int64_t)blockIdx.x * FA_TILE + warp * 16;
    const int r = lane / 2, half = lane % 2;
    const int64_t k = k0 + r;
    float *f = tiles[warp].f;
    bf16 *t = tiles[warp].h;
    const int ld = 3 * hd.L, ldy = (int)hd.L;
    FragC dk[4], dv[4];
#pragma unroll
    for (int n = 0; n < 4; n++) {
        wmma::fill_fragment(dk[n], 0.f);
        wmma::fill_fragment(dv[n], 0.f);
    }
    for (int64_t q0 = (int64_t)blockIdx.x * FA_TILE; q0 < T; q0 += FA_TILE) {
        FragC s[4];
        times_rows_t(s, qkv + hd.qkv(b, h, k0) + hd.L, ld, qkv + hd.qkv(b, h, q0), ld);
        stage(f, s);
        float pt[32];
#pragma unroll
        for (int c = 0; c < 32; c++) {
            const int64_t q = q0 + half * 32 + c;
            pt[c] = k <= q ? expf(f[r * FA_TILE + half * 32 + c] * scale - lse[hd.stat(b, h, q)]) : 0.f;
            t[r * FA_TILE + half * 32 + c] = __float2bfloat16(pt[c]);
        }
        __syncwarp();
        add_times(dv, t, dy + hd.y(b, h, q0), ldy);
        __syncwarp();
        times_rows_t(s, qkv + hd.qkv(b, h, k0) + 2 * hd.L, ld, dy + hd.y(b, h, q0), ldy);
        stage(f, s);
#pragma unroll
        for (int c = 0; c < 32; c++) {
            const int64_t q = q0 + half * 32 + c;
            const float ds = pt[c] * (f[r * FA_TILE + half * 32 + c] - delta[hd.stat(b, h, q)]) * scale;
            t[r * FA_TILE + half * 32 + c] = __float2bfloat16(ds);
        }
        __syncwarp();
        add_times(dk, t, qkv + hd.qkv(b, h, q0), ld);
        __syncwarp();
    }
    stage(f, dk);
    store_half_row(dqkv + hd.qkv(b, h, k) + hd.L, f, r, half, 1.f);
    __syncwarp();
    stage(f, dv);
    store_half_row(dqkv + hd.qkv(b, h, k) + 2 * hd.L, f, r, half, 1.f);
}

// Grid (T / 64, B * H), block 32 x 4: block x owns queries x*64.., warp w 16 of them. For
// each key tile up to the diagonal: P = exp(Q K^T scale - lse) (masked), dP = dO V^T,
// dS = P (dP - D) scale, dQ += dS K.
extern "C" __global__ void flash_dq(const bf16 *qkv, const bf16 *dy, const float *lse,
                                    const float *delta, bf16 *dqkv, int64_t T, int64_t H,
                                    float scale) {
    __shared__ WarpTiles tiles[FA_WARPS];
    const Heads hd{T, H, H * FA_D};
    const int64_t b = blockIdx.y / H, h = blockIdx.y % H;
    const int warp = threadIdx.y, lane = threadIdx.x;
    const int64_t q0 = (int64_t)blockIdx.x * FA_TILE + warp * 16;
    const int r = lane / 2, half = lane % 2;
    const int64_t q = q0 + r;
    float *f = tiles[warp].f;
    bf16 *t = tiles[warp].h;
    const int ld = 3 * hd.L, ldy = (int)hd.L;
    const float row_lse = lse[hd.stat(b, h, q)], row_delta = delta[hd.stat(b, h, q)];
    FragC dq[4];
#pragma unroll
    for (int n = 0; n < 4; n++) wmma::fill_fragment(dq[n], 0.f);
    for (int64_t k0 = 0; k0 <= (int64_t)blockIdx.x * FA_TILE; k0 += FA_TILE) {
        FragC s[4];
        times_rows_t(s, qkv + hd.qkv(b, h, q0), ld, qkv + hd.qkv(b, h, k0) + hd.L, ld);
        stage(f, s);
        float pr[32];
#pragma unroll
        for (int c = 0; c < 32; c++) {
            const int64_t k = k0 + half * 32 + c;
            pr[c] = k <= q ? expf(f[r * FA_TILE + half * 32 + c] * scale - row_lse) : 0.f;
        }
        __syncwarp();
        times_rows_t(s, dy + hd.y(b, h, q0), ldy, qkv + hd.qkv(b, h, k0) + 2 * hd.L, ld);
        stage(f, s);
#pragma unroll
        for (int c = 0; c < 32; c++)
            t[r * FA_TILE + half * 32 + c] = __float2bfloat16(pr[c] * (f[r * FA_TILE + half * 32 + c] - row_delta) * scale);
        __syncwarp();
        add_times(dq, t, qkv + hd.qkv(b, h, k0) + hd.L, ld);
        __syncwarp();
    }
    stage(f, dq);
    store_half_row(dqkv + hd.qkv(b, h, q), f, r, half, 1.f);
}
