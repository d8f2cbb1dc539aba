/*
 * test_gguf.c — the GGUF reader on synthetic images: every value type,
 * nested arrays, typed getters and their errors, tensors, alignment, and
 * hand-made malformed headers; plus the vocabulary files of the shared test
 * data when they are present.
 */
#include "testutil.h"

#include "error.h"
#include "gguf_builder.h"
#include "modelfile/gguf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* A file with one key of every type, a nested array and two tensors. */
static void build_full(ifd_buf_t *b, uint32_t version, uint32_t alignment)
{
    gb_header(b, version, 2, alignment ? 18 : 17);
    gb_key(b, "t.u8", IFD_GGUF_UINT8);
    gb_u8(b, 200);
    gb_key(b, "t.i8", IFD_GGUF_INT8);
    gb_u8(b, 0xfe); /* -2 */
    gb_key(b, "t.u16", IFD_GGUF_UINT16);
    gb_u8(b, 0x34), gb_u8(b, 0x12);
    gb_key(b, "t.i16", IFD_GGUF_INT16);
    gb_u8(b, 0x00), gb_u8(b, 0x80); /* -32768 */
    gb_kv_u32(b, "t.u32", 576);
    gb_key(b, "t.i32", IFD_GGUF_INT32);
    gb_u32(b, (uint32_t)-7);
    gb_key(b, "t.f32", IFD_GGUF_FLOAT32);
    float f = 1e-5f;
    uint32_t fb;
    memcpy(&fb, &f, 4);
    gb_u32(b, fb);
    gb_key(b, "t.bool", IFD_GGUF_BOOL);
    gb_u8(b, 1);
    gb_kv_str(b, "general.architecture", "llama");
    gb_key(b, "t.u64", IFD_GGUF_UINT64);
    gb_u64(b, 5000000000ull);
    gb_key(b, "t.i64", IFD_GGUF_INT64);
    gb_u64(b, (uint64_t)-5000000000ll);
    gb_key(b, "t.f64", IFD_GGUF_FLOAT64);
    double d = 0.25;
    uint64_t db;
    memcpy(&db, &d, 8);
    gb_u64(b, db);
    /* array of strings */
    gb_key(b, "t.strs", IFD_GGUF_ARRAY);
    gb_u32(b, IFD_GGUF_STRING);
    gb_u64(b, 3);
    gb_str(b, "a");
    gb_str(b, "");
    gb_str(b, "ccc");
    /* array of i32 */
    gb_key(b, "t.ints", IFD_GGUF_ARRAY);
    gb_u32(b, IFD_GGUF_INT32);
    gb_u64(b, 4);
    for (int i = 0; i < 4; i++)
        gb_u32(b, (uint32_t)(i * 10 - 5));
    /* nested: array of 2 arrays: [u16 x2], [string x1] */
    gb_key(b, "t.nested", IFD_GGUF_ARRAY);
    gb_u32(b, IFD_GGUF_ARRAY);
    gb_u64(b, 2);
    gb_u32(b, IFD_GGUF_UINT16);
    gb_u64(b, 2);
    gb_u8(b, 1), gb_u8(b, 0), gb_u8(b, 2), gb_u8(b, 0);
    gb_u32(b, IFD_GGUF_STRING);
    gb_u64(b, 1);
    gb_str(b, "deep");
    /* empty array of bools */
    gb_key(b, "t.empty", IFD_GGUF_ARRAY);
    gb_u32(b, IFD_GGUF_BOOL);
    gb_u64(b, 0);
    /* array of bools */
    gb_key(b, "t.bools", IFD_GGUF_ARRAY);
    gb_u32(b, IFD_GGUF_BOOL);
    gb_u64(b, 2);
    gb_u8(b, 0), gb_u8(b, 1);
    uint32_t align = alignment ? alignment : 32;
    if (alignment)
        gb_kv_u32(b, "general.alignment", alignment);
    /* tensors: F32 [4, 2] at 0, Q8_0 [64] after it */
    uint64_t ne_a[2] = {4, 2}, ne_b[1] = {64};
    gb_tensor_info(b, "a.weight", 2, ne_a, IFD_GGML_F32, 0);
    gb_tensor_info(b, "b.weight", 1, ne_b, IFD_GGML_Q8_0, align);
    gb_pad(b, align);
    for (int i = 0; i < 8; i++) {
        float v = (float)i;
        uint32_t vb;
        memcpy(&vb, &v, 4);
        gb_u32(b, vb);
    }
    gb_pad(b, align);
    for (int i = 0; i < 68; i++)
        gb_u8(b, (uint8_t)i);
}

static ifd_gguf_t *open_buf(const ifd_buf_t *b, int expect_rc, char *err, size_t errlen)
{
    ifd_gguf_t *g = NULL;
    int rc = ifd_gguf_open_mem(&g, b->data, b->len, "mem.gguf", err, errlen);
    ck_assert_msg(rc == expect_rc, "rc %s (%s), expected %s", ifd_err_name(rc), err,
                  ifd_err_name(expect_rc));
    return g;
}

START_TEST(test_every_value_type)
{
    ifd_buf_t b = IFD_BUF_INIT;
    build_full(&b, 3, 0);
    char err[512] = "";
    ifd_gguf_t *g = open_buf(&b, 0, err, sizeof err);
    ck_assert_uint_eq(ifd_gguf_version(g), 3);
    ck_assert_uint_eq(ifd_gguf_kv_count(g), 17);
    ck_assert_uint_eq(ifd_gguf_alignment(g), 32);

    uint32_t u32 = 0;
    uint64_t u64 = 0;
    int32_t i32 = 0;
    int64_t i64 = 0;
    float f = 0;
    double d = 0;
    bool bo = false;
    ck_assert_int_eq(ifd_gguf_get_u32(g, "t.u8", &u32), 0);
    ck_assert_uint_eq(u32, 200);
    ck_assert_int_eq(ifd_gguf_get_i32(g, "t.i8", &i32), 0);
    ck_assert_int_eq(i32, -2);
    ck_assert_int_eq(ifd_gguf_get_u32(g, "t.u16", &u32), 0);
    ck_assert_uint_eq(u32, 0x1234);
    ck_assert_int_eq(ifd_gguf_get_i32(g, "t.i16", &i32), 0);
    ck_assert_int_eq(i32, -32768);
    ck_assert_int_eq(ifd_gguf_get_u32(g, "t.u32", &u32), 0);
    ck_assert_uint_eq(u32, 576);
    ck_assert_int_eq(ifd_gguf_get_i64(g, "t.i32", &i64), 0);
    ck_assert_int_eq(i64, -7);
    ck_assert_int_eq(ifd_gguf_get_f32(g, "t.f32", &f), 0);
    ck_assert_float_eq(f, 1e-5f);
    ck_assert_int_eq(ifd_gguf_get_bool(g, "t.bool", &bo), 0);
    ck_assert(bo);
    ck_assert_int_eq(ifd_gguf_get_u64(g, "t.u64", &u64), 0);
    ck_assert_uint_eq(u64, 5000000000ull);
    ck_assert_int_eq(ifd_gguf_get_i64(g, "t.i64", &i64), 0);
    ck_assert_int_eq(i64, -5000000000ll);
    ck_assert_int_eq(ifd_gguf_get_f64(g, "t.f64", &d), 0);
    ck_assert_double_eq(d, 0.25);
    ifd_str_t s;
    ck_assert_int_eq(ifd_gguf_get_str(g, "general.architecture", &s), 0);
    ck_assert_uint_eq(s.len, 5);
    ck_assert(memcmp(s.ptr, "llama", 5) == 0);

    /* errors: missing key, wrong type, out of range; *out untouched */
    u32 = 123;
    ck_assert_int_eq(ifd_gguf_get_u32(g, "no.such.key", &u32), IFD_ENOTFOUND);
    ck_assert_int_eq(ifd_gguf_get_u32(g, "general.architecture", &u32), IFD_ETYPE);
    ck_assert_int_eq(ifd_gguf_get_u32(g, "t.u64", &u32), IFD_ERANGE);
    ck_assert_int_eq(ifd_gguf_get_u32(g, "t.i8", &u32), IFD_ERANGE);
    ck_assert_int_eq(ifd_gguf_get_i32(g, "t.i64", &i32), IFD_ERANGE);
    ck_assert_uint_eq(u32, 123);
    ck_assert_int_eq(ifd_gguf_get_str(g, "t.u32", &s), IFD_ETYPE);
    ck_assert_int_eq(ifd_gguf_get_bool(g, "t.u8", &bo), IFD_ETYPE);
    ck_assert_int_eq(ifd_gguf_get_f32(g, "t.u32", &f), IFD_ETYPE);

    /* arrays */
    const ifd_gguf_value_t *arr;
    ck_assert_int_eq(ifd_gguf_get_arr(g, "t.strs", &arr), 0);
    ck_assert_uint_eq(arr->v.arr.count, 3);
    ck_assert_int_eq(ifd_gguf_arr_str(g, arr, 2, &s), 0);
    ck_assert(s.len == 3 && memcmp(s.ptr, "ccc", 3) == 0);
    ck_assert_int_eq(ifd_gguf_arr_str(g, arr, 1, &s), 0);
    ck_assert_uint_eq(s.len, 0);
    ck_assert_int_eq(ifd_gguf_arr_str(g, arr, 3, &s), IFD_ERANGE);
    ifd_gguf_value_t e;
    ck_assert_int_eq(ifd_gguf_get_arr(g, "t.ints", &arr), 0);
    ck_assert_int_eq(ifd_gguf_arr_get(g, arr, 3, &e), 0);
    ck_assert_int_eq(e.type, IFD_GGUF_INT32);
    ck_assert_int_eq(e.v.i, 25);
    ck_assert_int_eq(ifd_gguf_arr_get(g, arr, 0, &e), 0);
    ck_assert_int_eq(e.v.i, -5);
    ck_assert_int_eq(ifd_gguf_arr_str(g, arr, 0, &s), IFD_ETYPE);
    ck_assert_int_eq(ifd_gguf_get_arr(g, "t.nested", &arr), 0);
    ck_assert_uint_eq(arr->v.arr.count, 2);
    ifd_gguf_value_t inner, leaf;
    ck_assert_int_eq(ifd_gguf_arr_get(g, arr, 0, &inner), 0);
    ck_assert_int_eq(inner.type, IFD_GGUF_ARRAY);
    ck_assert_int_eq(inner.v.arr.elem, IFD_GGUF_UINT16);
    ck_assert_int_eq(ifd_gguf_arr_get(g, &inner, 1, &leaf), 0);
    ck_assert_uint_eq(leaf.v.u, 2);
    ck_assert_int_eq(ifd_gguf_arr_get(g, arr, 1, &inner), 0);
    ck_assert_int_eq(ifd_gguf_arr_str(g, &inner, 0, &s), 0);
    ck_assert(s.len == 4 && memcmp(s.ptr, "deep", 4) == 0);
    ck_assert_int_eq(ifd_gguf_get_arr(g, "t.empty", &arr), 0);
    ck_assert_uint_eq(arr->v.arr.count, 0);
    ck_assert_int_eq(ifd_gguf_arr_get(g, arr, 0, &e), IFD_ERANGE);
    ck_assert_int_eq(ifd_gguf_get_arr(g, "t.bools", &arr), 0);
    ck_assert_int_eq(ifd_gguf_arr_get(g, arr, 1, &e), 0);
    ck_assert(e.v.b);
    ck_assert_int_eq(ifd_gguf_get_arr(g, "t.u32", &arr), IFD_ETYPE);

    /* order and lookup agree */
    for (uint64_t i = 0; i < ifd_gguf_kv_count(g); i++)
        ck_assert_int_eq(ifd_gguf_find_key(g, ifd_gguf_kv_key(g, i)), (int64_t)i);

    /* tensors */
    ck_assert_uint_eq(ifd_gguf_tensor_count(g), 2);
    const ifd_gguf_tensor_t *t = ifd_gguf_find_tensor(g, "a.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->n_dims, 2);
    ck_assert_uint_eq(t->ne[0], 4);
    ck_assert_uint_eq(t->ne[1], 2);
    ck_assert_uint_eq(t->ne[2], 1);
    ck_assert_uint_eq(t->nbytes, 32);
    ck_assert_float_eq(((const float *)t->data)[7], 7.0f);
    t = ifd_gguf_find_tensor(g, "b.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->type, IFD_GGML_Q8_0);
    ck_assert_uint_eq(t->nbytes, 68);
    ck_assert_uint_eq(((const uint8_t *)t->data)[67], 67);
    ck_assert_ptr_null(ifd_gguf_find_tensor(g, "c.weight"));
    ck_assert_uint_eq(ifd_gguf_data_offset(g) % 32, 0);
    ifd_gguf_close(g);
    ifd_buf_free(&b);
}
END_TEST

START_TEST(test_v2_and_custom_alignment)
{
    ifd_buf_t b = IFD_BUF_INIT;
    build_full(&b, 2, 64);
    char err[512] = "";
    ifd_gguf_t *g = open_buf(&b, 0, err, sizeof err);
    ck_assert_uint_eq(ifd_gguf_version(g), 2);
    ck_assert_uint_eq(ifd_gguf_alignment(g), 64);
    ck_assert_uint_eq(ifd_gguf_data_offset(g) % 64, 0);
    ck_assert_uint_eq(ifd_gguf_find_tensor(g, "b.weight")->offset, 64);
    ifd_gguf_close(g);
    ifd_buf_free(&b);
}
END_TEST

/* Every strict prefix of a file with tensors must fail cleanly. */
START_TEST(test_every_truncation_fails)
{
    ifd_buf_t b = IFD_BUF_INIT;
    build_full(&b, 3, 0);
    for (size_t cut = 0; cut < b.len; cut++) {
        char *copy = malloc(cut ? cut : 1); /* exact size: ASan sees any overread */
        memcpy(copy, b.data, cut);
        ifd_gguf_t *g = NULL;
        char err[512] = "";
        int rc = ifd_gguf_open_mem(&g, copy, cut, "cut.gguf", err, sizeof err);
        ck_assert_msg(rc != 0, "truncation at %zu was accepted", cut);
        ck_assert_ptr_null(g);
        ck_assert_msg(strstr(err, "cut.gguf: at byte ") == err, "message '%s'", err);
        free(copy);
    }
    ifd_buf_free(&b);
}
END_TEST

/* Hand-made bad headers, each with the error and the message it deserves. */
START_TEST(test_malformed_headers)
{
    static const struct {
        const char *what;
        int rc;
        const char *msg;
    } cases[] = {
        {"bad magic", IFD_EFORMAT, "expected the magic"},
        {"version 1", IFD_EVERSION, "expected version 2 or 3"},
        {"big endian", IFD_EVERSION, "big-endian"},
        {"huge kv count", IFD_EFORMAT, "metadata count"},
        {"huge tensor count", IFD_EFORMAT, "tensor count"},
        {"bad value type", IFD_EFORMAT, "expected a value type"},
        {"bad bool", IFD_EFORMAT, "expected a bool"},
        {"huge array", IFD_ETRUNC, "array of"},
        {"huge string", IFD_ETRUNC, "expected string value"},
        {"duplicate key", IFD_EFORMAT, "duplicate metadata key"},
        {"bad alignment", IFD_EFORMAT, "general.alignment"},
        {"zero dims", IFD_EFORMAT, "dimensions"},
        {"unknown ggml type", IFD_EFORMAT, "unknown ggml type"},
        {"row not multiple of block", IFD_EFORMAT, "not a multiple"},
        {"misaligned offset", IFD_EFORMAT, "alignment"},
        {"tensor past end", IFD_ETRUNC, "past the end"},
        {"duplicate tensor", IFD_EFORMAT, "duplicate tensor"},
        {"array nesting too deep", IFD_EFORMAT, "nested deeper"},
        {"zero dimension", IFD_EFORMAT, "zero or overflowing"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ifd_buf_t b = IFD_BUF_INIT;
        uint64_t ne[2] = {32, 2};
        switch (k) {
        case 0:
            gb_u32(&b, 0x46554748), gb_u32(&b, 3), gb_u64(&b, 0), gb_u64(&b, 0);
            break;
        case 1:
            gb_header(&b, 1, 0, 0);
            break;
        case 2:
            gb_header(&b, 0x03000000, 0, 0);
            break;
        case 3:
            gb_header(&b, 3, 0, UINT64_MAX);
            break;
        case 4:
            gb_header(&b, 3, 1ull << 60, 0);
            break;
        case 5:
            gb_header(&b, 3, 0, 1), gb_key(&b, "k", 13), gb_u32(&b, 0);
            break;
        case 6:
            gb_header(&b, 3, 0, 1), gb_key(&b, "k", IFD_GGUF_BOOL), gb_u8(&b, 2);
            break;
        case 7:
            gb_header(&b, 3, 0, 1), gb_key(&b, "k", IFD_GGUF_ARRAY), gb_u32(&b, IFD_GGUF_UINT32);
            gb_u64(&b, 1ull << 62);
            break;
        case 8:
            gb_header(&b, 3, 0, 1), gb_key(&b, "k", IFD_GGUF_STRING), gb_u64(&b, 1ull << 40);
            break;
        case 9:
            gb_header(&b, 3, 0, 2), gb_kv_u32(&b, "k", 1), gb_kv_u32(&b, "k", 2);
            break;
        case 10:
            gb_header(&b, 3, 0, 1), gb_kv_u32(&b, "general.alignment", 24);
            break;
        case 11:
            gb_header(&b, 3, 1, 0), gb_tensor_info(&b, "t", 0, ne, 0, 0);
            break;
        case 12:
            gb_header(&b, 3, 1, 0), gb_tensor_info(&b, "t", 2, ne, 4, 0);
            break;
        case 13:
            ne[0] = 33;
            gb_header(&b, 3, 1, 0), gb_tensor_info(&b, "t", 2, ne, IFD_GGML_Q4_0, 0);
            break;
        case 14:
            gb_header(&b, 3, 1, 0), gb_tensor_info(&b, "t", 2, ne, IFD_GGML_F32, 8);
            break;
        case 15:
            gb_header(&b, 3, 1, 0), gb_tensor_info(&b, "t", 2, ne, IFD_GGML_F32, 0);
            gb_pad(&b, 32);
            for (int i = 0; i < 255; i++) /* one byte short of 256 */
                gb_u8(&b, 0);
            break;
        case 16:
            gb_header(&b, 3, 2, 0), gb_tensor_info(&b, "t", 1, ne, IFD_GGML_F32, 0);
            gb_tensor_info(&b, "t", 1, ne, IFD_GGML_F32, 128);
            gb_pad(&b, 32);
            for (int i = 0; i < 256; i++)
                gb_u8(&b, 0);
            break;
        case 17:
            gb_header(&b, 3, 0, 1), gb_key(&b, "k", IFD_GGUF_ARRAY);
            for (int i = 0; i < 12; i++)
                gb_u32(&b, IFD_GGUF_ARRAY), gb_u64(&b, 1);
            gb_u32(&b, IFD_GGUF_UINT8), gb_u64(&b, 0);
            break;
        case 18:
            ne[1] = 0;
            gb_header(&b, 3, 1, 0), gb_tensor_info(&b, "t", 2, ne, IFD_GGML_F32, 0);
            break;
        }
        if (k != 15) /* slack, so counts are judged on their content, not the size */
            for (int i = 0; i < 64; i++)
                gb_u8(&b, 0);
        char err[512] = "";
        ifd_gguf_t *g = NULL;
        int rc = ifd_gguf_open_mem(&g, b.data, b.len, "bad.gguf", err, sizeof err);
        ck_assert_msg(rc == cases[k].rc, "%s: rc %s, expected %s (%s)", cases[k].what,
                      ifd_err_name(rc), ifd_err_name(cases[k].rc), err);
        ck_assert_msg(strstr(err, cases[k].msg) != NULL, "%s: message '%s' lacks '%s'",
                      cases[k].what, err, cases[k].msg);
        ck_assert_msg(strstr(err, "bad.gguf: at byte ") == err, "%s: message '%s'",
                      cases[k].what, err);
        ck_assert_ptr_null(g);
        ifd_buf_free(&b);
    }
}
END_TEST

START_TEST(test_zero_tensors_without_padding)
{
    ifd_buf_t b = IFD_BUF_INIT;
    gb_header(&b, 3, 0, 1);
    gb_kv_str(&b, "general.architecture", "x"); /* file ends unpadded */
    ck_assert_uint_ne(b.len % 32, 0);
    char err[512] = "";
    ifd_gguf_t *g = open_buf(&b, 0, err, sizeof err);
    ck_assert_uint_eq(ifd_gguf_tensor_count(g), 0);
    ifd_gguf_close(g);
    ifd_buf_free(&b);
}
END_TEST

START_TEST(test_open_missing_file)
{
    char err[512] = "";
    ifd_gguf_t *g = NULL;
    int rc = ifd_gguf_open(&g, "/nonexistent/model.gguf", err, sizeof err);
    ck_assert_int_eq(rc, -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/model.gguf"));
}
END_TEST

/* The shared vocabulary files: tokenizer-only GGUFs with no tensors. */
START_TEST(test_vocab_files)
{
    static const struct {
        const char *file;
        const char *model;
        uint64_t n_tokens;
    } vocabs[] = {
        {"vocab/ggml-vocab-gpt-2.gguf", "gpt2", 50257},
        {"vocab/ggml-vocab-llama-spm.gguf", "llama", 32000},
    };
    char path[4096];
    for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++) {
        if (!ifd_test_data_file(vocabs[i].file, path, sizeof path)) {
            fprintf(stderr, "SKIPPED (part): %s not in the test data\n", vocabs[i].file);
            continue;
        }
        ifd_gguf_t *g;
        char err[512] = "";
        ck_assert_msg(ifd_gguf_open(&g, path, err, sizeof err) == 0, "%s", err);
        ifd_str_t s;
        ck_assert_int_eq(ifd_gguf_get_str(g, "tokenizer.ggml.model", &s), 0);
        ck_assert(s.len == strlen(vocabs[i].model) && memcmp(s.ptr, vocabs[i].model, s.len) == 0);
        const ifd_gguf_value_t *tokens;
        ck_assert_int_eq(ifd_gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens), 0);
        ck_assert_uint_eq(tokens->v.arr.count, vocabs[i].n_tokens);
        ck_assert_uint_eq(ifd_gguf_tensor_count(g), 0);
        /* every token readable */
        for (uint64_t t = 0; t < tokens->v.arr.count; t++)
            ck_assert_int_eq(ifd_gguf_arr_str(g, tokens, t, &s), 0);
        ifd_gguf_close(g);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gguf");
    ifd_test_case(s, "reader", 120,
                  IFD_TESTS(test_every_value_type, test_v2_and_custom_alignment,
                            test_every_truncation_fails, test_malformed_headers,
                            test_zero_tensors_without_padding, test_open_missing_file,
                            test_vocab_files));
    if (!ifd_test_data_dir())
        fprintf(stderr, "SKIPPED (part): no test data at $INFERD_TESTDATA_DIR; the vocabulary "
                        "file checks will not run\n");
    return ifd_test_run(s);
}
