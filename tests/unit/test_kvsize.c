/*
 * test_kvsize.c — the GPU KV pool's sizing arithmetic (worker/kvsize.c):
 * blocks that fit in fraction × total after what is in use and the
 * activations' reserve, the edges (nothing fits, bad fractions), and the
 * activations' estimate growing with the step size and the vocabulary.
 */
#include "testutil.h"

#include "kvsize.h"

#include <string.h>

#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)

START_TEST(test_blocks)
{
    /* 80 GiB card, 10 GiB in use, 0.9: 72 - 10 - 2 = 60 GiB of 1 MiB blocks */
    ck_assert_int_eq(ifd_kvsize_blocks(80 * GIB, 70 * GIB, 0.9, 2 * GIB, MIB), 60 * 1024);
    /* a partial block does not count */
    ck_assert_int_eq(ifd_kvsize_blocks(100 * MIB, 100 * MIB, 1.0, 0, 3 * MIB), 33);
    /* nothing left, or less than nothing */
    ck_assert_int_eq(ifd_kvsize_blocks(80 * GIB, 8 * GIB, 0.9, 0, MIB), 0);
    ck_assert_int_eq(ifd_kvsize_blocks(80 * GIB, 80 * GIB, 0.5, 40 * GIB, MIB), 0);
    /* bad inputs give 0, never a negative or huge count */
    ck_assert_int_eq(ifd_kvsize_blocks(80 * GIB, 80 * GIB, 0.0, 0, MIB), 0);
    ck_assert_int_eq(ifd_kvsize_blocks(80 * GIB, 80 * GIB, 1.5, 0, MIB), 0);
    ck_assert_int_eq(ifd_kvsize_blocks(80 * GIB, 80 * GIB, 0.9, 0, 0), 0);
    ck_assert_int_eq(ifd_kvsize_blocks(GIB, 2 * GIB, 0.9, 0, MIB), 0);
    /* the fraction scales what may be used */
    int64_t a = ifd_kvsize_blocks(GIB, GIB, 0.5, 0, MIB);
    int64_t b = ifd_kvsize_blocks(GIB, GIB, 0.25, 0, MIB);
    ck_assert_int_eq(a, 512);
    ck_assert_int_eq(b, 256);
}
END_TEST

START_TEST(test_reserve)
{
    ifd_model_config_t c;
    memset(&c, 0, sizeof c);
    c.n_embd = 3072, c.n_ff = 8192, c.n_head = 24, c.n_head_kv = 8, c.head_dim = 128;
    c.n_vocab = 128256;
    uint64_t r256 = ifd_kvsize_act_reserve(&c, 256, 64, 2);
    uint64_t r2048 = ifd_kvsize_act_reserve(&c, 2048, 64, 2);
    uint64_t rf32 = ifd_kvsize_act_reserve(&c, 256, 64, 4);
    /* at least the logits of 64 rows (f32) and the fixed 64 MiB */
    ck_assert_uint_ge(r256, 64 * MIB + (uint64_t)64 * 128256 * 4);
    ck_assert_uint_gt(r2048, r256);
    ck_assert_uint_gt(rf32, r256);
    /* per token: the f32 residual alone is 12 KiB of 3072 floats */
    ck_assert_uint_ge(r2048 - r256, (uint64_t)(2048 - 256) * 3072 * 4);
    /* a 3B shape's estimate stays far below a GPU (sanity: < 2 GiB at 2048 tokens) */
    ck_assert_uint_lt(r2048, 2 * GIB);
    c.n_vocab = 256;
    ck_assert_uint_lt(ifd_kvsize_act_reserve(&c, 256, 64, 2), r256);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kvsize");
    TCase *tc = tcase_create("kvsize");
    tcase_add_test(tc, test_blocks);
    tcase_add_test(tc, test_reserve);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
