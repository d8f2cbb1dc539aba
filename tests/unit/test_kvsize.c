/*
 * test_kvsize.c — the GPU KV pool's sizing arithmetic (worker/kvsize.c):
 * blocks that fit in fraction × total after what is in use and the
 * margin, the edges (nothing fits, bad fractions), and the margin kept
 * beyond the measured warm-up; the warm-up itself (worker/kvprobe.c) on the
 * CPU backend with a scripted free-memory reading: its steps are valid
 * batches for the model, the parts are the differences of the readings, a
 * failing reading or bad parameters are reported. (On the CUDA emulator,
 * with real memory and graphs: test_daemon_gpu_emu.) And the capacity per KV
 * type: q8_0 / q4_0 blocks hold 1.88× / 3.55× the 2k-token sequences of
 * f16 in the same budget (docs/kvpool.md, "Quantized K/V").
 */
#include "testutil.h"

#include "error.h"
#include "kvpool/kvpool.h"
#include "worker/backend.h"
#include "worker/kvprobe.h"
#include "worker/kvsize.h"
#include "worker/model.h"

#include <stdio.h>
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

START_TEST(test_margin)
{
    /* 64 MiB and 1/20 of what was measured, growing with it */
    ck_assert_uint_eq(ifd_kvsize_margin(80 * GIB, 0), 64 * MIB);
    ck_assert_uint_eq(ifd_kvsize_margin(80 * GIB, 20 * MIB), 65 * MIB);
    ck_assert_uint_eq(ifd_kvsize_margin(80 * GIB, 2 * GIB), 64 * MIB + 2 * GIB / 20);
    ck_assert_uint_gt(ifd_kvsize_margin(80 * GIB, GIB + 20), ifd_kvsize_margin(80 * GIB, GIB));
    /* the fixed part is 1/64 of a device smaller than 4 GiB */
    ck_assert_uint_eq(ifd_kvsize_margin(4 * GIB, 0), 64 * MIB);
    ck_assert_uint_eq(ifd_kvsize_margin(128 * MIB, 20 * MIB), 3 * MIB);
}
END_TEST

/* Scripted readings: free memory before the scratch KV, after it, after
 * the eager steps, after the graphs, after the scratch is freed. */
typedef struct {
    uint64_t v[5];
    int n, fail_at;
} script_t;

static int script_mem(void *ctx, uint64_t *free_bytes)
{
    script_t *s = ctx;
    if (s->n == s->fail_at)
        return IFD_ECUDA;
    *free_bytes = s->n < 5 ? s->v[s->n] : 0;
    s->n++;
    return 0;
}

START_TEST(test_warmup_cpu)
{
    ifd_model_config_t c;
    memset(&c, 0, sizeof c);
    c.arch = IFD_ARCH_LLAMA;
    snprintf(c.arch_name, sizeof c.arch_name, "llama");
    c.n_layer = 2, c.n_embd = 64, c.n_ff = 96, c.n_head = 2, c.n_head_kv = 1;
    c.head_dim = 32, c.n_rot = 32, c.n_vocab = 50, c.n_ctx_train = 600;
    c.rms_eps = 1e-6f, c.rope_base = 10000.0f, c.rope_freq_scale = 1.0f;
    c.attn_scale = 1.0f / 5.656854f, c.embd_scale = 1.0f;
    ifd_backend_t *be = NULL;
    ifd_model_t *m = NULL;
    char err[256] = "";
    ck_assert_int_eq(ifd_backend_cpu_create(&be, 1), 0);
    ck_assert_int_eq(ifd_model_load_random(&m, &c, 3, be, err, sizeof err), 0);
    ifd_kvprobe_params_t p = {.max_batched_tokens = 40, .max_seqs = 5, .max_ctx = 600,
                              .block_size = 16, .kv_dtype = IFD_KV_F32};
    script_t s = {{1000, 900, 700, 650, 750}, 0, -1};
    ifd_kvprobe_result_t r;
    ck_assert_int_eq(ifd_kvprobe_warmup(m, &p, script_mem, &s, &r, err, sizeof err), 0);
    ck_assert_int_eq(s.n, 5);
    ck_assert_uint_eq(r.free_before, 1000);
    ck_assert_uint_eq(r.kv_scratch_bytes, 100);
    ck_assert_uint_eq(r.activation_bytes, 200);
    ck_assert_uint_eq(r.graph_bytes, 50);
    ck_assert_uint_eq(r.free_after, 750);
    ck_assert_int_eq(r.n_graphs, 0); /* the CPU backend has none */
    /* prefills of 16, 24, 36, 40 tokens; decodes of 1, 2, 4, 5 sequences,
     * eager at context 600, then 5 with raw logprobs, penalties and a bias,
     * then twice with graphs at 256, 512, 600 */
    ck_assert_int_eq(r.prefill_steps, 4);
    ck_assert_int_eq(r.decode_steps, 4 + 1 + 4 * 3 * 2);
    /* a failing reading, bad parameters */
    s = (script_t){{1000, 900, 700, 650, 750}, 0, 2};
    ck_assert_int_ne(ifd_kvprobe_warmup(m, &p, script_mem, &s, &r, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "free memory"));
    p.max_seqs = 0;
    ck_assert_int_eq(ifd_kvprobe_warmup(m, &p, script_mem, &s, &r, err, sizeof err), IFD_EINVAL);
    ifd_model_destroy(m);
    be->ops->destroy(be);
}
END_TEST

/* 2048-token sequences a budget of `budget` bytes holds with K/V in dtype t:
 * counted by the pool itself (a pool created with that budget) and by the
 * GPU sizing arithmetic (the same budget free on a device), which agree. */
static int64_t seqs_2k(int n_layers, int n_kv_heads, int head_dim, ifd_kv_dtype_t t,
                       uint64_t budget)
{
    ifd_kvpool_params_t p = ifd_kvpool_default_params();
    p.n_layers = n_layers, p.n_kv_heads = n_kv_heads, p.head_dim = head_dim, p.dtype = t;
    p.bytes_budget = budget;
    const uint64_t all_layers = 2 * (uint64_t)n_layers * ifd_kvpool_block_bytes(&p);
    const int64_t gpu_blocks = ifd_kvsize_blocks(budget, budget, 1.0, 0, all_layers);
    ifd_kvpool_t *pool = NULL;
    ck_assert_int_eq(ifd_kvpool_create(&p, &pool), 0);
    ck_assert_int_eq(ifd_kvpool_n_blocks(pool), gpu_blocks);
    ifd_kvpool_destroy(pool);
    return gpu_blocks / (2048 / p.block_size);
}

START_TEST(test_capacity_per_dtype)
{
    /* SmolLM2-135M (30 layers, 3 KV heads of 64) and Gemma 3 270M's global
     * geometry (1 KV head of 256) in 1 GiB */
    static const int geo[2][3] = {{30, 3, 64}, {18, 1, 256}};
    for (int g = 0; g < 2; g++) {
        const uint64_t budget = GIB;
        const int64_t f16 = seqs_2k(geo[g][0], geo[g][1], geo[g][2], IFD_KV_F16, budget);
        const int64_t q8 = seqs_2k(geo[g][0], geo[g][1], geo[g][2], IFD_KV_Q8_0, budget);
        const int64_t q4 = seqs_2k(geo[g][0], geo[g][1], geo[g][2], IFD_KV_Q4_0, budget);
        const int64_t f8 = seqs_2k(geo[g][0], geo[g][1], geo[g][2], IFD_KV_FP8, budget);
        printf("geometry %d: 2k-token sequences in 1 GiB: f16 %lld, q8_0 %lld (%.3fx), "
               "q4_0 %lld (%.3fx), fp8 %lld (%.3fx)\n",
               g, (long long)f16, (long long)q8, (double)q8 / (double)f16, (long long)q4,
               (double)q4 / (double)f16, (long long)f8, (double)f8 / (double)f16);
        ck_assert_int_gt(f16, 10);
        /* 16 bits against 8.5 (q8_0) and 4.5 (q4_0) per value: 1.882x and
         * 3.556x, less one sequence of rounding; fp8 8 + 32 / head_dim bits:
         * 1.882x at head_dim 64, 1.969x at 256 */
        ck_assert_int_ge(q8 * 1000, 1860 * f16);
        ck_assert_int_ge(q4 * 1000, 3500 * f16);
        ck_assert_int_ge(f8 * 1000, (g == 0 ? 1860 : 1940) * f16);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kvsize");
    ifd_test_case(s, "kvsize", 0,
                  IFD_TESTS(test_blocks, test_margin, test_warmup_cpu, test_capacity_per_dtype));
    return ifd_test_run(s);
}
