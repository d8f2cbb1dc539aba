/*
 * test_gguf_model.c — the GGUF reader on the default model
 * (SmolLM2-135M-Instruct Q4_1): hyper-parameters, tokenizer metadata and the
 * tensor table as the architecture defines them. Label: model.
 */
#include "testutil.h"

#include "error.h"
#include "modelfile/gguf.h"

#include <stdio.h>
#include <string.h>

static char model_path[4096];

static bool str_is(ifd_str_t s, const char *want)
{
    return s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

START_TEST(test_hparams)
{
    ifd_gguf_t *g;
    char err[512];
    ck_assert_msg(ifd_gguf_open(&g, model_path, err, sizeof err) == 0, "%s", err);
    ifd_str_t s;
    ck_assert_int_eq(ifd_gguf_get_str(g, "general.architecture", &s), 0);
    ck_assert(str_is(s, "llama"));
    static const struct {
        const char *key;
        uint32_t want;
    } hp[] = {
        {"llama.block_count", 30},        {"llama.embedding_length", 576},
        {"llama.attention.head_count", 9}, {"llama.attention.head_count_kv", 3},
        {"llama.feed_forward_length", 1536}, {"llama.vocab_size", 49152},
        {"llama.rope.dimension_count", 64},
    };
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++) {
        uint32_t v = 0;
        ck_assert_msg(ifd_gguf_get_u32(g, hp[i].key, &v) == 0, "%s missing", hp[i].key);
        ck_assert_msg(v == hp[i].want, "%s = %u, want %u", hp[i].key, v, hp[i].want);
    }
    float base = 0, eps = 0;
    ck_assert_int_eq(ifd_gguf_get_f32(g, "llama.rope.freq_base", &base), 0);
    ck_assert_float_eq(base, 100000.0f);
    ck_assert_int_eq(ifd_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps), 0);
    ck_assert(eps > 0 && eps < 1e-3f);
    ifd_gguf_close(g);
}
END_TEST

START_TEST(test_tokenizer_metadata)
{
    ifd_gguf_t *g;
    char err[512];
    ck_assert_msg(ifd_gguf_open(&g, model_path, err, sizeof err) == 0, "%s", err);
    ifd_str_t s;
    ck_assert_int_eq(ifd_gguf_get_str(g, "tokenizer.ggml.model", &s), 0);
    ck_assert(str_is(s, "gpt2"));
    ck_assert_int_eq(ifd_gguf_get_str(g, "tokenizer.ggml.pre", &s), 0);
    ck_assert(str_is(s, "smollm"));
    const ifd_gguf_value_t *tokens, *merges, *types;
    ck_assert_int_eq(ifd_gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens), 0);
    ck_assert_uint_eq(tokens->v.arr.count, 49152);
    ck_assert_int_eq(ifd_gguf_get_arr(g, "tokenizer.ggml.merges", &merges), 0);
    ck_assert_uint_eq(merges->v.arr.count, 48900);
    ck_assert_int_eq(ifd_gguf_get_arr(g, "tokenizer.ggml.token_type", &types), 0);
    ck_assert_uint_eq(types->v.arr.count, 49152);
    uint32_t bos = 0, eos = 0;
    ck_assert_int_eq(ifd_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &bos), 0);
    ck_assert_int_eq(ifd_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &eos), 0);
    ck_assert_uint_eq(bos, 1);
    ck_assert_uint_eq(eos, 2);
    ck_assert_int_eq(ifd_gguf_arr_str(g, tokens, bos, &s), 0);
    ck_assert(str_is(s, "<|im_start|>"));
    ck_assert_int_eq(ifd_gguf_arr_str(g, tokens, eos, &s), 0);
    ck_assert(str_is(s, "<|im_end|>"));
    ck_assert_int_eq(ifd_gguf_get_str(g, "tokenizer.chat_template", &s), 0);
    ck_assert(s.len > 0 && memmem(s.ptr, s.len, "<|im_start|>", 12) != NULL);
    ifd_gguf_close(g);
}
END_TEST

START_TEST(test_tensor_table)
{
    ifd_gguf_t *g;
    char err[512];
    ck_assert_msg(ifd_gguf_open(&g, model_path, err, sizeof err) == 0, "%s", err);
    /* 2 global + 9 per layer (no output.weight: tied embeddings) */
    ck_assert_uint_eq(ifd_gguf_tensor_count(g), 2 + 30 * 9);
    const ifd_gguf_tensor_t *t = ifd_gguf_find_tensor(g, "token_embd.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->ne[0], 576);
    ck_assert_uint_eq(t->ne[1], 49152);
    ck_assert_ptr_null(ifd_gguf_find_tensor(g, "output.weight"));
    static const struct {
        const char *suffix;
        uint64_t ne0, ne1;
    } per_layer[] = {
        {"attn_norm.weight", 576, 1}, {"attn_q.weight", 576, 576},
        {"attn_k.weight", 576, 192},  {"attn_v.weight", 576, 192},
        {"attn_output.weight", 576, 576}, {"ffn_norm.weight", 576, 1},
        {"ffn_gate.weight", 576, 1536}, {"ffn_up.weight", 576, 1536},
        {"ffn_down.weight", 1536, 576},
    };
    uint64_t prev_end = 0, total = 0;
    for (int l = 0; l < 30; l++) {
        for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s", l, per_layer[i].suffix);
            t = ifd_gguf_find_tensor(g, name);
            ck_assert_msg(t != NULL, "%s missing", name);
            ck_assert_msg(t->ne[0] == per_layer[i].ne0 && t->ne[1] == per_layer[i].ne1,
                          "%s has shape %llu x %llu", name, (unsigned long long)t->ne[0],
                          (unsigned long long)t->ne[1]);
        }
    }
    for (uint64_t i = 0; i < ifd_gguf_tensor_count(g); i++) {
        t = ifd_gguf_tensor(g, i);
        ck_assert_uint_eq(t->offset % ifd_gguf_alignment(g), 0);
        ck_assert((const char *)t->data + t->nbytes <=
                  (const char *)ifd_gguf_tensor(g, 0)->data - ifd_gguf_tensor(g, 0)->offset +
                      (ifd_gguf_file_size(g) - ifd_gguf_data_offset(g)));
        if (t->offset + t->nbytes > prev_end)
            prev_end = t->offset + t->nbytes;
        total += t->nbytes;
    }
    ck_assert_uint_le(ifd_gguf_data_offset(g) + prev_end, ifd_gguf_file_size(g));
    ck_assert_uint_gt(total, 50u * 1024 * 1024);
    ifd_gguf_close(g);
}
END_TEST

int main(void)
{
    if (!ifd_test_model_path(model_path, sizeof model_path))
        ifd_test_skip("default model not found at %s (run deploy/fetch-model.sh)", model_path);
    Suite *s = suite_create("gguf_model");
    ifd_test_case(s, "smollm2", 60,
                  IFD_TESTS(test_hparams, test_tokenizer_metadata, test_tensor_table));
    return ifd_test_run(s);
}
