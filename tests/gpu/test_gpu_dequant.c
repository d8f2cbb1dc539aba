/*
 * test_gpu_dequant.c — ifd_cuda_dequantize_bf16 against ifd_cpu_dequantize
 * on random blocks: every output must equal the CPU's f32 value rounded to
 * bf16 (round to nearest even), bit for bit. Block scales are random finite
 * fp16 values; the quantized bytes are fully random. The output buffer
 * starts NaN-poisoned and has a poisoned tail that must stay untouched.
 */
#include "gpu_test.h"

#include "cuda/cuda_kernels.h"
#include "error.h"
#include "modelfile/ggml_types.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_f16(uint8_t *p, float x)
{
    uint16_t h = ifd_f32_to_f16(x);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

static void dequant_one(uint32_t type, int64_t n)
{
    const uint32_t be = ifd_ggml_block_elems(type), bb = ifd_ggml_block_bytes(type);
    const int64_t nb = n / be;
    const size_t bytes = (size_t)(nb * bb);
    uint8_t *x = gt_xmalloc(bytes + 1);
    for (size_t i = 0; i < bytes; i++)
        x[i] = (uint8_t)gt_rand_u64();
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = x + b * bb;
        switch (type) {
        case IFD_GGML_Q4_0:
        case IFD_GGML_Q8_0:
            put_f16(blk, gt_randn() * 0.02f);
            break;
        case IFD_GGML_Q4_1:
        case IFD_GGML_Q4_K:
            put_f16(blk, gt_randn() * 0.02f);
            put_f16(blk + 2, gt_randn() * 0.02f);
            break;
        case IFD_GGML_Q6_K:
            put_f16(blk + 208, gt_randn() * 0.02f);
            break;
        case IFD_GGML_F32:
            for (uint32_t i = 0; i < be; i++) {
                float f = gt_randn();
                memcpy(blk + 4 * i, &f, 4);
            }
            break;
        case IFD_GGML_F16:
            put_f16(blk, gt_randn());
            break;
        }
    }
    float *ref = gt_xmalloc((size_t)n * 4);
    int rc = ifd_cpu_dequantize(ref, x, type, n);
    GT_EXPECT(rc == 0, "ifd_cpu_dequantize(%s) returned %d", ifd_ggml_type_name(type), rc);
    uint16_t *want = gt_xmalloc((size_t)n * 2), *got = gt_xmalloc((size_t)(n + 8) * 2);
    for (int64_t i = 0; i < n; i++)
        want[i] = ifd_f32_to_bf16(ref[i]);

    /* An odd device offset for x: blocks are not aligned in GGUF files. */
    uint8_t *dx_base = gt_dalloc(bytes + 1);
    gt_upload(dx_base + 1, x, bytes);
    uint16_t *dy = gt_dalloc_poison((size_t)(n + 8) * 2);
    rc = ifd_cuda_dequantize_bf16(dy, dx_base + 1, type, n, NULL);
    GT_EXPECT(rc == 0, "ifd_cuda_dequantize_bf16(%s) returned %d", ifd_ggml_type_name(type), rc);
    gt_sync();
    gt_download(got, dy, (size_t)(n + 8) * 2);
    int64_t diff = gt_count_diff_u16(got, want, n);
    GT_EXPECT(diff == 0, "%s n=%lld: %lld of %lld bf16 values differ from the CPU's",
              ifd_ggml_type_name(type), (long long)n, (long long)diff, (long long)n);
    for (int i = 0; i < 8; i++)
        GT_EXPECT(got[n + i] == 0xffff, "%s: wrote past the end", ifd_ggml_type_name(type));
    free(x), free(ref), free(want), free(got);
    gt_dfree(dx_base), gt_dfree(dy);
}

static void test_types(void)
{
    static const uint32_t types[] = {IFD_GGML_Q4_0, IFD_GGML_Q4_1, IFD_GGML_Q8_0, IFD_GGML_Q4_K,
                                     IFD_GGML_Q6_K, IFD_GGML_F16,  IFD_GGML_F32};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        dequant_one(types[i], 256);
        dequant_one(types[i], gt_small() ? 256 * 37 : 256 * 4099);
    }
}

static void test_errors(void)
{
    uint16_t *y = (uint16_t *)16;
    const void *x = (const void *)32;
    GT_EXPECT(ifd_cuda_dequantize_bf16(y, x, IFD_GGML_Q5_K, 256, NULL) == IFD_ENOTSUP,
              "Q5_K accepted");
    GT_EXPECT(ifd_cuda_dequantize_bf16(y, x, IFD_GGML_Q4_K, 32, NULL) == IFD_EINVAL,
              "a partial Q4_K block accepted");
    GT_EXPECT(ifd_cuda_dequantize_bf16((uint16_t *)18, x, IFD_GGML_Q4_0, 32, NULL) == IFD_EINVAL,
              "misaligned output accepted");
}

int main(void)
{
    gt_begin("test_gpu_dequant");
    gt_case("types", test_types);
    gt_case("errors", test_errors);
    return gt_end();
}
