/*
 * test_jinja.c — common/jinja against expected strings rendered by Python's
 * jinja2 3.1 in transformers' environment (trim_blocks, lstrip_blocks).
 */
#include "testutil.h"

#include "error.h"
#include "jinja.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_basic)
{
    ifd_jinja_t *t;
    char err[256];
    ck_assert_int_eq(ifd_jinja_parse(&t, "a{{ 1 + 2 }}b", 13, err, sizeof err), 0);
    char *out;
    size_t n;
    ck_assert_int_eq(ifd_jinja_render(t, NULL, NULL, &out, &n, err, sizeof err), 0);
    ck_assert_str_eq(out, "a3b");
    free(out);
    ifd_jinja_destroy(t);
}
END_TEST

static Suite *jinja_suite(void)
{
    Suite *s = suite_create("jinja");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_basic);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ifd_test_run(jinja_suite());
}
