/*
 * rope.c — rotary position embedding in place (ifd_cpu_rope).
 *
 * The angles are computed exactly as ggml's CPU rope does (MODEL-FORMATS.md
 * §2.4), so they are bit-identical to llama.cpp's given the same libm:
 *     s  = powf(base, −2/n_rot)                       (float)
 *     t₀ = (float)pos,  t_{i+1} = t_i · s             (repeated float multiply)
 *     θ_i = freq_scale · (t_i / ff[i])                (ff = freq_factors or 1)
 * and cos θ_i / sin θ_i come from cosf/sinf. The repeated multiplication
 * differs from pos · base^(−2i/n_rot) by about i/2 ulp of θ_i — within float
 * rounding of the textbook formula, and the convention the GGUF models were
 * validated against. (YaRN's extrapolation mix and attention factor are
 * inactive for the supported models: ext_factor 0, attn_factor 1.)
 *
 * The rotation of a pair (a, b) is a' = a·cos − b·sin, b' = a·sin + b·cos,
 * in float. NORM pairs (x[2i], x[2i+1]); NEOX pairs (x[i], x[i + n_rot/2]).
 * Dimensions from n_rot to head_dim are left untouched.
 *
 * Single-threaded (a token's angles are shared by all its heads; the work is
 * tiny next to the projections around it).
 */
#include "cpu_kernels.h"

#include "error.h"

#include <math.h>
#include <stdint.h>

enum { IFD__ROPE_MAX_PAIRS = 512 };

int ifd_cpu_rope(float *x, const int32_t *pos, int n_tok, int n_heads, int head_dim, int n_rot,
                 float base, float freq_scale, const float *freq_factors, ifd_rope_mode_t mode)
{
    if (n_tok < 0 || n_heads <= 0 || head_dim <= 0 || n_rot <= 0 || n_rot % 2 != 0 ||
        n_rot > head_dim || !(base > 0) || !isfinite(freq_scale))
        return IFD_EINVAL;
    if (mode != IFD_ROPE_NORM && mode != IFD_ROPE_NEOX)
        return IFD_ENOTSUP;
    const int half = n_rot / 2;
    if (half > IFD__ROPE_MAX_PAIRS)
        return IFD_ENOTSUP;
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    float cs[IFD__ROPE_MAX_PAIRS], sn[IFD__ROPE_MAX_PAIRS];

    for (int t = 0; t < n_tok; t++) {
        float theta = (float)pos[t];
        for (int i = 0; i < half; i++) {
            const float ff = freq_factors ? freq_factors[i] : 1.0f;
            const float th = freq_scale * (theta / ff);
            cs[i] = cosf(th);
            sn[i] = sinf(th);
            theta *= theta_scale;
        }
        float *xt = x + (int64_t)t * n_heads * head_dim;
        for (int h = 0; h < n_heads; h++) {
            float *xh = xt + (int64_t)h * head_dim;
            if (mode == IFD_ROPE_NORM) {
                for (int i = 0; i < half; i++) {
                    const float a = xh[2 * i], b = xh[2 * i + 1];
                    xh[2 * i] = a * cs[i] - b * sn[i];
                    xh[2 * i + 1] = a * sn[i] + b * cs[i];
                }
            } else {
                for (int i = 0; i < half; i++) {
                    const float a = xh[i], b = xh[i + half];
                    xh[i] = a * cs[i] - b * sn[i];
                    xh[i + half] = a * sn[i] + b * cs[i];
                }
            }
        }
    }
    return 0;
}
