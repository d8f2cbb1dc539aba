/*
 * dequant.cu — ggml block formats to bf16 (dequant.h).
 *
 * One thread per group of 32 consecutive outputs (a whole Q4_0/Q4_1/Q8_0
 * block, or one eighth of a 256-element K-quant super-block), computed in
 * registers and stored as four 16-byte writes. Block fields are read byte by
 * byte because blocks are not aligned (18, 20, 34, 144 and 210 bytes). The
 * f32 arithmetic repeats kernels/cpu/dequant.c's: Q4_0 d*(q-8), Q4_1
 * d*q + m, Q8_0 q*d, Q4_K (d*sc)*q - (dmin*m), Q6_K (d*sc)*q — with
 * explicitly rounded intrinsics so nvcc cannot fuse them, which makes the
 * bf16 results bit-identical to the CPU's.
 *
 * Specialization: the ggml type (a switch in the launcher).
 */
#include "dequant.h"

#include "cuda_check.h"
#include "cuda_prim.cuh"

extern "C" {
#include "modelfile/ggml_types.h"
}

namespace
{

IFD_DEV float h16(const uint8_t *p)
{
    return ifd_f16_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* The 6-bit scale and min j (0..7) of a Q4_K super-block. */
IFD_DEV void q4k_scale_min(const uint8_t *s, int j, int *sc, int *mn)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* The 32 outputs of group `grp`. */
template <int TYPE> IFD_DEV void group(float y[32], const uint8_t *x, int64_t grp)
{
    if (TYPE == IFD_GGML_Q4_0) {
        const uint8_t *b = x + grp * 18;
        const float d = h16(b);
        for (int j = 0; j < 16; j++) {
            y[j] = __fmul_rn(d, (float)((b[2 + j] & 0xF) - 8));
            y[j + 16] = __fmul_rn(d, (float)((b[2 + j] >> 4) - 8));
        }
    } else if (TYPE == IFD_GGML_Q4_1) {
        const uint8_t *b = x + grp * 20;
        const float d = h16(b), m = h16(b + 2);
        for (int j = 0; j < 16; j++) {
            y[j] = __fadd_rn(__fmul_rn(d, (float)(b[4 + j] & 0xF)), m);
            y[j + 16] = __fadd_rn(__fmul_rn(d, (float)(b[4 + j] >> 4)), m);
        }
    } else if (TYPE == IFD_GGML_Q8_0) {
        const uint8_t *b = x + grp * 34;
        const float d = h16(b);
        for (int j = 0; j < 32; j++)
            y[j] = __fmul_rn((float)(int8_t)b[2 + j], d);
    } else if (TYPE == IFD_GGML_Q4_K) {
        /* 0 d, 2 dmin, 4 scales[12], 16 qs[128]; group = (chunk c, half). */
        const uint8_t *b = x + (grp / 8) * 144;
        const int c = (int)(grp % 8) / 2, hi = (int)(grp % 2);
        int sc, mn;
        q4k_scale_min(b + 4, 2 * c + hi, &sc, &mn);
        const float d1 = __fmul_rn(h16(b), (float)sc), m1 = __fmul_rn(h16(b + 2), (float)mn);
        const uint8_t *q = b + 16 + 32 * c;
        for (int l = 0; l < 32; l++)
            y[l] = __fsub_rn(__fmul_rn(d1, (float)(hi ? q[l] >> 4 : q[l] & 0xF)), m1);
    } else if (TYPE == IFD_GGML_Q6_K) {
        /* 0 ql[128], 128 qh[64], 192 scales[16] (int8), 208 d; group =
         * (half h, quarter k): outputs 128h + 32k + l. */
        const uint8_t *b = x + (grp / 8) * 210;
        const int h = (int)(grp % 8) / 4, k = (int)(grp % 4);
        const float d = h16(b + 208);
        const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        const int8_t *scales = (const int8_t *)(b + 192) + 8 * h;
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            int q;
            switch (k) {
            case 0:
                q = (ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4;
                break;
            case 1:
                q = (ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4;
                break;
            case 2:
                q = (ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4;
                break;
            default:
                q = (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4;
                break;
            }
            const float ds = __fmul_rn(d, (float)scales[is + 2 * k]);
            y[l] = __fmul_rn(ds, (float)(q - 32));
        }
    } else if (TYPE == IFD_GGML_F16) {
        for (int j = 0; j < 32; j++)
            y[j] = h16(x + (grp * 32 + j) * 2);
    } else { /* F32 */
        for (int j = 0; j < 32; j++) {
            const uint8_t *p = x + (grp * 32 + j) * 4;
            y[j] = ifd_u2f((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        }
    }
}

template <int TYPE>
__global__ void __launch_bounds__(256) dequant_kernel(uint16_t *y, const uint8_t *x, int64_t ngrp)
{
    for (int64_t grp = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; grp < ngrp;
         grp += (int64_t)gridDim.x * blockDim.x) {
        float v[32];
        group<TYPE>(v, x, grp);
        uint4 *dst = (uint4 *)(y + grp * 32);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint4 w;
            w.x = ifd_pack2<true>(v[8 * i + 0], v[8 * i + 1]);
            w.y = ifd_pack2<true>(v[8 * i + 2], v[8 * i + 3]);
            w.z = ifd_pack2<true>(v[8 * i + 4], v[8 * i + 5]);
            w.w = ifd_pack2<true>(v[8 * i + 6], v[8 * i + 7]);
            dst[i] = w;
        }
    }
}

} // namespace

extern "C" int ifd_cuda_dequantize_bf16(uint16_t *IFD_CUDA_RESTRICT y,
                                        const void *IFD_CUDA_RESTRICT x, uint32_t type, int64_t n,
                                        ifd_cuda_stream_t stream)
{
    void (*kern)(uint16_t *, const uint8_t *, int64_t);
    int64_t block;
    switch (type) {
    case IFD_GGML_Q4_0:
        kern = dequant_kernel<IFD_GGML_Q4_0>, block = 32;
        break;
    case IFD_GGML_Q4_1:
        kern = dequant_kernel<IFD_GGML_Q4_1>, block = 32;
        break;
    case IFD_GGML_Q8_0:
        kern = dequant_kernel<IFD_GGML_Q8_0>, block = 32;
        break;
    case IFD_GGML_Q4_K:
        kern = dequant_kernel<IFD_GGML_Q4_K>, block = 256;
        break;
    case IFD_GGML_Q6_K:
        kern = dequant_kernel<IFD_GGML_Q6_K>, block = 256;
        break;
    case IFD_GGML_F16:
        kern = dequant_kernel<IFD_GGML_F16>, block = 32;
        break;
    case IFD_GGML_F32:
        kern = dequant_kernel<IFD_GGML_F32>, block = 32;
        break;
    default:
        return IFD_ENOTSUP;
    }
    /* F16/F32 are handled in groups of 32 too; other n go through the CPU. */
    if (n < 0 || n % block != 0 || n % 32 != 0)
        return IFD_EINVAL;
    if (n == 0)
        return 0;
    if (!y || !x || (uintptr_t)y % 16 != 0)
        return IFD_EINVAL;
    const int64_t ngrp = n / 32;
    int64_t blocks = (ngrp + 255) / 256;
    blocks = blocks > 65536 ? 65536 : blocks;
    IFD_LAUNCH(kern, dim3((unsigned)blocks), dim3(256), 0, stream, y, (const uint8_t *)x, ngrp);
    IFD_CUDA_CHECK_LAUNCH("dequant_kernel");
    return 0;
}
