/*
 * fp16.h — bulk conversions between f32 and the two 16-bit float formats
 * (IEEE binary16 "f16" and bfloat16 "bf16"). The one-value conversions
 * (ifd_f16_to_f32, ifd_f32_to_f16, ifd_bf16_to_f32, ifd_f32_to_bf16) are
 * declared in cpu_kernels.h and implemented in fp16.c with these.
 *
 * Every function here gives exactly the same bits as calling the one-value
 * conversion on each element (round to nearest even, subnormals kept, inf
 * kept, NaN stays NaN — its payload may differ in the bulk f16 path, whose
 * F16C instructions quiet signalling NaNs), whatever SIMD path it picks at
 * run time (F16C/AVX2 when ifd_cpu_features() reports them, else scalar).
 *
 * Ownership: the caller owns both arrays; they must not overlap.
 * Threading: pure functions, safe from any thread.
 */
#ifndef IFD_FP16_H
#define IFD_FP16_H

#include <stdint.h>

void ifd_f16_to_f32_n(float *restrict y,          /* [n] */
                      const uint16_t *restrict x, /* [n] */
                      int64_t n);
void ifd_f32_to_f16_n(uint16_t *restrict y,    /* [n] */
                      const float *restrict x, /* [n] */
                      int64_t n);
void ifd_bf16_to_f32_n(float *restrict y,          /* [n] */
                       const uint16_t *restrict x, /* [n] */
                       int64_t n);
void ifd_f32_to_bf16_n(uint16_t *restrict y,    /* [n] */
                       const float *restrict x, /* [n] */
                       int64_t n);

#endif
