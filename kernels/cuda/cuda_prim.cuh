/*
 * cuda_prim.cuh — the device primitives every kernel in kernels/cuda builds
 * on: 16-bit float conversions, warp reductions, the tensor-core MMA, the
 * ldmatrix and cp.async data movers, and the launch macro. Internal to
 * kernels/cuda (not a public header).
 *
 * Why a layer at all: each primitive is one inline PTX instruction or
 * intrinsic on the device, and the same source compiles as plain C++ against
 * the CPU emulator in tests/gpu/emu (IFD_CUDA_EMU), which runs every thread
 * of a block as a fiber and implements these primitives warp-collectively.
 * That lets the kernels' indexing, masking and synchronisation be tested on
 * a machine without a GPU. Kernels must therefore use only what this header
 * (and the emulator) provides: no raw asm, no <<<>>> launches, warp-wide
 * operations always with the full mask and all 32 lanes present.
 *
 * Invariants: block sizes are multiples of 32; fp16/bf16 values travel as
 * their uint16_t bit patterns (packed in pairs into uint32_t for the MMA,
 * lower address = lower half), and conversions round to nearest even.
 */
#ifndef IFD_CUDA_PRIM_CUH
#define IFD_CUDA_PRIM_CUH

#ifdef IFD_CUDA_EMU
#include "cuda_emu.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#include <stdint.h>

#define IFD_DEV static __device__ __forceinline__

/* Kernel launch: IFD_LAUNCH(fn, grid, block, smem_bytes, stream, args...).
 * fn is a kernel (function pointer); the caller checks the launch with
 * IFD_CUDA_CHECK_LAUNCH right after. */
#ifdef IFD_CUDA_EMU
/* Arguments by value: a launch may be recorded into a CUDA graph. */
#define IFD_LAUNCH(fn, grid, block, smem, stream, ...)                                             \
    ifd_emu_launch_on((cudaStream_t)(stream), (grid), (block), (smem),                             \
                      [=]() { (fn)(__VA_ARGS__); })
#else
#define IFD_LAUNCH(fn, grid, block, smem, stream, ...)                                             \
    (fn)<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#endif

/* Dynamic shared memory of a kernel, 16-byte aligned. */
#ifdef IFD_CUDA_EMU
#define IFD_DYN_SMEM(name) unsigned char *name = ifd_emu_dyn_smem()
#else
#define IFD_DYN_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

/* ---- bit casts and exactly rounded arithmetic ----------------------------- */

#ifndef IFD_CUDA_EMU
IFD_DEV float ifd_u2f(uint32_t u)
{
    return __uint_as_float(u);
}
IFD_DEV uint32_t ifd_f2u(float f)
{
    return __float_as_uint(f);
}
#else
IFD_DEV float ifd_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
IFD_DEV uint32_t ifd_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
#endif

/* ---- 16-bit floats ----------------------------------------------------------- */

IFD_DEV float ifd_bf16_f32(uint16_t h)
{
    return ifd_u2f((uint32_t)h << 16);
}

IFD_DEV uint16_t ifd_f32_bf16(float f)
{
#ifndef IFD_CUDA_EMU
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
    uint32_t u = ifd_f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* NaN stays (quiet) NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
#endif
}

IFD_DEV float ifd_f16_f32(uint16_t h)
{
#ifndef IFD_CUDA_EMU
    return __half2float(__ushort_as_half(h));
#else
    return ifd_emu_f16_to_f32(h);
#endif
}

IFD_DEV uint16_t ifd_f32_f16(float f)
{
#ifndef IFD_CUDA_EMU
    return __half_as_ushort(__float2half_rn(f));
#else
    return ifd_emu_f32_to_f16(f);
#endif
}

/* The KV/MMA element type as a compile-time flag: BF16 true = bfloat16,
 * false = IEEE half. */
template <bool BF16> IFD_DEV float ifd_h2f(uint16_t h)
{
    return BF16 ? ifd_bf16_f32(h) : ifd_f16_f32(h);
}

template <bool BF16> IFD_DEV uint16_t ifd_f2h(float f)
{
    return BF16 ? ifd_f32_bf16(f) : ifd_f32_f16(f);
}

/* Two floats as one packed pair (lo in the low half). */
template <bool BF16> IFD_DEV uint32_t ifd_pack2(float lo, float hi)
{
    return (uint32_t)ifd_f2h<BF16>(lo) | ((uint32_t)ifd_f2h<BF16>(hi) << 16);
}

/* ---- warp reductions (full warp, all lanes present) ----------------------- */

IFD_DEV float ifd_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

IFD_DEV float ifd_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

IFD_DEV double ifd_warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ---- tensor cores: mma.m16n8k16, f32 accumulate ------------------------------
 * Fragments (g = lane / 4, t = lane % 4), PTX ISA "mma.m16n8k16":
 *   A 16x16 row-major: a[0] = A[g][2t..2t+1],   a[1] = A[g+8][2t..2t+1],
 *                      a[2] = A[g][2t+8..2t+9], a[3] = A[g+8][2t+8..2t+9]
 *   B 16x8 (k x n):    b[0] = B[2t..2t+1][g],   b[1] = B[2t+8..2t+9][g]
 *   C/D 16x8:          c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1]
 * d = a * b + c in place on c. */
template <bool BF16>
IFD_DEV void ifd_mma_16816(float c[4], const uint32_t a[4], const uint32_t b[2])
{
#ifndef IFD_CUDA_EMU
    if (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    ifd_emu_mma_16816(c, a, b, BF16);
#endif
}

/* ---- tensor cores: mma.m16n8k32, s8 inputs, s32 accumulate -------------------
 * Fragments (g = lane / 4, t = lane % 4), PTX ISA "mma.m16n8k32" (.s8), each
 * register four int8 values in k order, lowest byte first:
 *   A 16x32 row-major: a[0] = A[g][4t..4t+3],    a[1] = A[g+8][4t..4t+3],
 *                      a[2] = A[g][4t+16..4t+19], a[3] = A[g+8][4t+16..4t+19]
 *   B 32x8 (k x n):    b[0] = B[4t..4t+3][g],    b[1] = B[4t+16..4t+19][g]
 *   C/D 16x8 (int32):  c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1]
 * d = a * b + c in place on c, exact (sm_80 and later). So a row of A and a
 * column of B are two 32-byte runs read as words 4t and 4t + 16. */
IFD_DEV void ifd_mma_16832_s8(int32_t c[4], const uint32_t a[4], const uint32_t b[2])
{
#ifndef IFD_CUDA_EMU
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    ifd_emu_mma_16832_s8(c, a, b);
#endif
}

/* ---- ldmatrix: four 8x8 b16 matrices from shared memory ----------------------
 * Lane l supplies the address of row l % 8 of matrix l / 8 (16 contiguous
 * bytes, 16-byte aligned). Without .trans lane l receives, for matrix i,
 * r[i] = M_i[l/4][2(l%4) .. 2(l%4)+1]; with .trans it receives
 * r[i] = (M_i[2(l%4)][l/4], M_i[2(l%4)+1][l/4]). */
IFD_DEV void ifd_ldsm_x4(uint32_t r[4], const void *row_addr)
{
#ifndef IFD_CUDA_EMU
    uint32_t a = (uint32_t)__cvta_generic_to_shared(row_addr);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
    ifd_emu_ldmatrix_x4(r, row_addr, false);
#endif
}

IFD_DEV void ifd_ldsm_x4_trans(uint32_t r[4], const void *row_addr)
{
#ifndef IFD_CUDA_EMU
    uint32_t a = (uint32_t)__cvta_generic_to_shared(row_addr);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
    ifd_emu_ldmatrix_x4(r, row_addr, true);
#endif
}

/* ---- cp.async: global -> shared copies that bypass registers -----------------
 * Copies 16 bytes when `valid`, else writes 16 zero bytes (src not read). A
 * thread's copies are grouped by ifd_cp_async_commit(); ifd_cp_async_wait<N>()
 * waits until at most N of this thread's newest groups are still pending.
 * Other threads see the data only after a barrier that follows the wait. */
IFD_DEV void ifd_cp_async16(void *smem_dst, const void *gmem_src, bool valid)
{
#ifndef IFD_CUDA_EMU
    uint32_t d = (uint32_t)__cvta_generic_to_shared(smem_dst);
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(gmem_src), "r"(n));
#else
    ifd_emu_cp_async16(smem_dst, gmem_src, valid);
#endif
}

IFD_DEV void ifd_cp_async_commit()
{
#ifndef IFD_CUDA_EMU
    asm volatile("cp.async.commit_group;\n" ::);
#else
    ifd_emu_cp_async_commit();
#endif
}

template <int N> IFD_DEV void ifd_cp_async_wait()
{
#ifndef IFD_CUDA_EMU
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#else
    ifd_emu_cp_async_wait(N);
#endif
}

#endif
