/*
 * imgurl.h — http(s) image URLs (issue 28, --allow-image-urls): which ones
 * the server may fetch, and the fetch itself (libcurl), under the rules of
 * docs/security.md ("Image URLs"):
 *
 *   - allow_image_urls lists the hosts: exact names or IP literals
 *     (IPv6 in brackets), or "*.example.com" (any name ending in
 *     ".example.com", not example.com itself, never an IP literal); ""
 *     (the default) fetches nothing;
 *   - the URL is http:// or https://, no userinfo (user@), an optional port,
 *     a host of letters, digits, '-', '.', '_' (or an IPv6 literal);
 *   - SSRF guard: every address a host name resolves to is checked when the
 *     socket is opened; loopback, private, link-local, CGNAT, unspecified,
 *     multicast and reserved addresses are refused, unless the URL's host is
 *     itself an IP literal (then the list named exactly that address);
 *   - redirects (301, 302, 303, 307, 308) are followed by our own loop, at
 *     most max_redirects of them (image_url_max_redirects; 0: a redirect is
 *     a failure): each Location is resolved against the URL that answered
 *     it, then parsed, checked against the list and the SSRF guard exactly
 *     as the first URL; https never redirects to http; a URL seen before
 *     in the chain is a loop (a failure). libcurl never follows by itself;
 *   - no proxy (the environment's *_proxy variables are ignored), no content
 *     decoding, no cookies or .netrc;
 *   - at most max_bytes over the whole chain (a redirect's body counts; a
 *     Content-Length over what is left aborts before the body, a body
 *     growing over it as soon as it does), the whole chain within
 *     timeout_s (images.c gives each fetch what is left of the request's
 *     image_url_timeout), each connect within the lesser of what is left
 *     and 5 s; a set cancel flag aborts it.
 *
 * Threading: ifd_imgurl_global_init once in main() before any thread;
 * ifd_imgurl_fetch on any thread (each call its own curl handle, no signals);
 * the rest is pure.
 */
#ifndef IFD_DAEMON_IMGURL_H
#define IFD_DAEMON_IMGURL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sockaddr;

#define IFD_IMGURL_MAX_URL       8192 /* longer URLs are refused */
#define IFD_IMGURL_MAX_REDIRECTS 20   /* image_url_max_redirects at most */

/* A parsed http(s) URL's authority. */
typedef struct {
    bool https;
    bool literal;   /* host is an IPv4 or IPv6 literal */
    uint16_t port;  /* 0: the scheme's */
    char host[256]; /* lower case; an IPv6 literal without its brackets */
} ifd_imgurl_t;

/* Initialises libcurl (curl_global_init). 0, or IFD_EINTERNAL. Call once,
 * before threads start; ifd_imgurl_global_cleanup at exit. */
int ifd_imgurl_global_init(void);
void ifd_imgurl_global_cleanup(void);

/* Checks an allow_image_urls value: NULL or "" (none), or comma-separated
 * hosts (spaces around them ignored) as above. 0, or IFD_EINVAL with the
 * entry named in err. Pure. */
int ifd_imgurl_check_list(const char *list, char *err, size_t errlen);

/* True when list is neither NULL nor empty. */
bool ifd_imgurl_enabled(const char *list);

/* Parses url (len bytes, no NUL needed) into *u. 0, or IFD_EINVAL with the
 * reason in why (not http(s), userinfo, a bad host or port, a control
 * character or space, over IFD_IMGURL_MAX_URL). Pure. */
int ifd_imgurl_parse(ifd_imgurl_t *u, const char *url, size_t len, char *why, size_t whylen);

/* True when list (checked by ifd_imgurl_check_list) allows host (as
 * ifd_imgurl_parse leaves it). Pure. */
bool ifd_imgurl_host_allowed(const char *list, const char *host);

/* True when sa (AF_INET or AF_INET6; anything else: true) is an address the
 * SSRF guard refuses for a host name: see above. IPv4-mapped and NAT64
 * (64:ff9b::/96) IPv6 addresses are judged by their IPv4 address. Pure. */
bool ifd_imgurl_addr_refused(const struct sockaddr *sa);

/*
 * Resolves location (a redirect's Location: absolute, scheme-relative
 * "//host/p", or relative "/p", "p", "?q") against base (an absolute URL),
 * as libcurl does (RFC 3986), into *out (malloc'ed, the caller frees).
 * 0; IFD_EINVAL (base or location unreadable, a scheme libcurl does not
 * know); IFD_ENOMEM. Pure (no network); any thread.
 */
int ifd_imgurl_resolve(const char *base, const char *location, char **out);

/*
 * The checks one redirect hop must pass before it is fetched: to (an
 * absolute URL, ifd_imgurl_resolve's) parses as ifd_imgurl_parse wants, is
 * not an https→http downgrade from from, and its host is allowed by allow
 * (allow_image_urls; NULL or "": nothing is). 0 with *next parsed, or
 * IFD_EINVAL with the reason in why. The SSRF guard is the fetch's (it needs
 * the addresses). Pure.
 */
int ifd_imgurl_check_redirect(const char *allow, const ifd_imgurl_t *from, const char *to,
                              ifd_imgurl_t *next, char *why, size_t whylen);

/* What a fetch is held to. Zeroed fields: no redirects. */
typedef struct {
    uint64_t max_bytes;       /* max_image_bytes, for the whole chain */
    double timeout_s;         /* image_url_timeout (what is left of it), for the whole chain */
    const atomic_int *cancel; /* may be NULL; nonzero aborts the transfer */
    const char *allow;        /* allow_image_urls, for the redirects' hosts (borrowed) */
    uint32_t max_redirects;   /* image_url_max_redirects (at most IFD_IMGURL_MAX_REDIRECTS) */
} ifd_imgurl_limits_t;

/*
 * Fetches url (len bytes; parsed as u by ifd_imgurl_parse, its host already
 * allowed) into *bytes (malloc'ed, the caller frees) and *n. Blocks: call it
 * on the thread pool, never on the loop. Returns 0; IFD_ETOOBIG (over
 * max_bytes); IFD_ETIMEDOUT; IFD_ECANCELED; IFD_EFORMAT (anything else: an
 * HTTP status other than 200, a redirect refused (over max_redirects, a
 * loop, its host not allowed, a downgrade, a bad Location), a refused
 * address, a connect or TLS failure; why says which); IFD_ENOMEM. On
 * failure *bytes is NULL.
 */
int ifd_imgurl_fetch(const ifd_imgurl_t *u, const char *url, size_t len,
                     const ifd_imgurl_limits_t *lim, uint8_t **bytes, size_t *n, char *why,
                     size_t whylen);

#endif
