/* test_error.c — the error table: names, messages, -errno pass-through. */
#include "testutil.h"

#include "error.h"

#include <errno.h>
#include <string.h>

START_TEST(test_codes_have_names_and_messages)
{
    ck_assert_str_eq(ifd_err_name(IFD_ENOBLOCKS), "IFD_ENOBLOCKS");
    ck_assert_str_eq(ifd_strerror(IFD_ENOBLOCKS), "no free KV blocks");
    ck_assert_str_eq(ifd_err_name(0), "OK");
    ck_assert_str_eq(ifd_strerror(0), "success");
    ck_assert_str_eq(ifd_err_name(-ENOENT), "ENOENT");
    ck_assert_str_eq(ifd_strerror(-ENOENT), strerror(ENOENT));
    ck_assert_str_eq(ifd_err_name(-99999), "EUNKNOWN");
    ck_assert_str_eq(ifd_strerror(-99999), "unknown error");
}
END_TEST

START_TEST(test_codes_do_not_collide_with_errno)
{
#define X(name, value, msg) ck_assert_int_lt(value, -4096);
    IFD_ERRORS(X)
#undef X
}
END_TEST

int main(void)
{
    Suite *s = suite_create("error");
    ifd_test_case(
        s, "table", 0,
        IFD_TESTS(test_codes_have_names_and_messages, test_codes_do_not_collide_with_errno));
    return ifd_test_run(s);
}
