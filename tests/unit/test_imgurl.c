/*
 * test_imgurl.c — image URLs (daemon/imgurl.h, --allow-image-urls): the
 * allow list's check (names, *.suffix, IP literals; refused: schemes, ports,
 * paths, a bare '*'), host matching (exact, case-insensitive, suffixes that
 * need a label before them, IPv6 compared as addresses), URL parsing
 * (http/https only, userinfo, ports, IPv6, control characters, '\'), the
 * SSRF guard's address ranges, redirects' Location resolution (absolute,
 * scheme-relative, relative) and the checks of a hop (the list, the
 * parse, no https→http), the fetch's refusals that need no server
 * (curl reads another host than ours; localhost refused by the guard), and
 * the images check on the loop (none allowed: today's 400; a host not
 * listed: a 400 naming the part). The fetch itself runs against a local
 * server in test_daemon_imgurl.
 */
#include "testutil.h"

#include "daemon/images.h"
#include "daemon/imgurl.h"
#include "error.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

static void list_ok(const char *list)
{
    char err[256] = "";
    ck_assert_msg(ifd_imgurl_check_list(list, err, sizeof err) == 0, "%s: %s", list, err);
}

static void list_fails(const char *list, const char *entry)
{
    char err[256] = "";
    ck_assert_int_eq(ifd_imgurl_check_list(list, err, sizeof err), IFD_EINVAL);
    ck_assert_msg(strstr(err, entry), "'%s' lacks '%s'", err, entry);
}

START_TEST(test_check_list)
{
    list_ok(NULL);
    list_ok("");
    list_ok("example.com");
    list_ok(" images.example.com , *.cdn.example.org,127.0.0.1,[::1],my_host");
    list_fails("http://example.com", "'http://example.com'");
    list_fails("example.com:8080", "'example.com:8080'");
    list_fails("example.com/img", "'example.com/img'");
    list_fails("ok.com,*", "'*'");
    list_fails("*.", "'*.'");
    list_fails("a..b", "'a..b'");
    list_fails("[::1", "'[::1'");
    list_fails("user@example.com", "'user@example.com'");
    ck_assert(!ifd_imgurl_enabled(NULL));
    ck_assert(!ifd_imgurl_enabled(""));
    ck_assert(ifd_imgurl_enabled("example.com"));
}
END_TEST

START_TEST(test_host_allowed)
{
    const char *l = "images.example.com, *.cdn.example.org,127.0.0.1,[::1]";
    ck_assert(ifd_imgurl_host_allowed(l, "images.example.com"));
    ck_assert(ifd_imgurl_host_allowed(l, "IMAGES.Example.COM"));
    ck_assert(!ifd_imgurl_host_allowed(l, "example.com"));
    ck_assert(!ifd_imgurl_host_allowed(l, "evilimages.example.com"));
    ck_assert(!ifd_imgurl_host_allowed(l, "images.example.com.evil.net"));
    ck_assert(ifd_imgurl_host_allowed(l, "a.cdn.example.org"));
    ck_assert(ifd_imgurl_host_allowed(l, "x.y.cdn.example.org"));
    ck_assert(!ifd_imgurl_host_allowed(l, "cdn.example.org")); /* the apex is not a suffix */
    ck_assert(!ifd_imgurl_host_allowed(l, "evilcdn.example.org"));
    /* a suffix pattern never matches an IP literal (which the SSRF guard exempts) */
    ck_assert(!ifd_imgurl_host_allowed("*.0.0.1", "127.0.0.1"));
    ck_assert(ifd_imgurl_host_allowed("*.0.0.1", "a.0.0.1"));
    ck_assert(ifd_imgurl_host_allowed(l, "127.0.0.1"));
    ck_assert(!ifd_imgurl_host_allowed(l, "127.0.0.2"));
    ck_assert(ifd_imgurl_host_allowed(l, "::1"));
    ck_assert(ifd_imgurl_host_allowed(l, "0:0::1")); /* the same address */
    ck_assert(!ifd_imgurl_host_allowed(l, "::2"));
    ck_assert(!ifd_imgurl_host_allowed("", "images.example.com"));
    ck_assert(!ifd_imgurl_host_allowed(NULL, "images.example.com"));
}
END_TEST

static ifd_imgurl_t parse_ok(const char *url)
{
    ifd_imgurl_t u;
    char why[160] = "";
    ck_assert_msg(ifd_imgurl_parse(&u, url, strlen(url), why, sizeof why) == 0, "%s: %s", url, why);
    return u;
}

static void parse_fails(const char *url, const char *want)
{
    ifd_imgurl_t u;
    char why[160] = "";
    ck_assert_int_eq(ifd_imgurl_parse(&u, url, strlen(url), why, sizeof why), IFD_EINVAL);
    ck_assert_msg(strstr(why, want), "%s: '%s' lacks '%s'", url, why, want);
}

START_TEST(test_parse)
{
    ifd_imgurl_t u = parse_ok("https://Images.Example.com/a/b.png?x=1#f");
    ck_assert(u.https && !u.literal && u.port == 0);
    ck_assert_str_eq(u.host, "images.example.com");
    u = parse_ok("HTTP://127.0.0.1:8123/x.png");
    ck_assert(!u.https && u.literal && u.port == 8123);
    ck_assert_str_eq(u.host, "127.0.0.1");
    u = parse_ok("http://[::1]:80");
    ck_assert(u.literal && u.port == 80);
    ck_assert_str_eq(u.host, "::1");
    u = parse_ok("http://example.com?q");
    ck_assert_str_eq(u.host, "example.com");
    /* the length bounds the URL: no NUL needed */
    ck_assert_int_eq(ifd_imgurl_parse(&u, "http://a.com/xyz", 12, NULL, 0), 0);
    ck_assert_str_eq(u.host, "a.com");
    parse_fails("ftp://example.com/a.png", "http:// and https://");
    parse_fails("file:///etc/passwd", "http:// and https://");
    parse_fails("http://user:pw@example.com/", "credentials");
    parse_fails("http://example.com@evil.com/", "credentials");
    parse_fails("http://example.com:0/", "port");
    parse_fails("http://example.com:65536/", "port");
    parse_fails("http://example.com:8a/", "port");
    parse_fails("http://example.com:/", "port");
    parse_fails("http:///a.png", "host name");
    parse_fails("http://exa%6dple.com/", "host name");
    parse_fails("http://[::1/", "IPv6");
    parse_fails("http://[nope]/", "IPv6");
    parse_fails("http://example.com\\@evil.com/", "'\\'");
    parse_fails("http://example.com/a b.png", "space");
    parse_fails("http://example.com/\r\nHost: x", "control");
}
END_TEST

static bool v4_refused(const char *ip)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    ck_assert_int_eq(inet_pton(AF_INET, ip, &a.sin_addr), 1);
    return ifd_imgurl_addr_refused((struct sockaddr *)&a);
}

static bool v6_refused(const char *ip)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};
    ck_assert_int_eq(inet_pton(AF_INET6, ip, &a.sin6_addr), 1);
    return ifd_imgurl_addr_refused((struct sockaddr *)&a);
}

START_TEST(test_ssrf_ranges)
{
    static const char *refused4[] = {"127.0.0.1",  "127.255.0.9", "10.1.2.3",        "172.16.0.1",
                                     "172.31.9.9", "192.168.1.1", "169.254.169.254", "100.64.0.1",
                                     "0.0.0.0",    "224.0.0.1",   "255.255.255.255", "198.18.0.1",
                                     "192.0.0.8"};
    static const char *public4[] = {"8.8.8.8",     "1.1.1.1",     "172.32.0.1",
                                    "100.128.0.1", "192.169.0.1", "93.184.216.34"};
    for (size_t i = 0; i < sizeof refused4 / sizeof *refused4; i++)
        ck_assert_msg(v4_refused(refused4[i]), "%s", refused4[i]);
    for (size_t i = 0; i < sizeof public4 / sizeof *public4; i++)
        ck_assert_msg(!v4_refused(public4[i]), "%s", public4[i]);
    static const char *refused6[] = {"::",
                                     "::1",
                                     "fe80::1",
                                     "fc00::1",
                                     "fd12::3",
                                     "ff02::1",
                                     "::ffff:127.0.0.1",
                                     "::ffff:10.0.0.1",
                                     "64:ff9b::a9fe:a9fe",
                                     "fec0::1"};
    static const char *public6[] = {"2001:4860:4860::8888", "::ffff:8.8.8.8", "64:ff9b::808:808"};
    for (size_t i = 0; i < sizeof refused6 / sizeof *refused6; i++)
        ck_assert_msg(v6_refused(refused6[i]), "%s", refused6[i]);
    for (size_t i = 0; i < sizeof public6 / sizeof *public6; i++)
        ck_assert_msg(!v6_refused(public6[i]), "%s", public6[i]);
    struct sockaddr other = {.sa_family = AF_UNIX};
    ck_assert(ifd_imgurl_addr_refused(&other));
}
END_TEST

/* Location loc against base resolves to want. */
static void resolves(const char *base, const char *loc, const char *want)
{
    char *out = NULL;
    ck_assert_msg(ifd_imgurl_resolve(base, loc, &out) == 0, "%s + %s", base, loc);
    ck_assert_msg(!strcmp(out, want), "%s + %s: %s, not %s", base, loc, out, want);
    free(out);
}

START_TEST(test_resolve)
{
    const char *b = "http://img.example.com:8080/a/b/c.png?x=1";
    resolves(b, "/d.png", "http://img.example.com:8080/d.png");
    resolves(b, "d.png", "http://img.example.com:8080/a/b/d.png");
    resolves(b, "../d.png", "http://img.example.com:8080/a/d.png");
    resolves(b, "?y=2", "http://img.example.com:8080/a/b/c.png?y=2");
    resolves(b, "//cdn.example.com/e.png", "http://cdn.example.com/e.png");
    resolves(b, "https://cdn.example.com/e.png", "https://cdn.example.com/e.png");
    resolves("https://a.example.com/x", "/y", "https://a.example.com/y");
    char *out = (char *)"x";
    ck_assert_int_eq(ifd_imgurl_resolve(b, "gopher-x://h/p", &out), IFD_EINVAL);
    ck_assert_ptr_null(out);
}
END_TEST

/* A hop from from_url to to under allow: its code, the reason in why. */
static int hop(const char *allow, const char *from_url, const char *to, char *why, size_t whylen)
{
    ifd_imgurl_t from, next;
    ck_assert_int_eq(ifd_imgurl_parse(&from, from_url, strlen(from_url), why, whylen), 0);
    *why = 0;
    return ifd_imgurl_check_redirect(allow, &from, to, &next, why, whylen);
}

START_TEST(test_check_redirect)
{
    char why[256];
    const char *allow = "img.example.com, *.cdn.example.net, 203.0.113.7";
    ck_assert_int_eq(
        hop(allow, "http://img.example.com/a", "https://x.cdn.example.net/b", why, sizeof why), 0);
    ck_assert_int_eq(
        hop(allow, "http://img.example.com/a", "http://203.0.113.7:81/b", why, sizeof why), 0);
    /* a host not listed, however it is spelled */
    ck_assert_int_eq(
        hop(allow, "http://img.example.com/a", "http://evil.example.org/b", why, sizeof why),
        IFD_EINVAL);
    ck_assert_msg(strstr(why, "'evil.example.org'") && strstr(why, "allow_image_urls"), "%s", why);
    ck_assert_int_eq(hop(allow, "http://img.example.com/a", "http://127.0.0.1/b", why, sizeof why),
                     IFD_EINVAL);
    ck_assert_msg(strstr(why, "'127.0.0.1'"), "%s", why);
    ck_assert_int_eq(
        hop(allow, "http://img.example.com/a", "http://cdn.example.net/b", why, sizeof why),
        IFD_EINVAL);
    /* no list: nothing */
    ck_assert_int_eq(
        hop("", "http://img.example.com/a", "http://img.example.com/b", why, sizeof why),
        IFD_EINVAL);
    /* https → http refused, http → https allowed */
    ck_assert_int_eq(
        hop(allow, "https://img.example.com/a", "http://img.example.com/b", why, sizeof why),
        IFD_EINVAL);
    ck_assert_msg(strstr(why, "https to http"), "%s", why);
    ck_assert_int_eq(
        hop(allow, "http://img.example.com/a", "https://img.example.com/b", why, sizeof why), 0);
    /* the first URL's own rules */
    ck_assert_int_eq(
        hop(allow, "http://img.example.com/a", "ftp://img.example.com/b", why, sizeof why),
        IFD_EINVAL);
    ck_assert_msg(strstr(why, "only http:// and https://"), "%s", why);
    ck_assert_int_eq(
        hop(allow, "http://img.example.com/a", "http://u:p@img.example.com/b", why, sizeof why),
        IFD_EINVAL);
    ck_assert_msg(strstr(why, "credentials"), "%s", why);
}
END_TEST

/* ifd_imgurl_fetch of url (parsed first); returns its code, why in why. */
static int fetch(const char *url, char *why, size_t whylen)
{
    ifd_imgurl_t u;
    ck_assert_int_eq(ifd_imgurl_parse(&u, url, strlen(url), why, whylen), 0);
    ifd_imgurl_limits_t lim = {.max_bytes = 1 << 20, .timeout_s = 2};
    uint8_t *bytes = (uint8_t *)"x";
    size_t n = 1;
    int rc = ifd_imgurl_fetch(&u, url, strlen(url), &lim, &bytes, &n, why, whylen);
    ck_assert_ptr_null(bytes);
    ck_assert_uint_eq(n, 0);
    return rc;
}

/* Refusals that need no server: curl's own parse names another host than
 * ours (127.1, 0x7f.0.0.1 are 127.0.0.1 to curl), and the SSRF guard
 * refuses localhost's loopback addresses before any socket is opened. */
START_TEST(test_fetch_refusals)
{
    char why[256] = "";
    ck_assert_int_eq(ifd_imgurl_global_init(), 0);
    ck_assert_int_eq(fetch("http://127.1/a.png", why, sizeof why), IFD_EFORMAT);
    ck_assert_msg(strstr(why, "unambiguously"), "%s", why);
    ck_assert_int_eq(fetch("http://0x7f.0.0.1/a.png", why, sizeof why), IFD_EFORMAT);
    ck_assert_msg(strstr(why, "unambiguously"), "%s", why);
    ck_assert_int_eq(fetch("http://localhost:9/a.png", why, sizeof why), IFD_EFORMAT);
    ck_assert_msg(strstr(why, "loopback, private or link-local"), "%s", why);
    ifd_imgurl_global_cleanup();
}
END_TEST

/* One chat image part with url, checked as the loop does. */
static int check_one(const char *allow, const char *url, ifd_oai_error_t *e)
{
    ifd_images_setup_t s = {.tokens_per_image = 16, .max_images = 4, .allow_urls = allow};
    ifd_oai_image_t im = {
        .url = (char *)url, .url_len = strlen(url), .param = "messages[0].content[1]"};
    ifd_oai_request_t rq = {.images = &im, .n_images = 1};
    memset(e, 0, sizeof *e);
    return ifd_images_check(&s, &rq, e);
}

START_TEST(test_images_check)
{
    ifd_oai_error_t e;
    ck_assert_int_eq(check_one("", "http://127.0.0.1/a.png", &e), IFD_EINVAL);
    ck_assert_int_eq(e.status, 400);
    ck_assert_ptr_nonnull(strstr(e.message, "not fetched by this server"));
    ck_assert_int_eq(check_one("127.0.0.1", "http://127.0.0.1:9/a.png", &e), 0);
    ck_assert_int_eq(check_one("127.0.0.1", "http://localhost/a.png", &e), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "'localhost' is not one this server fetches"));
    ck_assert_ptr_nonnull(strstr(e.param, "messages[0].content[1]"));
    ck_assert_int_eq(check_one("127.0.0.1", "http://u@127.0.0.1/a.png", &e), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "messages[0].content[1]"));
    ck_assert_ptr_nonnull(strstr(e.message, "credentials"));
    ck_assert_int_eq(check_one("127.0.0.1", "ftp://127.0.0.1/a.png", &e), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "base64 data: URL"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("imgurl");
    ifd_test_case(s, "imgurl", 30,
                  IFD_TESTS(test_check_list, test_host_allowed, test_parse, test_ssrf_ranges,
                            test_resolve, test_check_redirect, test_fetch_refusals,
                            test_images_check));
    return ifd_test_run(s);
}
