/*
 * test_shape.c — model shapes (common/modelfile/shape.c) and random-weight models
 * (ifd_model_load_random): every deploy/shapes file loads with the real
 * model's numbers; bad files give an error naming the field; the same seed
 * gives bitwise the same logits, another seed different ones; a shape
 * served with another tokenizer takes the tokenizer's vocabulary size.
 */
#include "kvpool/kvparams.h"
#include "testutil.h"

#include "error.h"
#include "kvpool/kvpool.h"
#include "modelfile/shape.h"
#include "worker/backend.h"
#include "worker/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void shape_path(char *buf, size_t len, const char *file)
{
    const char *src = getenv("INFERD_SOURCE_DIR");
    snprintf(buf, len, "%s/deploy/shapes/%s", src ? src : "..", file);
}

START_TEST(test_deploy_shapes)
{
    static const struct {
        const char *file;
        uint32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_vocab;
        bool gemma;
    } want[] = {
        {"llama-3.2-1b.json", 16, 2048, 32, 8, 64, 128256, false},
        {"llama-3.2-3b.json", 28, 3072, 24, 8, 128, 128256, false},
        {"llama-3.1-8b.json", 32, 4096, 32, 8, 128, 128256, false},
        {"gemma-3-4b.json", 34, 2560, 8, 4, 256, 262208, true},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char path[512], err[256] = "";
        shape_path(path, sizeof path, want[i].file);
        ifd_model_config_t c;
        ck_assert_msg(ifd_shape_load(&c, path, err, sizeof err) == 0, "%s", err);
        ck_assert_uint_eq(c.n_layer, want[i].n_layer);
        ck_assert_uint_eq(c.n_embd, want[i].n_embd);
        ck_assert_uint_eq(c.n_head, want[i].n_head);
        ck_assert_uint_eq(c.n_head_kv, want[i].n_head_kv);
        ck_assert_uint_eq(c.head_dim, want[i].head_dim);
        ck_assert_uint_eq(c.n_vocab, want[i].n_vocab);
        ck_assert_int_eq(c.arch == IFD_ARCH_GEMMA3, want[i].gemma);
        if (want[i].gemma) { /* 5 local layers, then a global one */
            ck_assert(c.layer_is_local[0] && !c.layer_is_local[5] && c.layer_is_local[6]);
            ck_assert_uint_eq(c.sliding_window, 1024);
        }
    }
}
END_TEST

START_TEST(test_bad_shapes)
{
    static const struct {
        const char *json, *want;
    } cases[] = {
        {"{", "line"},
        {"{\"arch\":\"gpt2\"}", "arch"},
        {"{\"arch\":\"llama\",\"n_layer\":0}", "n_layer"},
        {"{\"arch\":\"llama\",\"n_layer\":2,\"n_embd\":64,\"n_ff\":64,\"n_head\":3,\"n_head_kv\":2,"
         "\"head_dim\":16,\"n_vocab\":10,\"rms_eps\":1e-5,\"rope_base\":1e4}",
         "multiple"},
        {"{\"arch\":\"llama\",\"n_layer\":2,\"n_embd\":64,\"n_ff\":64,\"n_head\":4,\"n_head_kv\":2,"
         "\"head_dim\":16,\"n_vocab\":10,\"rms_eps\":-1,\"rope_base\":1e4}",
         "rms_eps"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[64], err[256] = "";
        snprintf(path, sizeof path, "/tmp/ifd_shape_%d.json", (int)getpid());
        FILE *f = fopen(path, "w");
        fputs(cases[i].json, f);
        fclose(f);
        ifd_model_config_t c;
        ck_assert_int_eq(ifd_shape_load(&c, path, err, sizeof err), IFD_EFORMAT);
        ck_assert_msg(strstr(err, cases[i].want), "'%s' lacks '%s'", err, cases[i].want);
        unlink(path);
    }
    char err[256];
    ifd_model_config_t c;
    ck_assert_int_lt(ifd_shape_load(&c, "/nonexistent/x.json", err, sizeof err), 0);
}
END_TEST

/* logits of one 5-token prefill of a tiny random model with `seed` */
static void logits_of(uint64_t seed, float *out, int n_vocab)
{
    char path[512], err[256] = "";
    shape_path(path, sizeof path, "tiny-llama.json");
    ifd_model_config_t c;
    ck_assert_msg(ifd_shape_load(&c, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq((int)c.n_vocab, n_vocab);
    ifd_backend_t *be;
    ck_assert_int_eq(ifd_backend_cpu_create(&be, 1), 0);
    ifd_model_t *m;
    ck_assert_msg(ifd_model_load_random(&m, &c, seed, be, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_null(ifd_model_gguf(m));
    ifd_kvpool_params_t kp = ifd_kvpool_model_params(&c);
    kp.n_blocks = 2;
    kp.n_workers = 1;
    kp.dtype = IFD_KV_F32; /* the layers below are f32 views of it */
    ifd_kvpool_t *pool;
    ck_assert_int_eq(ifd_kvpool_create(&kp, &pool), 0);
    ifd_kv_layer_t kv[8];
    for (uint32_t l = 0; l < c.n_layer; l++)
        kv[l] = (ifd_kv_layer_t){ifd_kvpool_layer_k(pool, 0, (int)l),
                                 ifd_kvpool_layer_v(pool, 0, (int)l), IFD_DTYPE_F32, 16,
                                 (int)c.n_head_kv, (int)c.head_dim};
    int32_t tok[5] = {1, 7, 3, 200, 9}, pos[5] = {0, 1, 2, 3, 4}, seq[5] = {0}, table[1] = {1};
    int64_t slot[5] = {16, 17, 18, 19, 20};
    int32_t row = 4;
    ifd_batch_t b = {5, tok, pos, seq, slot, 1, table, 1, 1, &row, NULL, NULL, NULL, NULL};
    ck_assert_int_eq(ifd_model_forward(m, &b, kv, out), 0);
    ifd_kvpool_destroy(pool);
    ifd_model_destroy(m);
    be->ops->destroy(be);
}

START_TEST(test_random_weights_deterministic)
{
    enum { V = 256 };
    float a[V], b[V], d[V];
    logits_of(1, a, V);
    logits_of(1, b, V);
    logits_of(2, d, V);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    ck_assert(memcmp(a, d, sizeof a) != 0);
}
END_TEST

START_TEST(test_shape_vocab)
{
    char path[512], err[256] = "";
    shape_path(path, sizeof path, "tiny-llama.json");
    ifd_model_config_t a, b, c;
    ck_assert_int_eq(ifd_shape_load(&a, path, err, sizeof err), 0);
    ck_assert_int_eq(ifd_shape_load_vocab(&b, path, 49152, err, sizeof err), 0);
    ck_assert_int_eq(ifd_shape_load_vocab(&c, path, 0, err, sizeof err), 0);
    ck_assert_uint_eq(a.n_vocab, 256);
    ck_assert_uint_eq(b.n_vocab, 49152);
    ck_assert_uint_eq(c.n_vocab, 256); /* 0: the shape's own */
    ck_assert_uint_eq(b.n_layer, a.n_layer);
    ck_assert_uint_eq(b.head_dim, a.head_dim);
    ck_assert_int_ne(ifd_shape_load_vocab(&b, "/nonexistent.json", 10, err, sizeof err), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shape");
    ifd_test_case(s, "shape", 60,
                  IFD_TESTS(test_deploy_shapes, test_bad_shapes, test_random_weights_deterministic,
                            test_shape_vocab));
    return ifd_test_run(s);
}
