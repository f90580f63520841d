//! The CPU's kernels: the fused ops with hand-written backward (`fused`), the products
//! (`gemm`: the gemm crate on strided views, or a system BLAS), the SIMD dispatch
//! (`simd`: AVX-512, AVX2 or scalar, chosen at run time), the fast element-wise maths
//! per level (`fastmath*`), a small-product kernel for AVX2, and this core's measured FMA
//! peak (`peak`).

pub mod fastmath;
#[cfg(target_arch = "x86_64")]
pub mod fastmath_avx2;
#[cfg(target_arch = "x86_64")]
pub mod fastmath_avx512;
pub mod fused;
pub mod gemm;
pub mod peak;
pub mod simd;
#[cfg(target_arch = "x86_64")]
pub mod small_gemm_avx2;
