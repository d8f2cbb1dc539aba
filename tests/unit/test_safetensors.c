/*
 * test_safetensors.c — the safetensors reader on files the test writes:
 * a valid file (every dtype, values read back), every truncation of it,
 * malformed headers and offsets (overlapping, out of range, wrong size),
 * sharded checkpoints through model.safetensors.index.json (missing shard,
 * tensor missing from its shard, a tensor in two shards), and directories.
 * Every failure must be a clean code with a message naming the file, and the
 * tensor where there is one.
 */
#include "testutil.h"

#include "error.h"
#include "modelfile/safetensors.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ifd_st_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_tmpdir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* A safetensors image: u64 header length, header, data. Caller frees. */
static uint8_t *image(const char *header, const void *data, size_t dlen, size_t *size)
{
    size_t h = strlen(header);
    *size = 8 + h + dlen;
    uint8_t *b = malloc(*size ? *size : 1);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    if (dlen)
        memcpy(b + 8 + h, data, dlen);
    return b;
}

static void write_st(const char *path, const char *header, const void *data, size_t dlen)
{
    size_t n;
    uint8_t *b = image(header, data, dlen, &n);
    write_bytes(path, b, n);
    free(b);
}

/* Three tensors: a [2,3] F32, a [4] F16, a [2,2] BF16, in that data order. */
static const char *GOOD_HDR =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"b.f16\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[24,32]},"
    "\"a.f32\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"c.bf16\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[32,40]}}";

static void good_data(uint8_t d[40])
{
    for (int i = 0; i < 40; i++)
        d[i] = (uint8_t)(i * 7 + 1);
}

/* Opens path expecting failure `want` (0 = any clean failure) and the
 * message to contain each of the NULL-terminated `needles`. */
static void expect_fail(const char *path, int want, ...)
{
    ifd_safetensors_t *st = NULL;
    char err[1024] = "";
    int rc = ifd_safetensors_open(&st, path, err, sizeof err);
    ck_assert_msg(rc != 0, "%s opened but should not", path);
    ck_assert_ptr_null(st);
    if (want)
        ck_assert_msg(rc == want, "%s: rc %d (%s), want %d: %s", path, rc, ifd_err_name(rc), want,
                      err);
    else
        ck_assert_msg(rc == IFD_ETRUNC || rc == IFD_EFORMAT || rc == IFD_ENOTSUP ||
                          rc == IFD_ETOOBIG,
                      "%s: rc %d: %s", path, rc, err);
    ck_assert_msg(strchr(err, '\n') == NULL, "multi-line message: %s", err);
    va_list ap;
    va_start(ap, want);
    const char *needle;
    while ((needle = va_arg(ap, const char *)))
        ck_assert_msg(strstr(err, needle), "message '%s' lacks '%s'", err, needle);
    va_end(ap);
}

START_TEST(test_valid_file)
{
    make_tmpdir();
    uint8_t d[40];
    good_data(d);
    char path[300];
    snprintf(path, sizeof path, "%s/x.safetensors", tmpdir);
    write_st(path, GOOD_HDR, d, sizeof d);
    ifd_safetensors_t *st;
    char err[512];
    ck_assert_msg(ifd_safetensors_open(&st, path, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(ifd_safetensors_count(st), 3);
    ck_assert_uint_eq(ifd_safetensors_n_files(st), 1);
    ck_assert_str_eq(ifd_safetensors_at(st, 0)->name, "a.f32"); /* sorted */
    const ifd_st_tensor_t *a = ifd_safetensors_find(st, "a.f32");
    const ifd_st_tensor_t *b = ifd_safetensors_find(st, "b.f16");
    const ifd_st_tensor_t *c = ifd_safetensors_find(st, "c.bf16");
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_null(ifd_safetensors_find(st, "zz"));
    ck_assert_ptr_null(ifd_safetensors_find(st, "__metadata__"));
    ck_assert_uint_eq(a->ggml_type, 0);
    ck_assert_uint_eq(b->ggml_type, 1);
    ck_assert_uint_eq(c->ggml_type, 30);
    ck_assert_uint_eq(a->n_dims, 2);
    ck_assert_int_eq(a->shape[0], 2);
    ck_assert_int_eq(a->shape[1], 3);
    ck_assert_uint_eq(a->n_elems, 6);
    ck_assert_uint_eq(b->nbytes, 8);
    ck_assert_int_eq(memcmp(a->data, d, 24), 0);
    ck_assert_int_eq(memcmp(b->data, d + 24, 8), 0);
    ck_assert_int_eq(memcmp(c->data, d + 32, 8), 0);
    ck_assert_str_eq(a->file, path);
    ifd_safetensors_close(st);
    rm_tmpdir();
}
END_TEST

START_TEST(test_every_truncation)
{
    make_tmpdir();
    uint8_t d[40];
    good_data(d);
    size_t n;
    uint8_t *img = image(GOOD_HDR, d, sizeof d, &n);
    char path[300];
    snprintf(path, sizeof path, "%s/t.safetensors", tmpdir);
    for (size_t len = 0; len < n; len++) {
        write_bytes(path, img, len);
        expect_fail(path, 0, path, NULL);
    }
    /* cut inside the data section: the message names the tensor it cuts */
    write_bytes(path, img, n - 1);
    expect_fail(path, IFD_ETRUNC, path, "'c.bf16'", NULL);
    write_bytes(path, img, n - 16);
    expect_fail(path, IFD_ETRUNC, path, "'b.f16'", NULL);
    /* trailing bytes after the data are allowed */
    uint8_t *big = malloc(n + 5);
    memcpy(big, img, n);
    memset(big + n, 0, 5);
    write_bytes(path, big, n + 5);
    ifd_safetensors_t *st;
    char err[512];
    ck_assert_msg(ifd_safetensors_open(&st, path, err, sizeof err) == 0, "%s", err);
    ifd_safetensors_close(st);
    free(big);
    free(img);
    rm_tmpdir();
}
END_TEST

START_TEST(test_bad_headers)
{
    make_tmpdir();
    uint8_t d[64] = {0};
    char path[300];
    snprintf(path, sizeof path, "%s/h.safetensors", tmpdir);
    static const struct {
        const char *hdr;
        int rc;
        const char *needle;
    } cases[] = {
        {"", IFD_EFORMAT, "JSON"},
        {"{\"a\":", IFD_EFORMAT, "JSON"},
        {"[1,2]", IFD_EFORMAT, "not a JSON object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         IFD_EFORMAT, "JSON"},
        {"{\"w\":5}", IFD_EFORMAT, "'w'"},
        {"{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", IFD_EFORMAT, "dtype is missing"},
        {"{\"w\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}", IFD_ENOTSUP,
         "tensor 'w': unknown dtype 'Q4'"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", IFD_EFORMAT,
         "shape[0]"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,4]}}", IFD_EFORMAT,
         "shape"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
         IFD_EFORMAT, "shape"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
         "\"data_offsets\":[0,4]}}",
         IFD_EFORMAT, "overflow"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", IFD_EFORMAT, "data_offsets"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", IFD_EFORMAT,
         "data_offsets"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", IFD_EFORMAT, "begin"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", IFD_EFORMAT, "need 4"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", IFD_EFORMAT, "need 8"},
        /* out of range: the data section holds 64 bytes */
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[64,68]}}", IFD_ETRUNC,
         "past the data section"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[20],\"data_offsets\":[0,80]}}", IFD_ETRUNC, "'w'"},
        /* overlapping */
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"y\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[12,28]}}",
         IFD_EFORMAT, "overlap"},
        {"{\"x\":{\"dtype\":\"F16\",\"shape\":[8],\"data_offsets\":[8,24]},"
         "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}",
         IFD_EFORMAT, "overlap"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_st(path, cases[i].hdr, d, sizeof d);
        expect_fail(path, cases[i].rc, path, cases[i].needle, NULL);
    }
    /* a header length past the file; a header over the limit */
    uint8_t raw[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
    write_bytes(path, raw, sizeof raw);
    expect_fail(path, IFD_ETRUNC, path, "header length", NULL);
    /* an unsupported but known dtype opens; only its ggml type says so */
    write_st(path,
             "{\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
             "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,16]}}",
             d, sizeof d);
    ifd_safetensors_t *st;
    char err[512];
    ck_assert_msg(ifd_safetensors_open(&st, path, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(ifd_safetensors_find(st, "ids")->ggml_type, IFD_ST_UNSUPPORTED);
    ck_assert_str_eq(ifd_safetensors_find(st, "ids")->dtype, "I64");
    ck_assert_uint_eq(ifd_safetensors_find(st, "e")->nbytes, 0);
    ifd_safetensors_close(st);
    rm_tmpdir();
}
END_TEST

static void write_file(const char *dir, const char *name, const char *text)
{
    char p[400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    write_bytes(p, text, strlen(text));
}

static void write_shards(void)
{
    float a[4] = {1, 2, 3, 4}, b[2] = {5, 6};
    char p[400];
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", tmpdir);
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", a, sizeof a);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", tmpdir);
    write_st(p, "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", b, sizeof b);
}

static const char *INDEX_OK =
    "{\"metadata\":{\"total_size\":24},\"weight_map\":{"
    "\"a\":\"model-00001-of-00002.safetensors\",\"b\":\"model-00002-of-00002.safetensors\"}}";

START_TEST(test_sharded)
{
    make_tmpdir();
    write_shards();
    write_file(tmpdir, "model.safetensors.index.json", INDEX_OK);
    ifd_safetensors_t *st;
    char err[512];
    ck_assert_msg(ifd_safetensors_open(&st, tmpdir, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(ifd_safetensors_n_files(st), 2);
    ck_assert_uint_eq(ifd_safetensors_count(st), 2);
    const ifd_st_tensor_t *b = ifd_safetensors_find(st, "b");
    ck_assert_ptr_nonnull(b);
    float v;
    memcpy(&v, (const char *)b->data + 4, 4);
    ck_assert(v == 6.0f);
    ck_assert_ptr_nonnull(strstr(b->file, "model-00002-of-00002"));
    ifd_safetensors_close(st);
    /* the index file itself works too */
    char p[400];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", tmpdir);
    ck_assert_msg(ifd_safetensors_open(&st, p, err, sizeof err) == 0, "%s", err);
    ifd_safetensors_close(st);

    /* tensor listed for a shard that lacks it */
    write_file(tmpdir, "model.safetensors.index.json",
               "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
               "\"b\":\"model-00001-of-00002.safetensors\"}}");
    expect_fail(tmpdir, IFD_EFORMAT, "model-00001-of-00002.safetensors", "'b'", NULL);
    /* missing shard */
    write_file(tmpdir, "model.safetensors.index.json",
               "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
               "\"b\":\"model-00003-of-00002.safetensors\"}}");
    expect_fail(tmpdir, -ENOENT, "model-00003-of-00002.safetensors", NULL);
    /* a path outside the directory */
    write_file(tmpdir, "model.safetensors.index.json",
               "{\"weight_map\":{\"a\":\"../x.safetensors\"}}");
    expect_fail(tmpdir, IFD_EFORMAT, "weight_map['a']", NULL);
    write_file(tmpdir, "model.safetensors.index.json", "{\"weight_map\":{}}");
    expect_fail(tmpdir, IFD_EFORMAT, "weight_map", NULL);
    write_file(tmpdir, "model.safetensors.index.json", "{\"weight_map\":");
    expect_fail(tmpdir, IFD_EFORMAT, "model.safetensors.index.json", NULL);
    /* the same tensor in two shards */
    float a[4] = {0};
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", tmpdir);
    write_st(p,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,16]}}",
             a, sizeof a);
    write_file(tmpdir, "model.safetensors.index.json", INDEX_OK);
    expect_fail(tmpdir, IFD_EFORMAT, "'a'", "also in", NULL);
    /* a corrupt shard is named */
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", tmpdir);
    write_bytes(p, "\x05\0\0\0\0\0\0\0{", 9);
    expect_fail(tmpdir, IFD_ETRUNC, "model-00002-of-00002.safetensors", NULL);
    rm_tmpdir();
}
END_TEST

START_TEST(test_directories)
{
    make_tmpdir();
    expect_fail(tmpdir, -ENOENT, tmpdir, "model.safetensors", NULL);
    char p[400];
    snprintf(p, sizeof p, "%s/nope.safetensors", tmpdir);
    expect_fail(p, -ENOENT, p, NULL);
    float a[2] = {1, 2};
    snprintf(p, sizeof p, "%s/model.safetensors", tmpdir);
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", a, sizeof a);
    ifd_safetensors_t *st;
    char err[512];
    ck_assert_msg(ifd_safetensors_open(&st, tmpdir, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(ifd_safetensors_count(st), 1);
    ck_assert_uint_eq(ifd_safetensors_total_bytes(st), 8 +
                                                           strlen("{\"w\":{\"dtype\":\"F32\","
                                                                  "\"shape\":[2],\"data_"
                                                                  "offsets\":[0,8]}}") +
                                                           8);
    ifd_safetensors_close(st);
    ifd_safetensors_close(NULL);
    rm_tmpdir();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("safetensors");
    ifd_test_case(s, "core", 60,
                  IFD_TESTS(test_valid_file, test_every_truncation, test_bad_headers, test_sharded,
                            test_directories));
    return ifd_test_run(s);
}
