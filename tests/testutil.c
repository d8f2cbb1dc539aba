/* testutil.c — see testutil.h. */
#include "testutil.h"

#include "modelfile/model_config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *ifd_test_data_dir(void)
{
    const char *d = getenv("INFERD_TESTDATA_DIR");
    struct stat st;
    if (d && *d && stat(d, &st) == 0 && S_ISDIR(st.st_mode))
        return d;
    return NULL;
}

const char *ifd_test_data_file(const char *rel, char *buf, size_t len)
{
    const char *d = ifd_test_data_dir();
    struct stat st;
    if (!d)
        return NULL;
    snprintf(buf, len, "%s/%s", d, rel);
    return stat(buf, &st) == 0 ? buf : NULL;
}

const char *ifd_test_model_path(char *buf, size_t len)
{
    struct stat st;
    const char *m = getenv("INFERD_TEST_MODEL");
    if (m && *m) {
        snprintf(buf, len, "%s", m);
    } else {
        ifd_default_model_path(buf, len);
    }
    return stat(buf, &st) == 0 && S_ISREG(st.st_mode) ? buf : NULL;
}

int ifd_test_sanitized(void)
{
    const char *v = getenv("INFERD_TEST_SANITIZED");
    return v && *v && strcmp(v, "0") != 0;
}

void ifd_test_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("SKIPPED: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(77);
}

int ifd_test_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

TCase *ifd_test_case(Suite *s, const char *name, int timeout_s, const TTest *const *tests)
{
    TCase *tc = tcase_create(name);
    if (timeout_s > 0)
        tcase_set_timeout(tc, timeout_s);
    for (size_t i = 0; tests[i]; i++)
        tcase_add_test(tc, tests[i]);
    suite_add_tcase(s, tc);
    return tc;
}

void ifd_test_roundtrip(const ifd_tokenizer_t *t, const char *s, size_t n, bool flush)
{
    ifd_tokens_t ids = {0};
    ck_assert_int_eq(ifd_tokenizer_encode(t, s, n, IFD_TOK_ADD_SPECIAL, &ids), 0);
    char *out;
    size_t len;
    ck_assert_int_eq(ifd_tokenizer_decode(t, ids.ids, ids.n, 0, &out, &len), 0);
    ck_assert_msg(len == n && memcmp(out, s, n) == 0, "round trip of '%.*s' gave '%s'", (int)n, s,
                  out);
    ifd_detok_t *d;
    ck_assert_int_eq(ifd_detok_create(&d, t, 0), 0);
    char *acc = malloc(n * 3 + 8);
    size_t an = 0;
    const char *p;
    size_t l;
    for (size_t i = 0; i < ids.n; i++) {
        ck_assert_int_eq(ifd_detok_push(d, ids.ids[i], &p, &l), 0);
        memcpy(acc + an, p, l);
        an += l;
    }
    if (flush) {
        ck_assert_int_eq(ifd_detok_flush(d, &p, &l), 0);
        memcpy(acc + an, p, l);
        an += l;
    }
    ck_assert_msg(an == n && memcmp(acc, s, n) == 0, "streamed '%.*s' != '%.*s'", (int)an, acc,
                  (int)n, s);
    free(acc);
    ifd_detok_destroy(d);
    free(out);
    ifd_tokens_free(&ids);
}

void *ifd_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return NULL;
    }
    long n = ftell(f);
    rewind(f);
    char *p = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) {
        p[n] = '\0';
        *len = (size_t)n;
    }
    return p;
}
