// The device addresses of a batched GEMM's matrices, which cublasGemmBatchedEx takes as
// arrays in device memory: matrix i is sequence i / heads, head i % heads, and each of
// its three operands lies at base + sequence * per_seq + head * per_head (bytes); out
// holds A's `count` addresses, then B's, then C's. Computed on the GPU rather than
// uploaded: a copy from pageable host memory may wait for the stream, a launch does not.
// The same formula as BlasCall::matrix in src/ops/head_gemms.rs, whose tests check the
// packed attention's plan through it on the CPU.

#include <cstdint>

extern "C" __global__ void head_addresses(uint64_t *out, uint64_t a, uint64_t b, uint64_t c,
                                          int64_t a_seq, int64_t a_head, int64_t b_seq,
                                          int64_t b_head, int64_t c_seq, int64_t c_head,
                                          int64_t heads, int64_t count) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    const int64_t seq = i / heads, head = i % heads;
    out[i] = a + seq * a_seq + head * a_head;
    out[count + i] = b + seq * b_seq + head * b_head;
    out[2 * count + i] = c + seq * c_seq + head * c_head;
}
