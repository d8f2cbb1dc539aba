/*
 * test_tokenizer.c — the tokenizer against llama.cpp's reference vectors
 * (ggml-vocab-gpt-2 and ggml-vocab-llama-spm in the shared test data: every
 * case must match exactly), round trips (the vector inputs and random valid
 * UTF-8, fixed seed), special-token handling (user text never yields control
 * tokens), the streaming detokenizer, the Hugging Face loader (tokenizer.json
 * files written from the same vocabularies must give the same ids), and load
 * errors on synthetic GGUF images.
 */
#include "testutil.h"

#include "error.h"
#include "gguf_builder.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEP "\n__ggml_vocab_test__\n"

static ifd_tokenizer_t *load_vocab(const char *name)
{
    char rel[128], path[1024], err[512] = "";
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", name);
    if (!ifd_test_data_file(rel, path, sizeof path))
        ifd_test_skip("no %s in the test data dir ($INFERD_TESTDATA_DIR)", rel);
    ifd_tokenizer_t *t = NULL;
    int rc = ifd_tokenizer_create_gguf_file(&t, path, err, sizeof err);
    ck_assert_msg(rc == 0, "load %s: %s (%s)", path, ifd_strerror(rc), err);
    return t;
}

static char *read_data(const char *rel, size_t *len)
{
    char path[1024];
    if (!ifd_test_data_file(rel, path, sizeof path))
        ifd_test_skip("no %s in the test data dir", rel);
    char *s = ifd_test_read_file(path, len);
    ck_assert_ptr_nonnull(s);
    return s;
}

/* Splits a .inp file into cases (pointers into buf, which is modified). */
static size_t split_cases(char *buf, size_t len, char **cases, size_t *lens, size_t max)
{
    size_t n = 0, pos = 0, sl = strlen(SEP);
    while (pos < len && n < max) {
        char *e = memmem(buf + pos, len - pos, SEP, sl);
        if (!e)
            break;
        cases[n] = buf + pos;
        lens[n] = (size_t)(e - (buf + pos));
        n++;
        pos = (size_t)(e - buf) + sl;
    }
    return n;
}

static void check_vectors(ifd_tokenizer_t *t, const char *name)
{
    char rel[128];
    size_t inp_len, out_len;
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.inp", name);
    char *inp = read_data(rel, &inp_len);
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.out", name);
    char *exp = read_data(rel, &out_len);
    char *got = NULL;
    size_t got_len = 0;
    FILE *f = open_memstream(&got, &got_len);
    ck_assert_int_eq(ifd_tokenizer_run_vocab_test(t, inp, inp_len, f), 0);
    fclose(f);
    /* line by line, for a readable failure */
    char *ge = got, *ee = exp;
    int line = 1, bad = 0;
    while (*ge || *ee) {
        size_t gl = strcspn(ge, "\n"), el = strcspn(ee, "\n");
        if (gl != el || memcmp(ge, ee, gl) != 0) {
            fprintf(stderr, "%s case %d:\n  got      %.*s\n  expected %.*s\n", name, line, (int)gl,
                    ge, (int)el, ee);
            bad++;
        }
        ge += gl + (ge[gl] == '\n');
        ee += el + (ee[el] == '\n');
        line++;
    }
    ck_assert_msg(bad == 0, "%s: %d of %d cases differ", name, bad, line - 1);
    ck_assert_int_eq(line - 1, 46);
    free(got);
    free(inp);
    free(exp);
}

static void roundtrip_vector_inputs(ifd_tokenizer_t *t, const char *name)
{
    char rel[128];
    size_t len;
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.inp", name);
    char *inp = read_data(rel, &len);
    char *cases[64];
    size_t lens[64];
    size_t n = split_cases(inp, len, cases, lens, 64);
    ck_assert_int_eq((int)n, 46);
    for (size_t i = 0; i < n; i++)
        ifd_test_roundtrip(t, cases[i], lens[i], true);
    free(inp);
}

START_TEST(test_gpt2_vectors)
{
    ifd_tokenizer_t *t = load_vocab("gpt-2");
    ck_assert_int_eq(ifd_tokenizer_model(t), IFD_TOKMODEL_BPE);
    ck_assert_str_eq(ifd_tokenizer_pre(t), "gpt-2");
    check_vectors(t, "gpt-2");
    roundtrip_vector_inputs(t, "gpt-2");
    ifd_tokenizer_destroy(t);
}
END_TEST

START_TEST(test_spm_vectors)
{
    ifd_tokenizer_t *t = load_vocab("llama-spm");
    ck_assert_int_eq(ifd_tokenizer_model(t), IFD_TOKMODEL_SPM);
    ck_assert_int_eq(ifd_tokenizer_bos(t), 1);
    ck_assert_int_eq(ifd_tokenizer_eos(t), 2);
    check_vectors(t, "llama-spm");
    roundtrip_vector_inputs(t, "llama-spm");
    /* BOS is added with IFD_TOK_ADD_SPECIAL */
    ifd_tokens_t ids = {0};
    ck_assert_int_eq(ifd_tokenizer_encode(t, "Hello world", 11, IFD_TOK_ADD_SPECIAL, &ids), 0);
    ck_assert_int_eq((int)ids.n, 3);
    ck_assert_int_eq(ids.ids[0], 1);
    ck_assert_int_eq(ids.ids[1], 15043);
    ck_assert_int_eq(ids.ids[2], 3186);
    ifd_tokens_free(&ids);
    ifd_tokenizer_destroy(t);
}
END_TEST

/* Random valid UTF-8 from ranges that stress the pre-tokenizers. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t random_utf8(uint64_t *rng, char *out, size_t max_cps)
{
    static const uint32_t ranges[][2] = {
        {0x20, 0x7E},       {0x09, 0x0D},        {0x30, 0x39},     {0xA0, 0xFF},
        {0x100, 0x17F},     {0x300, 0x36F},      {0x400, 0x4FF},   {0x590, 0x6FF},
        {0x900, 0x97F},     {0xE00, 0xE7F},      {0x2000, 0x206F}, {0x3000, 0x303F},
        {0x3040, 0x30FF},   {0x4E00, 0x9FFF},    {0xAC00, 0xD7A3}, {0xFF00, 0xFFEF},
        {0x1F300, 0x1FAFF}, {0x10000, 0x10FFFF},
    };
    size_t n = rng_next(rng) % (max_cps + 1), o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t r = rng_next(rng) % (sizeof ranges / sizeof ranges[0] + 4);
        if (r >= sizeof ranges / sizeof ranges[0])
            r = 0; /* extra weight on ASCII */
        uint32_t cp = ranges[r][0] + (uint32_t)(rng_next(rng) % (ranges[r][1] - ranges[r][0] + 1));
        if (cp >= 0xD800 && cp <= 0xDFFF)
            cp = 'x';
        if (cp < 0x80) {
            out[o++] = (char)cp;
        } else if (cp < 0x800) {
            out[o++] = (char)(0xC0 | (cp >> 6));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out[o++] = (char)(0xE0 | (cp >> 12));
            out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        } else {
            out[o++] = (char)(0xF0 | (cp >> 18));
            out[o++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return o;
}

static void fuzz_roundtrip(ifd_tokenizer_t *t, uint64_t seed, int iters)
{
    uint64_t rng = seed;
    char buf[64 * 4 + 1];
    for (int i = 0; i < iters; i++) {
        size_t n = random_utf8(&rng, buf, 64);
        ifd_test_roundtrip(t, buf, n, true);
    }
}

START_TEST(test_fuzz_roundtrip)
{
    ifd_tokenizer_t *g = load_vocab("gpt-2");
    fuzz_roundtrip(g, 0x9E3779B97F4A7C15ull, 1500);
    ifd_tokenizer_destroy(g);
    ifd_tokenizer_t *s = load_vocab("llama-spm");
    fuzz_roundtrip(s, 0xD1B54A32D192ED03ull, 1500);
    ifd_tokenizer_destroy(s);
}
END_TEST

START_TEST(test_invalid_utf8_roundtrip)
{
    static const char bad[] = "ok \xff\xfe tail \xe2\x82 x \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80";
    size_t n = sizeof bad - 1;
    const char *names[] = {"gpt-2", "llama-spm"};
    for (int k = 0; k < 2; k++) {
        ifd_tokenizer_t *t = load_vocab(names[k]);
        ifd_tokens_t ids = {0};
        ck_assert_int_eq(ifd_tokenizer_encode(t, bad, n, 0, &ids), 0);
        char *out;
        size_t len;
        ck_assert_int_eq(ifd_tokenizer_decode(t, ids.ids, ids.n, 0, &out, &len), 0);
        ck_assert_msg(len == n && memcmp(out, bad, n) == 0, "%s: invalid bytes not kept", names[k]);
        /* the stream replaces them and stays valid UTF-8 */
        ifd_detok_t *d;
        ck_assert_int_eq(ifd_detok_create(&d, t, 0), 0);
        size_t fffd = 0;
        for (size_t i = 0; i < ids.n; i++) {
            const char *p;
            size_t l;
            ck_assert_int_eq(ifd_detok_push(d, ids.ids[i], &p, &l), 0);
            for (size_t j = 0; j + 3 <= l; j++)
                if (memcmp(p + j, "\xEF\xBF\xBD", 3) == 0)
                    fffd++;
            ck_assert_ptr_null(memchr(p, 0xFF, l));
        }
        ck_assert_uint_gt(fffd, 0);
        ifd_detok_destroy(d);
        free(out);
        ifd_tokens_free(&ids);
        ifd_tokenizer_destroy(t);
    }
}
END_TEST

START_TEST(test_special_tokens_gpt2)
{
    ifd_tokenizer_t *t = load_vocab("gpt-2");
    static const char s[] = "a<|endoftext|>b";
    ifd_tokens_t ids = {0};
    ck_assert_int_eq(ifd_tokenizer_encode(t, s, sizeof s - 1, 0, &ids), 0);
    for (size_t i = 0; i < ids.n; i++)
        ck_assert_int_ne(ids.ids[i], 50256); /* user text: never the control token */
    ck_assert_uint_gt(ids.n, 3);
    ids.n = 0;
    ck_assert_int_eq(ifd_tokenizer_encode(t, s, sizeof s - 1, IFD_TOK_PARSE_SPECIAL, &ids), 0);
    ck_assert_int_eq((int)ids.n, 3);
    ck_assert_int_eq(ids.ids[1], 50256);
    /* plain spans: the same text inside a span stays text */
    ifd_span_t plain = {1, 13};
    ids.n = 0;
    ck_assert_int_eq(
        ifd_tokenizer_encode_spans(t, s, sizeof s - 1, IFD_TOK_PARSE_SPECIAL, &plain, 1, &ids), 0);
    for (size_t i = 0; i < ids.n; i++)
        ck_assert_int_ne(ids.ids[i], 50256);
    /* a span that covers only part of the token text also blocks it */
    plain = (ifd_span_t){5, 1};
    ids.n = 0;
    ck_assert_int_eq(
        ifd_tokenizer_encode_spans(t, s, sizeof s - 1, IFD_TOK_PARSE_SPECIAL, &plain, 1, &ids), 0);
    for (size_t i = 0; i < ids.n; i++)
        ck_assert_int_ne(ids.ids[i], 50256);
    /* eog set and decoding of control tokens */
    ck_assert(ifd_tokenizer_is_eog(t, 50256));
    char buf[32];
    ck_assert_int_eq(ifd_tokenizer_token_bytes(t, 50256, 0, buf, sizeof buf), 0);
    ck_assert_int_eq(ifd_tokenizer_token_bytes(t, 50256, IFD_DETOK_RENDER_SPECIAL, buf, sizeof buf),
                     13);
    ck_assert_int_eq(memcmp(buf, "<|endoftext|>", 13), 0);
    ck_assert_int_eq(ifd_tokenizer_token_bytes(t, 50257, 0, buf, sizeof buf), IFD_ERANGE);
    ifd_tokens_free(&ids);
    ifd_tokenizer_destroy(t);
}
END_TEST

START_TEST(test_detok_stream_spm)
{
    ifd_tokenizer_t *t = load_vocab("llama-spm");
    /* "🦙" has no token: four <0xNN> byte tokens; nothing comes out until the last */
    ifd_tokens_t ids = {0};
    ck_assert_int_eq(ifd_tokenizer_encode(t, "\xF0\x9F\xA6\x99", 4, 0, &ids), 0);
    ck_assert_int_eq((int)ids.n, 5); /* ▁ + 4 byte tokens */
    ck_assert_int_eq(ids.ids[0], 29871);
    ck_assert_int_eq(ids.ids[1], 243);
    ifd_detok_t *d;
    ck_assert_int_eq(ifd_detok_create(&d, t, 0), 0);
    const char *p;
    size_t l;
    ck_assert_int_eq(ifd_detok_push(d, ids.ids[0], &p, &l), 0);
    ck_assert_int_eq((int)l, 0); /* the prefix space is dropped at the start */
    for (int i = 1; i < 4; i++) {
        ck_assert_int_eq(ifd_detok_push(d, ids.ids[i], &p, &l), 0);
        ck_assert_int_eq((int)l, 0);
    }
    ck_assert_int_eq(ifd_detok_push(d, ids.ids[4], &p, &l), 0);
    ck_assert_int_eq((int)l, 4);
    ck_assert_int_eq(memcmp(p, "\xF0\x9F\xA6\x99", 4), 0);
    /* leading-space rule only at the start: "▁Hello" "▁world" */
    ifd_detok_reset(d);
    ck_assert_int_eq(ifd_detok_push(d, 1, &p, &l), 0); /* BOS: nothing */
    ck_assert_int_eq((int)l, 0);
    ck_assert_int_eq(ifd_detok_push(d, 15043, &p, &l), 0);
    ck_assert_int_eq((int)l, 5);
    ck_assert_int_eq(memcmp(p, "Hello", 5), 0);
    ck_assert_int_eq(ifd_detok_push(d, 3186, &p, &l), 0);
    ck_assert_int_eq((int)l, 6);
    ck_assert_int_eq(memcmp(p, " world", 6), 0);
    /* an unfinished sequence at the end becomes U+FFFD */
    ck_assert_int_eq(ifd_detok_push(d, 243, &p, &l), 0);
    ck_assert_int_eq((int)l, 0);
    ck_assert_int_eq(ifd_detok_flush(d, &p, &l), 0);
    ck_assert_int_eq((int)l, 3);
    ck_assert_int_eq(memcmp(p, "\xEF\xBF\xBD", 3), 0);
    ck_assert_int_eq(ifd_detok_push(d, -1, &p, &l), IFD_ERANGE);
    ck_assert_int_eq(ifd_detok_push(d, 32000, &p, &l), IFD_ERANGE);
    ifd_detok_destroy(d);
    ifd_tokens_free(&ids);
    ifd_tokenizer_destroy(t);
}
END_TEST

START_TEST(test_detok_split_bpe)
{
    /* byte-level tokens that split a character: "🦙" is 12520 99 247 in GPT-2 */
    ifd_tokenizer_t *t = load_vocab("gpt-2");
    ifd_detok_t *d;
    ck_assert_int_eq(ifd_detok_create(&d, t, 0), 0);
    const char *p;
    size_t l;
    ck_assert_int_eq(ifd_detok_push(d, 428, &p, &l), 0); /* " this" */
    ck_assert_int_eq((int)l, 5);
    ck_assert_int_eq(memcmp(p, " this", 5), 0); /* no space stripping for BPE */
    ck_assert_int_eq(ifd_detok_push(d, 12520, &p, &l), 0);
    ck_assert_int_eq((int)l, 1); /* " " then an unfinished F0 9F */
    ck_assert_int_eq(ifd_detok_push(d, 99, &p, &l), 0);
    ck_assert_int_eq((int)l, 0);
    ck_assert_int_eq(ifd_detok_push(d, 247, &p, &l), 0);
    ck_assert_int_eq((int)l, 4);
    ck_assert_int_eq(memcmp(p, "\xF0\x9F\xA6\x99", 4), 0);
    ifd_detok_destroy(d);
    ifd_tokenizer_destroy(t);
}
END_TEST

/* ---- Hugging Face tokenizer.json written from the GGUF vocabularies --------------- */

static char *tmpdir_make(void)
{
    char *d = strdup("/tmp/ifd_tok_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d));
    return d;
}

static void tmpdir_rm(char *d)
{
    char p[512];
    snprintf(p, sizeof p, "%s/tokenizer.json", d);
    unlink(p);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", d);
    unlink(p);
    rmdir(d);
    free(d);
}

/* Writes root as tokenizer.json and cfg as tokenizer_config.json into a new
 * temporary directory (tmpdir_rm removes it); takes both references. */
static char *hf_dir_write(json_t *root, json_t *cfg)
{
    char *dir = tmpdir_make();
    char file[512];
    snprintf(file, sizeof file, "%s/tokenizer.json", dir);
    ck_assert_int_eq(json_dump_file(root, file, JSON_COMPACT), 0);
    snprintf(file, sizeof file, "%s/tokenizer_config.json", dir);
    ck_assert_int_eq(json_dump_file(cfg, file, JSON_COMPACT), 0);
    json_decref(root);
    json_decref(cfg);
    return dir;
}

/* The test data's vocab/ggml-vocab-<name>.gguf (skips without it) into *g,
 * and its tokenizer, the reference for the tokenizer.json built from it. */
static ifd_tokenizer_t *open_vocab_gguf(const char *name, ifd_gguf_t **g)
{
    char rel[128], path[1024];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", name);
    if (!ifd_test_data_file(rel, path, sizeof path))
        ifd_test_skip("no %s vocab in the test data", name);
    ck_assert_int_eq(ifd_gguf_open(g, path, NULL, 0), 0);
    ifd_tokenizer_t *ref;
    ck_assert_int_eq(ifd_tokenizer_create_gguf(&ref, *g, NULL, 0), 0);
    return ref;
}

static json_t *hf_vocab(const ifd_tokenizer_t *t, bool skip_special)
{
    json_t *v = json_object();
    for (int32_t i = 0; i < ifd_tokenizer_n_vocab(t); i++) {
        size_t n;
        const char *s = ifd_tokenizer_token_text(t, i, &n);
        if (skip_special && ifd_tokenizer_token_type(t, i) == IFD_TOKTYPE_CONTROL)
            continue;
        json_object_setn_new(v, s, n, json_integer(i));
    }
    return v;
}

static json_t *hf_added(const ifd_tokenizer_t *t)
{
    json_t *a = json_array();
    for (int32_t i = 0; i < ifd_tokenizer_n_vocab(t); i++) {
        ifd_toktype_t ty = ifd_tokenizer_token_type(t, i);
        if (ty != IFD_TOKTYPE_CONTROL && ty != IFD_TOKTYPE_UNKNOWN)
            continue;
        size_t n;
        const char *s = ifd_tokenizer_token_text(t, i, &n);
        json_array_append_new(a, json_pack("{s:i, s:s%, s:b, s:b, s:b, s:b, s:b}", "id", i,
                                           "content", s, n, "single_word", 0, "lstrip", 0, "rstrip",
                                           0, "normalized", 0, "special", 1));
    }
    return a;
}

START_TEST(test_hf_bytelevel)
{
    /* gpt-2 as a tokenizer.json (merges from the GGUF, new-style [a, b] pairs) */
    ifd_gguf_t *g;
    ifd_tokenizer_t *ref = open_vocab_gguf("gpt-2", &g);
    const ifd_gguf_value_t *m;
    ck_assert_int_eq(ifd_gguf_get_arr(g, "tokenizer.ggml.merges", &m), 0);
    json_t *merges = json_array();
    for (uint64_t i = 0; i < m->v.arr.count; i++) {
        ifd_str_t s;
        ck_assert_int_eq(ifd_gguf_arr_str(g, m, i, &s), 0);
        const char *sp = memchr(s.ptr + 1, ' ', s.len - 1);
        json_array_append_new(merges, json_pack("[s%, s%]", s.ptr, (size_t)(sp - s.ptr), sp + 1,
                                                s.len - (size_t)(sp - s.ptr) - 1));
    }
    json_t *root = json_pack(
        "{s:s, s:o, s:n, s:{s:s, s:b, s:b, s:b}, s:{s:s}, s:{s:s, s:o, s:o}}", "version", "1.0",
        "added_tokens", hf_added(ref), "normalizer", "pre_tokenizer", "type", "ByteLevel",
        "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1, "decoder", "type", "ByteLevel",
        "model", "type", "BPE", "vocab", hf_vocab(ref, false), "merges", merges);
    json_t *cfg = json_pack("{s:s, s:s, s:b, s:s}", "bos_token", "<|endoftext|>", "eos_token",
                            "<|endoftext|>", "add_bos_token", 0, "chat_template", "{{ x }}");
    char *dir = hf_dir_write(root, cfg);
    ifd_tokenizer_t *t;
    char err[512] = "";
    int rc = ifd_tokenizer_create_path(&t, dir, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(ifd_tokenizer_model(t), IFD_TOKMODEL_BPE);
    ck_assert_int_eq(ifd_tokenizer_bos(t), 50256);
    ck_assert_str_eq(ifd_tokenizer_chat_template(t), "{{ x }}");
    check_vectors(t, "gpt-2");
    roundtrip_vector_inputs(t, "gpt-2");
    ifd_tokenizer_destroy(t);
    tmpdir_rm(dir);
    ifd_tokenizer_destroy(ref);
    ifd_gguf_close(g);
}
END_TEST

/* transformers writes an unset model_max_length as 1e30 in an integer (Gemma 3's
 * tokenizer_config.json has it): the file still gives the specials and the template. */
START_TEST(test_hf_config_huge_int)
{
    json_t *root = json_pack(
        "{s:[{s:i, s:s, s:b}, {s:i, s:s, s:b}], s:{s:s, s:{s:i, s:i, s:i}, s:[]}}", "added_tokens",
        "id", 1, "content", "<eos>", "special", 1, "id", 2, "content", "<bos>", "special", 1,
        "model", "type", "BPE", "vocab", "<eos>", 1, "<bos>", 2, "a", 0, "merges");
    char *dir = hf_dir_write(root, json_object());
    char file[512];
    snprintf(file, sizeof file, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fputs(
        "{\"bos_token\": \"<bos>\", \"eos_token\": \"<eos>\", \"add_bos_token\": false,\n"
        " \"model_max_length\": 1000000000000000019884624838656, \"chat_template\": \"{{ x }}\"}\n",
        f);
    fclose(f);
    ifd_tokenizer_t *t;
    char err[512] = "";
    ck_assert_msg(ifd_tokenizer_create_path(&t, dir, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ifd_tokenizer_eos(t), 1);
    ck_assert_int_eq(ifd_tokenizer_bos(t), 2);
    ck_assert(!ifd_tokenizer_add_bos(t));
    ck_assert_str_eq(ifd_tokenizer_chat_template(t), "{{ x }}");
    ifd_tokenizer_destroy(t);
    tmpdir_rm(dir);
}
END_TEST

/* UTF-8 code point boundaries of s[0..n) (for splitting pieces by chars). */
static size_t cp_bounds(const char *s, size_t n, size_t *b)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            b[k++] = i;
    b[k++] = n;
    return k;
}

typedef struct {
    int32_t merged, left, right;
    float score;
} spm_merge_t;

static int cmp_merge(const void *a, const void *b)
{
    const spm_merge_t *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1; /* by score of the result, descending */
    if (x->merged != y->merged)
        return x->merged < y->merged ? -1 : 1;
    if (x->left != y->left)
        return x->left < y->left ? -1 : 1;
    return (x->right > y->right) - (x->right < y->right);
}

START_TEST(test_hf_spm)
{
    /* llama-spm as a Llama-2 style tokenizer.json: merges derived from the
     * piece scores the way HF's converter does (every split of a piece into
     * two pieces, ordered by the piece's score). */
    ifd_gguf_t *g;
    ifd_tokenizer_t *ref = open_vocab_gguf("llama-spm", &g);
    const ifd_gguf_value_t *sc;
    ck_assert_int_eq(ifd_gguf_get_arr(g, "tokenizer.ggml.scores", &sc), 0);
    size_t cap = 1 << 16, nm = 0;
    spm_merge_t *mg = malloc(cap * sizeof *mg);
    for (int32_t i = 0; i < ifd_tokenizer_n_vocab(ref); i++) {
        if (ifd_tokenizer_token_type(ref, i) != IFD_TOKTYPE_NORMAL)
            continue;
        size_t n;
        const char *s = ifd_tokenizer_token_text(ref, i, &n);
        ifd_gguf_value_t v;
        ck_assert_int_eq(ifd_gguf_arr_get(g, sc, (uint64_t)i, &v), 0);
        size_t b[256];
        size_t nb = cp_bounds(s, n, b);
        for (size_t k = 1; k + 1 < nb; k++) {
            ifd_token_t l = ifd_tokenizer_find(ref, s, b[k]);
            ifd_token_t r = ifd_tokenizer_find(ref, s + b[k], n - b[k]);
            if (l < 0 || r < 0)
                continue;
            if (nm == cap)
                mg = realloc(mg, (cap *= 2) * sizeof *mg);
            mg[nm++] = (spm_merge_t){i, l, r, (float)v.v.f};
        }
    }
    qsort(mg, nm, sizeof *mg, cmp_merge);
    json_t *merges = json_array();
    for (size_t i = 0; i < nm; i++) {
        size_t ln, rn;
        const char *ls = ifd_tokenizer_token_text(ref, mg[i].left, &ln);
        const char *rs = ifd_tokenizer_token_text(ref, mg[i].right, &rn);
        json_array_append_new(merges, json_pack("[s%, s%]", ls, ln, rs, rn));
    }
    free(mg);
    json_t *normalizer =
        json_pack("{s:s, s:[{s:s, s:s}, {s:s, s:{s:s}, s:s}]}", "type", "Sequence", "normalizers",
                  "type", "Prepend", "prepend", "\xE2\x96\x81", "type", "Replace", "pattern",
                  "String", " ", "content", "\xE2\x96\x81");
    json_t *model =
        json_pack("{s:s, s:s, s:b, s:b, s:o, s:o}", "type", "BPE", "unk_token", "<unk>", "fuse_unk",
                  1, "byte_fallback", 1, "vocab", hf_vocab(ref, false), "merges", merges);
    json_t *root = json_pack("{s:o, s:o, s:n, s:o}", "added_tokens", hf_added(ref), "normalizer",
                             normalizer, "pre_tokenizer", "model", model);
    json_t *cfg =
        json_pack("{s:s, s:s, s:b}", "bos_token", "<s>", "eos_token", "</s>", "add_bos_token", 1);
    char *dir = hf_dir_write(root, cfg);
    ifd_tokenizer_t *t;
    char err[512] = "", file[512];
    snprintf(file, sizeof file, "%s/tokenizer.json", dir);
    int rc = ifd_tokenizer_create_path(&t, file, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(ifd_tokenizer_model(t), IFD_TOKMODEL_SPM);
    ck_assert_int_eq(ifd_tokenizer_bos(t), 1);
    ck_assert(ifd_tokenizer_add_bos(t));
    check_vectors(t, "llama-spm");
    roundtrip_vector_inputs(t, "llama-spm");
    ifd_tokenizer_destroy(t);
    tmpdir_rm(dir);
    ifd_tokenizer_destroy(ref);
    ifd_gguf_close(g);
}
END_TEST

/* ---- synthetic vocabularies ------------------------------------------------------------ */

static ifd_tokenizer_t *open_synthetic(ifd_buf_t *b, char *err, size_t errlen, int *rc_out)
{
    ifd_gguf_t *g;
    ck_assert_int_eq(ifd_gguf_open_mem(&g, b->data, b->len, "synthetic", err, errlen), 0);
    ifd_tokenizer_t *t = NULL;
    *rc_out = ifd_tokenizer_create_gguf(&t, g, err, errlen);
    ifd_gguf_close(g);
    return t;
}

START_TEST(test_unknown_pre_type)
{
    ifd_buf_t b = IFD_BUF_INIT;
    gb_bpe_vocab(&b, "no-such-pre", NULL, NULL, 0, NULL, 0);
    char err[512] = "";
    int rc;
    ifd_tokenizer_t *t = open_synthetic(&b, err, sizeof err, &rc);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(rc, IFD_ENOTSUP);
    ck_assert_msg(strstr(err, "no-such-pre") != NULL, "message does not name it: %s", err);
    ifd_buf_free(&b);
    /* no tokenizer at all */
    ifd_buf_t e = IFD_BUF_INIT;
    gb_header(&e, 3, 0, 1);
    gb_kv_str(&e, "general.architecture", "llama");
    t = open_synthetic(&e, err, sizeof err, &rc);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(rc, IFD_ENOTFOUND);
    ifd_buf_free(&e);
}
END_TEST

START_TEST(test_merge_order_and_user_defined)
{
    /* merges: rank 0 "b c", rank 1 "a b": "abc" → "a" + "bc" (lowest rank
     * first), "abab" → "ab" "ab" (ties: leftmost); user-defined "<x>" is cut
     * out of text always, control "<c>" only with special parsing. */
    static const char *const extra[] = {"bc", "ab", "<x>", "<c>", "abab"};
    static const int types[] = {1, 1, 4, 3, 1};
    static const char *const merges[] = {"b c", "a b", "ab ab"};
    ifd_buf_t b = IFD_BUF_INIT;
    gb_bpe_vocab(&b, "gpt-2", extra, types, 5, merges, 3);
    char err[512] = "";
    int rc;
    ifd_tokenizer_t *t = open_synthetic(&b, err, sizeof err, &rc);
    ck_assert_msg(rc == 0, "%s", err);
    ifd_tokens_t ids = {0};
    ck_assert_int_eq(ifd_tokenizer_encode(t, "abc", 3, 0, &ids), 0);
    ck_assert_int_eq((int)ids.n, 2);
    ck_assert_int_eq(ids.ids[0], 'a');
    ck_assert_int_eq(ids.ids[1], 256);
    ids.n = 0;
    ck_assert_int_eq(ifd_tokenizer_encode(t, "ababa", 5, 0, &ids), 0);
    ck_assert_int_eq((int)ids.n, 2);
    ck_assert_int_eq(ids.ids[0], 260); /* abab */
    ck_assert_int_eq(ids.ids[1], 'a');
    ids.n = 0;
    ck_assert_int_eq(ifd_tokenizer_encode(t, "a<x>b<c>", 8, 0, &ids), 0);
    ck_assert_int_eq(ids.ids[0], 'a');
    ck_assert_int_eq(ids.ids[1], 258); /* <x>: user-defined, always */
    for (size_t i = 0; i < ids.n; i++)
        ck_assert_int_ne(ids.ids[i], 259);
    ids.n = 0;
    ck_assert_int_eq(ifd_tokenizer_encode(t, "a<x>b<c>", 8, IFD_TOK_PARSE_SPECIAL, &ids), 0);
    ck_assert_int_eq((int)ids.n, 4);
    ck_assert_int_eq(ids.ids[3], 259);
    /* decoding: user-defined verbatim, control hidden unless rendered */
    char *out;
    size_t n;
    ck_assert_int_eq(ifd_tokenizer_decode(t, ids.ids, ids.n, 0, &out, &n), 0);
    ck_assert_str_eq(out, "a<x>b");
    free(out);
    ck_assert_int_eq(ifd_tokenizer_decode(t, ids.ids, ids.n, IFD_DETOK_RENDER_SPECIAL, &out, &n),
                     0);
    ck_assert_str_eq(out, "a<x>b<c>");
    free(out);
    ifd_tokens_free(&ids);
    ifd_tokenizer_destroy(t);
    ifd_buf_free(&b);
}
END_TEST

/* One tokenizer shared by threads encoding at once (the daemon's use). */
typedef struct {
    const ifd_tokenizer_t *t;
    uint64_t seed;
    int bad;
} thr_arg_t;

static void *thr_encode(void *p)
{
    thr_arg_t *a = p;
    uint64_t rng = a->seed;
    char buf[64 * 4 + 1];
    ifd_tokens_t ids = {0};
    for (int i = 0; i < 300; i++) {
        size_t n = random_utf8(&rng, buf, 64);
        ids.n = 0;
        if (ifd_tokenizer_encode(a->t, buf, n, IFD_TOK_PARSE_SPECIAL, &ids) != 0) {
            a->bad++;
            continue;
        }
        char *out;
        size_t len;
        if (ifd_tokenizer_decode(a->t, ids.ids, ids.n, 0, &out, &len) != 0 || len != n ||
            memcmp(out, buf, n) != 0)
            a->bad++;
        else
            free(out);
    }
    ifd_tokens_free(&ids);
    return NULL;
}

START_TEST(test_threads)
{
    const char *names[] = {"gpt-2", "llama-spm"};
    for (int k = 0; k < 2; k++) {
        ifd_tokenizer_t *t = load_vocab(names[k]);
        pthread_t th[4];
        thr_arg_t args[4];
        for (int i = 0; i < 4; i++) {
            args[i] = (thr_arg_t){t, 0x1234567ull * (uint64_t)(i + 1), 0};
            ck_assert_int_eq(pthread_create(&th[i], NULL, thr_encode, &args[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            ck_assert_int_eq(args[i].bad, 0);
        }
        ifd_tokenizer_destroy(t);
    }
}
END_TEST

static Suite *tokenizer_suite(void)
{
    Suite *s = suite_create("tokenizer");
    ifd_test_case(s, "core", 120,
                  IFD_TESTS(test_gpt2_vectors, test_spm_vectors, test_fuzz_roundtrip,
                            test_invalid_utf8_roundtrip, test_special_tokens_gpt2,
                            test_detok_stream_spm, test_detok_split_bpe, test_hf_bytelevel,
                            test_hf_config_huge_int, test_hf_spm, test_unknown_pre_type,
                            test_merge_order_and_user_defined, test_threads));
    return s;
}

int main(void)
{
    char p[1024];
    if (!ifd_test_data_file("vocab/ggml-vocab-gpt-2.gguf", p, sizeof p) ||
        !ifd_test_data_file("vocab/ggml-vocab-llama-spm.gguf", p, sizeof p))
        ifd_test_skip("the vocab test vectors (vocab/ggml-vocab-{gpt-2,llama-spm}.gguf) are not "
                      "in $INFERD_TESTDATA_DIR");
    return ifd_test_run(tokenizer_suite());
}
