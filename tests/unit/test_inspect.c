/*
 * test_inspect.c — common/inspect on files inferd cannot serve: a GGUF of
 * another architecture, a vocabulary-only GGUF (built in memory with
 * gguf_builder.h, and llama.cpp's vocabulary files when the test data is
 * there) and a Hugging Face directory of an unknown model type are
 * described, with "servable: no — why"; malformed or missing files are
 * errors naming the file, with nothing on stdout. (The servable report of
 * a real model: tests/integration/test_cli_inspect.sh.)
 */
#include "gguf_builder.h"
#include "inspect/inspect.h"
#include "testutil.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64];

/* dir/name with the bytes of b (NULL: only the path). */
static const char *put(const char *name, const ifd_buf_t *b, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", g_dir, name);
    if (b) {
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(b->data, 1, b->len, f), b->len);
        fclose(f);
    }
    return path;
}

typedef struct {
    int rc;
    char *out, *err;
    size_t out_len, err_len;
} run_t;

static run_t inspect(const char *path, bool json)
{
    run_t r = {0};
    FILE *out = open_memstream(&r.out, &r.out_len);
    FILE *err = open_memstream(&r.err, &r.err_len);
    r.rc = ifd_inspect_file(out, err, path, json);
    fclose(out);
    fclose(err);
    return r;
}

static void run_free(run_t *r)
{
    free(r->out);
    free(r->err);
}

/* The JSON report of path (which must be described), and its text form
 * checked for the servable line. */
static json_t *report(const char *path, const char *servable_line)
{
    run_t t = inspect(path, false);
    ck_assert_msg(t.rc == 0, "%s: %s", path, t.err);
    ck_assert_msg(strstr(t.out, servable_line), "%s: no '%s' in\n%s", path, servable_line, t.out);
    run_free(&t);
    run_t j = inspect(path, true);
    ck_assert_int_eq(j.rc, 0);
    json_t *r = json_loads(j.out, 0, NULL);
    ck_assert_ptr_nonnull(r);
    run_free(&j);
    return r;
}

/* A two-tensor GGUF of architecture "bert". */
static void bert_gguf(ifd_buf_t *b)
{
    gb_header(b, 3, 2, 3);
    gb_kv_str(b, "general.architecture", "bert");
    gb_kv_str(b, "general.name", "tiny-bert");
    gb_kv_u32(b, "bert.block_count", 2);
    const uint64_t ne[2] = {8, 4};
    gb_tensor_info(b, "token_embd.weight", 2, ne, IFD_GGML_F32, 0);
    gb_tensor_info(b, "blk.0.attn_q.weight", 2, ne, IFD_GGML_F16, 128);
    gb_pad(b, 32);
    for (int i = 0; i < 128 + 64; i++)
        gb_u8(b, 0);
}

START_TEST(test_other_architecture)
{
    ifd_buf_t b = IFD_BUF_INIT;
    char path[128];
    bert_gguf(&b);
    json_t *r = report(put("bert.gguf", &b, path, sizeof path), "\nservable:       no \u2014 ");
    ck_assert(json_is_false(json_object_get(r, "servable")));
    const char *why = json_string_value(json_object_get(r, "not_servable_reason"));
    ck_assert_ptr_nonnull(strstr(why, "architecture 'bert' is not supported"));
    ck_assert_str_eq(json_string_value(json_object_get(r, "architecture")), "bert");
    ck_assert_str_eq(json_string_value(json_object_get(r, "name")), "tiny-bert");
    json_t *md = json_object_get(r, "metadata");
    ck_assert_int_eq(json_integer_value(json_object_get(md, "bert.block_count")), 2);
    ck_assert(json_is_null(json_object_get(r, "tokenizer")));
    ck_assert_int_eq(json_integer_value(json_object_get(r, "tensor_count")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(r, "tensor_bytes")), 128 + 64);
    json_t *t1 = json_array_get(json_object_get(r, "tensors"), 1);
    ck_assert_str_eq(json_string_value(json_object_get(t1, "name")), "blk.0.attn_q.weight");
    ck_assert_str_eq(json_string_value(json_object_get(t1, "type")), "F16");
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(t1, "shape"), 0)), 8);
    json_decref(r);
    /* cut anywhere in its header or data: an error naming the file, nothing described */
    for (size_t cut = 4; cut < b.len; cut += 37) {
        ifd_buf_t part = {b.data, cut, cut};
        run_t e = inspect(put("cut.gguf", &part, path, sizeof path), false);
        ck_assert_msg(e.rc != 0, "a GGUF cut at %zu was described", cut);
        ck_assert_msg(strstr(e.err, "error: ") && strstr(e.err, "cut.gguf"), "%s", e.err);
        ck_assert_uint_eq(e.out_len, 0);
        run_free(&e);
    }
    ifd_buf_free(&b);
}
END_TEST

START_TEST(test_vocab_only)
{
    ifd_buf_t b = IFD_BUF_INIT;
    char path[128];
    const char *const extra[] = {"<|endoftext|>"};
    const int types[] = {3};
    gb_bpe_vocab(&b, "gpt-2", extra, types, 1, NULL, 0);
    json_t *r = report(put("vocab.gguf", &b, path, sizeof path), "\nservable:       no \u2014 ");
    const char *why = json_string_value(json_object_get(r, "not_servable_reason"));
    ck_assert_msg(!strncmp(why, "no weights: a vocabulary-only file", 34), "%s", why);
    ck_assert_int_eq(json_integer_value(json_object_get(r, "tensor_count")), 0);
    json_t *tok = json_object_get(r, "tokenizer");
    ck_assert_int_eq(json_integer_value(json_object_get(tok, "vocab_size")), 257);
    ck_assert_str_eq(json_string_value(json_object_get(tok, "model")), "gpt2");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(r, "metadata"),
                                                       "tokenizer.ggml.tokens")),
                     "[257 x str]");
    json_decref(r);
    ifd_buf_free(&b);
    /* llama.cpp's vocabulary files, when the test data is there */
    const char *data = ifd_test_data_dir();
    static const char *const files[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"};
    for (size_t i = 0; data && i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/vocab/%s", data, files[i]);
        if (access(path, R_OK))
            continue;
        r = report(path, "\nservable:       no \u2014 no weights: a vocabulary-only file");
        ck_assert_int_gt(json_integer_value(json_object_get(json_object_get(r, "tokenizer"),
                                                            "vocab_size")),
                         1000);
        json_decref(r);
    }
}
END_TEST

START_TEST(test_hf_directories)
{
    char dir[128], cfg[160];
    ifd_buf_t b = IFD_BUF_INIT;
    put("hf", NULL, dir, sizeof dir);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    ifd_buf_puts(&b, "{\"architectures\": [\"BertModel\"], \"model_type\": \"bert\", "
                     "\"num_hidden_layers\": 2, \"torch_dtype\": \"float32\", \"x\": {}}");
    FILE *f = fopen(cfg, "w");
    fwrite(b.data, 1, b.len, f);
    fclose(f);
    for (int via_config = 0; via_config < 2; via_config++) { /* the directory, or its config */
        json_t *r = report(via_config ? cfg : dir, "\nservable:       no \u2014 ");
        ck_assert_str_eq(json_string_value(json_object_get(r, "format")), "hf");
        ck_assert_str_eq(json_string_value(json_object_get(r, "architecture")), "bert");
        ck_assert_str_eq(json_string_value(json_object_get(r, "hf_architecture")), "BertModel");
        ck_assert_str_eq(json_string_value(json_object_get(r, "dtype")), "float32");
        json_t *c = json_object_get(r, "config");
        ck_assert_int_eq(json_integer_value(json_object_get(c, "num_hidden_layers")), 2);
        ck_assert_ptr_null(json_object_get(c, "x")); /* scalars only */
        ck_assert_int_eq(json_integer_value(json_object_get(r, "tensor_count")), 0);
        json_decref(r);
    }
    /* an unparsable config.json, a missing path: errors */
    f = fopen(cfg, "w");
    fputs("{not json", f);
    fclose(f);
    run_t e = inspect(dir, false);
    ck_assert(e.rc != 0 && strstr(e.err, "error: ") && e.out_len == 0);
    run_free(&e);
    e = inspect("/nonexistent/model.gguf", true);
    ck_assert(e.rc != 0 && strstr(e.err, "/nonexistent/model.gguf") && e.out_len == 0);
    run_free(&e);
    unlink(cfg);
    rmdir(dir);
    ifd_buf_free(&b);
}
END_TEST

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/inferd-inspect-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    Suite *s = suite_create("inspect");
    ifd_test_case(s, "unservable", 60,
                  IFD_TESTS(test_other_architecture, test_vocab_only, test_hf_directories));
    int rc = ifd_test_run(s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    return rc;
}
