/*
 * test_model_load.c — weight loading and the forward pass on tiny synthetic
 * GGUF models (llama and gemma3 layouts, random F32/F16/Q8_0 weights):
 * clear errors naming the tensor for a missing tensor, a wrong shape and an
 * unsupported type; an unsupported architecture named; and a forward step
 * whose per-sequence logits do not depend on what else is in the batch.
 */
#include "testutil.h"

#include "error.h"
#include "gguf_builder.h"
#include "kvpool/kvpool.h"
#include "worker/backend.h"
#include "worker/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { E = 32, NH = 4, NKV = 2, HD = 8, FF = 64, NL = 2, V = 50 };

typedef struct {
    char name[64];
    uint64_t ne[2];
    uint32_t nd;
    uint32_t type;
} tinfo_t;

/* mutate: 0 valid, 1 missing ffn_down of layer 1, 2 wrong attn_k shape,
 * 3 unsupported type (I8) for ffn_up, 4 arch "gpt2" */
static char *build_model(const char *arch, int mutate, char *path, size_t pathlen)
{
    bool gemma = strcmp(arch, "gemma3") == 0;
    tinfo_t t[64];
    int n = 0;
#define T(nm, a, b, nd_, ty)                                                                \
    do {                                                                                    \
        snprintf(t[n].name, sizeof t[n].name, "%s", nm);                                    \
        t[n].ne[0] = (a), t[n].ne[1] = (b), t[n].nd = (nd_), t[n].type = (ty);              \
        n++;                                                                                \
    } while (0)
    T("token_embd.weight", E, V, 2, IFD_GGML_Q8_0);
    T("output_norm.weight", E, 1, 1, IFD_GGML_F32);
    for (int l = 0; l < NL; l++) {
        char nm[64];
#define L(sfx, a, b, nd_, ty)                                                               \
    do {                                                                                    \
        snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, sfx);                                \
        T(nm, a, b, nd_, ty);                                                               \
    } while (0)
        L("attn_norm", E, 1, 1, IFD_GGML_F32);
        L("attn_q", E, NH * HD, 2, IFD_GGML_F16);
        L("attn_k", E, (mutate == 2 && l == 1) ? NKV * HD + 1 : NKV * HD, 2, IFD_GGML_F32);
        L("attn_v", E, NKV * HD, 2, IFD_GGML_F32);
        L("attn_output", NH * HD, E, 2, IFD_GGML_F32);
        L("ffn_norm", E, 1, 1, IFD_GGML_F32);
        L("ffn_gate", E, FF, 2, IFD_GGML_F32);
        L("ffn_up", E, FF, 2, (mutate == 3 && l == 0) ? IFD_GGML_I8 : IFD_GGML_F32);
        if (!(mutate == 1 && l == 1))
            L("ffn_down", FF, E, 2, IFD_GGML_F32);
        if (gemma) {
            L("attn_q_norm", HD, 1, 1, IFD_GGML_F32);
            L("attn_k_norm", HD, 1, 1, IFD_GGML_F32);
            L("post_attention_norm", E, 1, 1, IFD_GGML_F32);
            L("post_ffw_norm", E, 1, 1, IFD_GGML_F32);
        }
#undef L
    }
#undef T
    ifd_buf_t b = IFD_BUF_INIT;
    gb_header(&b, 3, (uint64_t)n, 8);
    char key[96];
    const char *a = mutate == 4 ? "gpt2" : arch;
    gb_kv_str(&b, "general.architecture", a);
#define KU(sfx, v)                                                                          \
    do {                                                                                    \
        snprintf(key, sizeof key, "%s.%s", a, sfx);                                         \
        gb_kv_u32(&b, key, v);                                                              \
    } while (0)
    KU("block_count", NL);
    KU("embedding_length", E);
    KU("feed_forward_length", FF);
    KU("attention.head_count", NH);
    KU("attention.head_count_kv", NKV);
    KU("context_length", 256);
#undef KU
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a);
    gb_key(&b, key, IFD_GGUF_FLOAT32);
    float eps = 1e-5f;
    uint32_t eb;
    memcpy(&eb, &eps, 4);
    gb_u32(&b, eb);
    uint64_t off = 0;
    uint64_t offs[64];
    for (int i = 0; i < n; i++) {
        uint64_t row;
        ifd_ggml_row_bytes(t[i].type, t[i].ne[0], &row);
        offs[i] = off;
        gb_tensor_info(&b, t[i].name, t[i].nd, t[i].ne, t[i].type, off);
        off += (row * t[i].ne[1] + 31) / 32 * 32;
    }
    gb_pad(&b, 32);
    unsigned seed = 12345;
    for (int i = 0; i < n; i++) {
        uint64_t row;
        ifd_ggml_row_bytes(t[i].type, t[i].ne[0], &row);
        uint64_t bytes = row * t[i].ne[1];
        size_t start = b.len;
        for (uint64_t j = 0; j < bytes; j++) {
            seed = seed * 1103515245u + 12345u;
            gb_u8(&b, (uint8_t)(seed >> 16));
        }
        /* make float data sane: small values (norm weights ~1) */
        if (t[i].type == IFD_GGML_F32) {
            float *f = (float *)(b.data + start);
            for (uint64_t j = 0; j < bytes / 4; j++) {
                seed = seed * 1103515245u + 12345u;
                float r = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
                f[j] = t[i].nd == 1 ? 1.0f + 0.1f * r : 0.3f * r;
            }
        } else if (t[i].type == IFD_GGML_F16) {
            uint16_t *h = (uint16_t *)(b.data + start);
            for (uint64_t j = 0; j < bytes / 2; j++) {
                seed = seed * 1103515245u + 12345u;
                h[j] = (uint16_t)(0x2c00 + ((seed >> 8) & 0x3ff)) | (uint16_t)((seed & 1) << 15);
            }
        } else if (t[i].type == IFD_GGML_Q8_0) {
            uint8_t *q = (uint8_t *)(b.data + start);
            for (uint64_t blk = 0; blk < bytes / 34; blk++) { /* scale d = 0.01 */
                q[blk * 34] = 0x1f, q[blk * 34 + 1] = 0x21;
            }
        }
        gb_pad(&b, 32);
        (void)offs;
    }
    snprintf(path, pathlen, "/tmp/ifd_tiny_%d_%s_%d.gguf", (int)getpid(), arch, mutate);
    FILE *f = fopen(path, "wb");
    fwrite(b.data, 1, b.len, f);
    fclose(f);
    ifd_buf_free(&b);
    return path;
}

static void expect_load_error(const char *arch, int mutate, const char *want)
{
    char path[256], err[512] = "";
    build_model(arch, mutate, path, sizeof path);
    ifd_backend_t *be;
    ck_assert_int_eq(ifd_backend_cpu_create(&be, 1), 0);
    ifd_model_t *m = NULL;
    int rc = ifd_model_load(&m, path, be, err, sizeof err);
    ck_assert_int_ne(rc, 0);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err, want) != NULL, "message '%s' lacks '%s'", err, want);
    be->ops->destroy(be);
    unlink(path);
}

START_TEST(test_load_errors_name_the_tensor)
{
    expect_load_error("llama", 1, "tensor 'blk.1.ffn_down.weight' is missing");
    expect_load_error("llama", 2, "tensor 'blk.1.attn_k.weight' has shape [32, 17]");
    expect_load_error("llama", 3, "tensor 'blk.0.ffn_up.weight' has type I8");
    expect_load_error("llama", 4, "architecture 'gpt2' is not supported");
}
END_TEST

/* Runs sequences {a} alone and {a, b} together; a's logits must be equal. */
static void check_forward(const char *arch)
{
    char path[256], err[512] = "";
    build_model(arch, 0, path, sizeof path);
    ifd_backend_t *be;
    ck_assert_int_eq(ifd_backend_cpu_create(&be, 2), 0);
    ifd_model_t *m;
    ck_assert_msg(ifd_model_load(&m, path, be, err, sizeof err) == 0, "%s", err);
    ifd_kvpool_params_t kp = ifd_kvpool_default_params();
    kp.n_layers = NL;
    kp.n_kv_heads = NKV;
    kp.head_dim = HD;
    kp.n_blocks = 8;
    kp.n_workers = 1;
    kp.dtype = IFD_KV_F32; /* the layers below are f32 views of it */
    ifd_kvpool_t *pool;
    ck_assert_int_eq(ifd_kvpool_create(&kp, &pool), 0);
    ifd_kv_layer_t kv[NL];
    for (int l = 0; l < NL; l++)
        kv[l] = (ifd_kv_layer_t){ifd_kvpool_layer_k(pool, 0, l), ifd_kvpool_layer_v(pool, 0, l),
                                 IFD_DTYPE_F32, 16, NKV, HD};
    /* seq 0: 20 tokens in blocks {3, 1}; seq 1: 5 tokens in block {6} */
    int32_t toks[25], pos[25], seq[25];
    int64_t slot[25];
    int32_t tables[2 * 2] = {3, 1, 6, 0};
    for (int i = 0; i < 25; i++) {
        int s = i < 20 ? 0 : 1, p = i < 20 ? i : i - 20;
        toks[i] = (i * 7) % V;
        pos[i] = p;
        seq[i] = s;
        slot[i] = (int64_t)tables[s * 2 + p / 16] * 16 + p % 16;
    }
    float *alone = malloc(sizeof(float) * V), *both = malloc(sizeof(float) * 2 * V);
    int32_t row_a = 19, rows_ab[2] = {19, 24};
    ifd_batch_t b1 = {20, toks, pos, seq, slot, 1, tables, 2, 1, &row_a, NULL, NULL, NULL, NULL};
    ck_assert_int_eq(ifd_model_forward(m, &b1, kv, alone), 0);
    ifd_batch_t b2 = {25, toks, pos, seq, slot, 2, tables, 2, 2, rows_ab, NULL, NULL, NULL, NULL};
    ck_assert_int_eq(ifd_model_forward(m, &b2, kv, both), 0);
    for (int v = 0; v < V; v++)
        ck_assert(isfinite(alone[v]));
    ck_assert_msg(memcmp(alone, both, sizeof(float) * V) == 0, "%s: batched logits differ", arch);
    /* bad batches are refused */
    int32_t bad_tok[1] = {V};
    ifd_batch_t b3 = {1, bad_tok, pos, seq, slot, 1, tables, 2, 1, &rows_ab[0], NULL, NULL, NULL, NULL};
    b3.logit_rows = (int32_t[]){0};
    ck_assert_int_eq(ifd_model_forward(m, &b3, kv, alone), IFD_EINVAL);
    free(alone);
    free(both);
    ifd_kvpool_destroy(pool);
    ifd_model_destroy(m);
    be->ops->destroy(be);
    unlink(path);
}

START_TEST(test_forward_llama)
{
    check_forward("llama");
}
END_TEST

START_TEST(test_forward_gemma3)
{
    check_forward("gemma3");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model_load");
    ifd_test_case(
        s, "tiny", 60,
        IFD_TESTS(test_load_errors_name_the_tensor, test_forward_llama, test_forward_gemma3));
    return ifd_test_run(s);
}
