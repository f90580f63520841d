// The gradient norm's sum of squares over a group of f32 tensors, in two launches: every
// tensor's squares summed by a fixed grid of blocks into f64 partials, then the partials
// summed in one block. The portable path runs four candle ops a tensor (cast to f64,
// square, row sums, total: ~645 launches a GPT-2 124M step, ~6 ms of an H200's at tp 1).
// Deterministic: the grid, each thread's elements and both trees are fixed, so the same
// gradients give the same bits; not the CPU's bits (its blocks and order differ), equal
// to f64 rounding. Tested against a host f64 sum by tests/gpu/kernels.rs.

#include <stdint.h>

#define SUMSQ_THREADS 256

// Block (x, y) sums the squares of tensor y's elements x * 256 + tid, striding by the
// grid's width, into partials[y * gridDim.x + x]. ptrs and lens: each tensor's device
// address and length.
extern "C" __global__ void sumsq_many_f32(const uint64_t *__restrict__ ptrs,
                                          const uint64_t *__restrict__ lens,
                                          double *__restrict__ partials) {
    const float *x = reinterpret_cast<const float *>(ptrs[blockIdx.y]);
    const uint64_t n = lens[blockIdx.y];
    double acc = 0.0;
    for (uint64_t i = (uint64_t)blockIdx.x * SUMSQ_THREADS + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * SUMSQ_THREADS) {
        const double v = (double)x[i];
        acc += v * v;
    }
    __shared__ double s[SUMSQ_THREADS];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned k = SUMSQ_THREADS / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[(uint64_t)blockIdx.y * gridDim.x + blockIdx.x] = s[0];
}

// One block of 256 threads: out[0] = the sum of partials[0 .. count), each thread's
// strided share first, then a fixed tree.
extern "C" __global__ void sum_partials_f64(const double *__restrict__ partials, uint32_t count,
                                            double *__restrict__ out) {
    double acc = 0.0;
    for (uint32_t i = threadIdx.x; i < count; i += SUMSQ_THREADS) acc += partials[i];
    __shared__ double s[SUMSQ_THREADS];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned k = SUMSQ_THREADS / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = s[0];
}
