// What every kernel of this crate shares: f32 and bf16 loads and stores (arithmetic is
// always f32), a warp's sum and max by butterfly (every lane ends with it, in one fixed
// order), a warp's index in a launch of blocks of 32 x blockDim.y threads, and the
// column sums of per-range partial sums that deterministic gradient reductions end with.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store(float *p, float x) { *p = x; }
__device__ __forceinline__ void store(__nv_bfloat16 *p, float x) { *p = __float2bfloat16(x); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ int64_t warp_index() {
    return (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
}

// out[c] = sum over p of partial[p, c] for partial (P, cols), one warp a column: lane l
// adds rows l, l + 32, ... in order, then the lanes' sums add in the butterfly's fixed
// order (no atomics: the same bits every run). One thread a column looping over every p
// took 61 us a call on the H200 for 768 columns (three blocks).
__device__ __forceinline__ void sum_partials_by_column(const float *partial, float *out,
                                                       int64_t P, int64_t cols) {
    const int64_t c = warp_index();
    if (c >= cols) return;
    float s = 0.f;
    for (int64_t p = threadIdx.x; p < P; p += 32) s += partial[p * cols + c];
    s = warp_sum(s);
    if (threadIdx.x == 0) out[c] = s;
}
