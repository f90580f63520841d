// AdamW in one pass over a parameter, its gradient and both moments, in place: what the
// portable path does in ~12 candle ops (each a kernel, a temporary and a pass over
// memory) per parameter. The same arithmetic as the CPU's fused pass
// (src/train/optimizer.rs, adamw_pass), element by element; nvcc may contract a product
// and a sum into an FMA, so the GPU's bits can differ from the CPU's in the last place.
// Tested against the portable path by tests/gpu.rs.

#include <stdint.h>

extern "C" __global__ void adamw_f32(float *__restrict__ p, const float *__restrict__ g,
                                     float *__restrict__ m, float *__restrict__ v, uint32_t n,
                                     float b1, float b2, float lr, float eps, float c1,
                                     float c2, float shrink, float grad_scale) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += blockDim.x * gridDim.x) {
        // The same f32 product a clipped gradient tensor would hold.
        float gi = grad_scale == 1.0f ? g[i] : g[i] * grad_scale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * shrink - lr * (mi * c1) / (sqrtf(vi * c2) + eps);
    }
}
