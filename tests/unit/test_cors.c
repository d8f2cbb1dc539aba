/*
 * test_cors.c — the CORS policy (daemon/cors.h): parsing allowed_origins
 * (none, "*", a list with spaces; refused: paths, no scheme, "*" beside
 * origins, too many), the headers of an actual response (allowed origin
 * echoed with Vary, "*" without, nothing for another origin or no Origin),
 * and preflights: allowed origin / method / headers (incl. the SDKs'
 * x-stainless-*) answered 204 with the echoed headers; a disallowed origin,
 * method or header refused 403 with the reason naming it.
 */
#include "testutil.h"

#include "daemon/cors.h"
#include "error.h"

#include <string.h>

static ifd_cors_t parse_ok(const char *list)
{
    ifd_cors_t c;
    char err[256] = "";
    ck_assert_msg(ifd_cors_parse(&c, list, err, sizeof err) == 0, "%s: %s", list, err);
    return c;
}

static void parse_fails(const char *list, const char *want)
{
    ifd_cors_t c;
    char err[256] = "";
    ck_assert_int_eq(ifd_cors_parse(&c, list, err, sizeof err), IFD_EINVAL);
    ck_assert_msg(strstr(err, want), "'%s' lacks '%s'", err, want);
}

START_TEST(test_parse)
{
    ifd_cors_t c = parse_ok("");
    ck_assert(!ifd_cors_enabled(&c));
    c = parse_ok(NULL);
    ck_assert(!ifd_cors_enabled(&c));
    c = parse_ok("*");
    ck_assert(c.any && c.n == 0 && ifd_cors_enabled(&c));
    c = parse_ok(" https://app.example.com , http://localhost:5173,");
    ck_assert_int_eq(c.n, 2);
    ck_assert_str_eq(c.origins[0], "https://app.example.com");
    ck_assert_str_eq(c.origins[1], "http://localhost:5173");
    parse_fails("https://app.example.com/", "https://app.example.com/");
    parse_fails("app.example.com", "'app.example.com' is not an origin");
    parse_fails("https://", "not an origin");
    parse_fails("*, https://a.example", "'*' allows every origin");
    parse_fails("https://a b", "not an origin");
    char many[2048] = "";
    for (int i = 0; i <= IFD_CORS_MAX_ORIGINS; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "http://h%d,", i);
    parse_fails(many, "at most");
}
END_TEST

START_TEST(test_response_headers)
{
    ifd_cors_t list = parse_ok("https://app.example.com"), any = parse_ok("*"), none = parse_ok("");
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_cors_response_headers(&list, "HTTPS://APP.example.com", &b), 0);
    ck_assert_ptr_nonnull(
        strstr(b.data, "Access-Control-Allow-Origin: HTTPS://APP.example.com\r\n"));
    ck_assert_ptr_nonnull(strstr(b.data, "Vary: Origin\r\n"));
    ck_assert_ptr_nonnull(strstr(b.data, "Access-Control-Expose-Headers: X-Request-Id"));
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_cors_response_headers(&list, "https://evil.example.com", &b), 0);
    ck_assert_str_eq(b.data, "Vary: Origin\r\n"); /* the answer depends on the origin */
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_cors_response_headers(&any, "https://x.example", &b), 0);
    ck_assert_ptr_nonnull(strstr(b.data, "Access-Control-Allow-Origin: *\r\n"));
    ck_assert_ptr_null(strstr(b.data, "Vary"));
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_cors_response_headers(&any, NULL, &b), 0);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_int_eq(ifd_cors_response_headers(&none, "https://x.example", &b), 0);
    ck_assert_uint_eq(b.len, 0);
    ifd_buf_free(&b);
}
END_TEST

START_TEST(test_preflight)
{
    ifd_cors_t list = parse_ok("https://app.example.com"), none = parse_ok("");
    ck_assert(ifd_cors_is_preflight(true, "https://a", "POST"));
    ck_assert(!ifd_cors_is_preflight(false, "https://a", "POST"));
    ck_assert(!ifd_cors_is_preflight(true, NULL, "POST"));
    ck_assert(!ifd_cors_is_preflight(true, "https://a", NULL));
    ifd_buf_t b = IFD_BUF_INIT;
    char why[256] = "";
    const char *hdrs = "authorization, content-type,x-stainless-os, X-Stainless-Lang";
    ck_assert_int_eq(
        ifd_cors_preflight(&list, "https://app.example.com", "POST", hdrs, &b, why, sizeof why),
        204);
    /* Allow-Origin and Vary come from ifd_cors_response_headers, as for any response */
    ck_assert_ptr_null(strstr(b.data, "Access-Control-Allow-Origin"));
    ck_assert_ptr_null(strstr(b.data, "Vary"));
    ck_assert_ptr_nonnull(strstr(b.data, "Access-Control-Allow-Methods: GET, POST"));
    ck_assert_ptr_nonnull(strstr(b.data, "Access-Control-Max-Age: 600\r\n"));
    char want[256];
    snprintf(want, sizeof want, "Access-Control-Allow-Headers: %s\r\n", hdrs);
    ck_assert_ptr_nonnull(strstr(b.data, want));
    ifd_buf_clear(&b);
    /* refused: origin, method, header; nothing appended */
    ck_assert_int_eq(
        ifd_cors_preflight(&list, "https://evil.example", "POST", NULL, &b, why, sizeof why), 403);
    ck_assert_ptr_nonnull(strstr(why, "'https://evil.example' is not allowed"));
    ck_assert_int_eq(
        ifd_cors_preflight(&none, "https://app.example.com", "GET", NULL, &b, why, sizeof why),
        403);
    ck_assert_ptr_nonnull(strstr(why, "allowed_origins is not set"));
    ck_assert_int_eq(
        ifd_cors_preflight(&list, "https://app.example.com", "PUT", NULL, &b, why, sizeof why),
        403);
    ck_assert_ptr_nonnull(strstr(why, "'PUT'"));
    ck_assert_int_eq(ifd_cors_preflight(&list, "https://app.example.com", "POST",
                                        "content-type, x-evil", &b, why, sizeof why),
                     403);
    ck_assert_ptr_nonnull(strstr(why, "'x-evil'"));
    ck_assert_int_eq(ifd_cors_preflight(&list, "https://app.example.com", "POST",
                                        "content-type\r\nx: y", &b, why, sizeof why),
                     403);
    ck_assert_uint_eq(b.len, 0);
    ifd_buf_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cors");
    ifd_test_case(s, "cors", 30, IFD_TESTS(test_parse, test_response_headers, test_preflight));
    return ifd_test_run(s);
}
