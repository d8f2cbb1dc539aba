/*
 * test_apikeys.c — the API keys (daemon/apikeys.h): the key file's format
 * (NAME KEY, a bare KEY named by its line, comments, blank lines, CR LF,
 * tabs), what it refuses (more than two fields, control bytes, a key
 * twice, over-long names and keys, nothing but comments) with the line
 * named; the api_key setting's one key ("default"); matching a Bearer
 * header (scheme case, leading spaces, prefixes and extensions of a key
 * refused); loading from the configuration (file over setting).
 */
#include "testutil.h"

#include "daemon/apikeys.h"
#include "error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ifd_apikeys_t *parse_ok(const char *text)
{
    ifd_apikeys_t *k = NULL;
    char err[256] = "";
    int rc = ifd_apikeys_parse(text, strlen(text), &k, err, sizeof err);
    ck_assert_msg(rc == 0, "%s: %s", text, err);
    return k;
}

static void parse_fails(const char *text, size_t len, const char *want)
{
    ifd_apikeys_t *k = (ifd_apikeys_t *)1;
    char err[256] = "";
    ck_assert_int_eq(ifd_apikeys_parse(text, len, &k, err, sizeof err), IFD_EINVAL);
    ck_assert_ptr_null(k);
    ck_assert_msg(strstr(err, want), "'%s' lacks '%s'", err, want);
}

START_TEST(test_names)
{
    ifd_apikeys_t *k = parse_ok("# inferd keys\n"
                                "\n"
                                "alice  sk-alice-1\n"
                                "   \t \n"
                                "sk-bare\r\n"
                                "\tbob\tsk-bob\t\r\n"
                                "  # indented comment\n"
                                "alice sk-alice-2"); /* no newline at the end */
    ck_assert_uint_eq(ifd_apikeys_count(k), 4);
    ck_assert_str_eq(ifd_apikeys_match(k, "Bearer sk-alice-1"), "alice");
    ck_assert_str_eq(ifd_apikeys_match(k, "Bearer sk-alice-2"), "alice"); /* two keys, one name */
    ck_assert_str_eq(ifd_apikeys_match(k, "Bearer sk-bare"), "5");        /* its line */
    ck_assert_str_eq(ifd_apikeys_match(k, "bearer   sk-bob"), "bob");
    ck_assert_ptr_null(ifd_apikeys_match(k, "Bearer sk-bo"));
    ck_assert_ptr_null(ifd_apikeys_match(k, "Bearer sk-bobb"));
    ck_assert_ptr_null(ifd_apikeys_match(k, "Bearer sk-bare\r"));
    ck_assert_ptr_null(ifd_apikeys_match(k, "Bearer bob"));
    ck_assert_ptr_null(ifd_apikeys_match(k, "Bearer "));
    ck_assert_ptr_null(ifd_apikeys_match(k, "Basic sk-bob"));
    ck_assert_ptr_null(ifd_apikeys_match(k, NULL));
    ck_assert_ptr_null(ifd_apikeys_match(NULL, "Bearer sk-bob"));
    ck_assert_uint_eq(ifd_apikeys_count(NULL), 0);
    ifd_apikeys_destroy(k);
    /* the format before names: one key on the first line */
    k = parse_ok("sk-only\n");
    ck_assert_uint_eq(ifd_apikeys_count(k), 1);
    ck_assert_str_eq(ifd_apikeys_match(k, "Bearer sk-only"), "1");
    ifd_apikeys_destroy(k);
    ifd_apikeys_destroy(NULL);
}
END_TEST

START_TEST(test_refused)
{
    parse_fails("", 0, "no API key");
    parse_fails("  \t \n", 5, "no API key");
    parse_fails("# only a comment\n\n", 18, "no API key");
    parse_fails("a b\nname key extra\n", 19, "line 2: expected 'NAME KEY' or 'KEY'");
    parse_fails("k1\nbob k\001y\n", 11, "line 2: the API key contains whitespace or a control");
    parse_fails("k1\nbob k\177y\n", 11, "line 2: the API key contains");
    parse_fails("b\001b key\n", 8, "line 1: the key name contains");
    parse_fails("alice k1\nbob k1\n", 16, "line 2: the same API key as the one named 'alice'");
    parse_fails("k\0z\n", 4, "line 1: the API key contains whitespace or a control");
    char text[700];
    memset(text, 'n', 65);
    text[65] = ' ';
    text[66] = 'k';
    parse_fails(text, 67, "line 1: the key name is longer than 64 bytes");
    memset(text, 'k', 512);
    parse_fails(text, 512, "line 1: the API key is longer than 511 bytes");
    ifd_apikeys_destroy(parse_ok("n k\n")); /* the limits themselves are fine */
    memset(text, 'k', 511);
    text[511] = '\0';
    ifd_apikeys_t *k = parse_ok(text);
    ifd_apikeys_destroy(k);
}
END_TEST

START_TEST(test_one_and_load)
{
    ifd_apikeys_t *k = NULL;
    char err[256] = "";
    ck_assert_int_eq(ifd_apikeys_one("sk-x", &k, err, sizeof err), 0);
    ck_assert_str_eq(ifd_apikeys_match(k, "Bearer sk-x"), "default");
    ifd_apikeys_destroy(k);
    ck_assert_int_eq(ifd_apikeys_one("abc def", &k, err, sizeof err), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "a space"));
    ck_assert_int_eq(ifd_apikeys_one("   ", &k, err, sizeof err), IFD_EINVAL);
    ck_assert_int_eq(ifd_apikeys_one("", &k, err, sizeof err), IFD_EINVAL);
    /* load: the file wins over the setting; neither: no keys */
    char path[] = "/tmp/ifd-keys-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char text[] = "ops sk-ops\nsk-two\n";
    ck_assert_int_eq(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    ifd_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    ck_assert_int_eq(ifd_apikeys_load(&cfg, &k), 0);
    ck_assert_ptr_null(k);
    cfg.api_key = (char *)"sk-setting";
    cfg.api_key_file = path;
    ck_assert_int_eq(ifd_apikeys_load(&cfg, &k), 0);
    ck_assert_uint_eq(ifd_apikeys_count(k), 2);
    ck_assert_str_eq(ifd_apikeys_match(k, "Bearer sk-two"), "2");
    ck_assert_ptr_null(ifd_apikeys_match(k, "Bearer sk-setting"));
    ifd_apikeys_destroy(k);
    cfg.api_key_file = (char *)"";
    ck_assert_int_eq(ifd_apikeys_load(&cfg, &k), 0);
    ck_assert_str_eq(ifd_apikeys_match(k, "Bearer sk-setting"), "default");
    ifd_apikeys_destroy(k);
    unlink(path);
    cfg.api_key_file = path; /* gone: -ENOENT */
    ck_assert_int_lt(ifd_apikeys_load(&cfg, &k), 0);
    ck_assert_ptr_null(k);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("apikeys");
    TCase *tc = tcase_create("apikeys");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_one_and_load);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
