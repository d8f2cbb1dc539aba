/*
 * imgurl.c — see imgurl.h. The URL is parsed here, strictly, and libcurl's
 * own parse of it must name the same host (no parser differential lets a
 * URL reach a host the list did not allow); the SSRF guard sits in the
 * socket-open callback, so it judges the very addresses curl connects to.
 */
#include "imgurl.h"

#include "error.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#define IFD__CONNECT_TIMEOUT_S 5.0

int ifd_imgurl_global_init(void)
{
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : IFD_EINTERNAL;
}

void ifd_imgurl_global_cleanup(void)
{
    curl_global_cleanup();
}

bool ifd_imgurl_enabled(const char *list)
{
    return list && *list;
}

/* ---- host names and literals ------------------------------------------------------------ */

static bool ifd__host_char(char c)
{
    return isalnum((unsigned char)c) || c == '-' || c == '.' || c == '_';
}

/* A host name: labels of host characters, no empty label, at most 253. */
static bool ifd__valid_name(const char *h, size_t n)
{
    if (!n || n > 253 || h[0] == '.' || h[n - 1] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!ifd__host_char(h[i]) || (h[i] == '.' && h[i + 1] == '.'))
            return false;
    return true;
}

/* "[v6]" → v6 in out (NUL-terminated); false when not a bracketed IPv6. */
static bool ifd__v6_literal(const char *h, size_t n, char *out, size_t outlen)
{
    struct in6_addr a;
    if (n < 3 || h[0] != '[' || h[n - 1] != ']' || n - 2 >= outlen)
        return false;
    memcpy(out, h + 1, n - 2);
    out[n - 2] = 0;
    return inet_pton(AF_INET6, out, &a) == 1;
}

static bool ifd__v4_literal(const char *h)
{
    struct in_addr a;
    return inet_pton(AF_INET, h, &a) == 1;
}

/* One list entry (trimmed): a name, "*.name", an IPv4 or a bracketed IPv6. */
static bool ifd__valid_entry(const char *e, size_t n)
{
    char v6[64];
    if (n > 2 && e[0] == '*' && e[1] == '.')
        return ifd__valid_name(e + 2, n - 2);
    return ifd__v6_literal(e, n, v6, sizeof v6) || ifd__valid_name(e, n);
}

/* Calls fn on each trimmed, non-empty entry of list until it returns true. */
typedef bool (*ifd__entry_cb)(const char *e, size_t n, void *arg);

static bool ifd__each_entry(const char *list, ifd__entry_cb fn, void *arg)
{
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *e = p;
        while (n && isspace((unsigned char)*e))
            e++, n--;
        while (n && isspace((unsigned char)e[n - 1]))
            n--;
        if (fn(e, n, arg))
            return true;
        p = end ? end + 1 : p + strlen(p);
    }
    return false;
}

typedef struct {
    char *err;
    size_t errlen;
} ifd__check_t;

static bool ifd__bad_entry(const char *e, size_t n, void *arg)
{
    ifd__check_t *c = arg;
    if (ifd__valid_entry(e, n))
        return false;
    ifd_errbuf(c->err, c->errlen,
               "allow_image_urls: '%.*s' is not a host (a name, *.domain, an IPv4 address or "
               "[IPv6], comma-separated; no scheme, port or path)",
               (int)(n > 200 ? 200 : n), e);
    return true;
}

int ifd_imgurl_check_list(const char *list, char *err, size_t errlen)
{
    ifd__check_t c = {err, errlen};
    return ifd__each_entry(list, ifd__bad_entry, &c) ? IFD_EINVAL : 0;
}

static bool ifd__entry_matches(const char *e, size_t n, void *arg)
{
    const char *host = arg;
    size_t hl = strlen(host);
    char v6[64];
    if (n > 2 && e[0] == '*' && e[1] == '.') /* a suffix of a longer name, never of an IP */
        return hl > n - 1 && !strncasecmp(host + hl - (n - 1), e + 1, n - 1) &&
               !ifd__v4_literal(host);
    if (ifd__v6_literal(e, n, v6, sizeof v6)) { /* compared as addresses */
        struct in6_addr a, b;
        return inet_pton(AF_INET6, v6, &a) == 1 && inet_pton(AF_INET6, host, &b) == 1 &&
               !memcmp(&a, &b, sizeof a);
    }
    return hl == n && !strncasecmp(host, e, n);
}

bool ifd_imgurl_host_allowed(const char *list, const char *host)
{
    return ifd__each_entry(list, ifd__entry_matches, (void *)host);
}

/* ---- URLs ------------------------------------------------------------------------------- */

/* The authority's port ("" or ":digits", 1..65535) into *port. */
static int ifd__port(const char *p, size_t n, uint16_t *port)
{
    *port = 0;
    if (!n)
        return 0;
    if (p[0] != ':' || n < 2 || n > 6)
        return IFD_EINVAL;
    unsigned v = 0;
    for (size_t i = 1; i < n; i++) {
        if (!isdigit((unsigned char)p[i]))
            return IFD_EINVAL;
        v = v * 10 + (unsigned)(p[i] - '0');
    }
    if (!v || v > 65535)
        return IFD_EINVAL;
    *port = (uint16_t)v;
    return 0;
}

/* The authority a (n bytes: host[:port], no userinfo) into *u. */
static int ifd__authority(ifd_imgurl_t *u, const char *a, size_t n, char *why, size_t whylen)
{
    size_t hn;
    if (n && a[0] == '[') {
        const char *close = memchr(a, ']', n);
        hn = close ? (size_t)(close - a) + 1 : n;
        if (!close || !ifd__v6_literal(a, hn, u->host, sizeof u->host)) {
            ifd_errbuf(why, whylen, "the host is not a valid IPv6 address");
            return IFD_EINVAL;
        }
        u->literal = true;
    } else {
        const char *colon = memchr(a, ':', n);
        hn = colon ? (size_t)(colon - a) : n;
        if (!ifd__valid_name(a, hn) || hn >= sizeof u->host) {
            ifd_errbuf(why, whylen, "the host is not a valid host name");
            return IFD_EINVAL;
        }
        for (size_t i = 0; i < hn; i++)
            u->host[i] = (char)tolower((unsigned char)a[i]);
        u->host[hn] = 0;
        u->literal = ifd__v4_literal(u->host);
    }
    if (ifd__port(a + hn, n - hn, &u->port)) {
        ifd_errbuf(why, whylen, "the port is not a number from 1 to 65535");
        return IFD_EINVAL;
    }
    return 0;
}

int ifd_imgurl_parse(ifd_imgurl_t *u, const char *url, size_t len, char *why, size_t whylen)
{
    memset(u, 0, sizeof *u);
    size_t skip;
    if (len >= 7 && !strncasecmp(url, "http://", 7))
        skip = 7;
    else if (len >= 8 && !strncasecmp(url, "https://", 8))
        skip = 8, u->https = true;
    else {
        ifd_errbuf(why, whylen, "only http:// and https:// URLs are fetched");
        return IFD_EINVAL;
    }
    if (len > IFD_IMGURL_MAX_URL) {
        ifd_errbuf(why, whylen, "the URL is longer than %d bytes", IFD_IMGURL_MAX_URL);
        return IFD_EINVAL;
    }
    for (size_t i = 0; i < len; i++) {
        if ((unsigned char)url[i] <= 0x20 || url[i] == 0x7f) {
            ifd_errbuf(why, whylen, "the URL holds a space or control character");
            return IFD_EINVAL;
        }
    }
    const char *a = url + skip;
    size_t n = 0; /* the authority ends at the path, query or fragment (no NUL in url) */
    while (skip + n < len && !strchr("/?#\\", a[n]))
        n++;
    if (memchr(a, '@', n)) {
        ifd_errbuf(why, whylen, "URLs with credentials (user@host) are not fetched");
        return IFD_EINVAL;
    }
    if (skip + n < len && url[skip + n] == '\\') {
        ifd_errbuf(why, whylen, "the URL holds a '\\'");
        return IFD_EINVAL;
    }
    return ifd__authority(u, a, n, why, whylen);
}

/* ---- the SSRF guard ---------------------------------------------------------------------- */

/* IPv4 a (host order) in a refused range. */
static bool ifd__v4_refused(uint32_t a)
{
    static const struct {
        uint32_t net, bits;
    } ranges[] = {
        {0x00000000, 8},  /* 0/8: "this network" */
        {0x0a000000, 8},  /* 10/8 */
        {0x64400000, 10}, /* 100.64/10: CGNAT */
        {0x7f000000, 8},  /* 127/8: loopback */
        {0xa9fe0000, 16}, /* 169.254/16: link-local (cloud metadata) */
        {0xac100000, 12}, /* 172.16/12 */
        {0xc0000000, 24}, /* 192.0.0/24: IETF protocol assignments */
        {0xc0a80000, 16}, /* 192.168/16 */
        {0xc6120000, 15}, /* 198.18/15: benchmarking */
        {0xe0000000, 4},  /* 224/4: multicast */
        {0xf0000000, 4},  /* 240/4: reserved, broadcast */
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        if ((a >> (32 - ranges[i].bits)) == (ranges[i].net >> (32 - ranges[i].bits)))
            return true;
    return false;
}

static bool ifd__v6_refused(const uint8_t *b)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};
    if (!memcmp(b, mapped, 12) || !memcmp(b, nat64, 12))
        return ifd__v4_refused((uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 |
                               (uint32_t)b[14] << 8 | b[15]);
    static const uint8_t zero[12] = {0};
    if (!memcmp(b, zero, 12)) /* ::, ::1 and the deprecated IPv4-compatible */
        return true;
    return (b[0] & 0xfe) == 0xfc ||                   /* fc00::/7: unique local */
           (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) || /* fe80::/10: link-local */
           (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) || /* fec0::/10: site-local */
           b[0] == 0xff;                              /* ff00::/8: multicast */
}

bool ifd_imgurl_addr_refused(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return ifd__v4_refused(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
    if (sa->sa_family == AF_INET6)
        return ifd__v6_refused(((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr);
    return true;
}

/* ---- redirects -------------------------------------------------------------------------- */

int ifd_imgurl_resolve(const char *base, const char *location, char **out)
{
    *out = NULL;
    CURLU *cu = curl_url();
    if (!cu)
        return IFD_ENOMEM;
    char *r = NULL;
    int rc = IFD_EINVAL;
    /* no CURLU_NON_SUPPORT_SCHEME: a scheme libcurl does not know is refused here */
    if (!curl_url_set(cu, CURLUPART_URL, base, 0) &&
        !curl_url_set(cu, CURLUPART_URL, location, 0) && !curl_url_get(cu, CURLUPART_URL, &r, 0)) {
        *out = strdup(r);
        rc = *out ? 0 : IFD_ENOMEM;
    }
    curl_free(r);
    curl_url_cleanup(cu);
    return rc;
}

int ifd_imgurl_check_redirect(const char *allow, const ifd_imgurl_t *from, const char *to,
                              ifd_imgurl_t *next, char *why, size_t whylen)
{
    char sub[160] = "";
    if (ifd_imgurl_parse(next, to, strlen(to), sub, sizeof sub)) {
        ifd_errbuf(why, whylen, "a redirect was refused: %s", sub);
        return IFD_EINVAL;
    }
    if (from->https && !next->https) {
        ifd_errbuf(why, whylen, "a redirect from https to http (to '%.100s') is not followed",
                   next->host);
        return IFD_EINVAL;
    }
    if (!ifd_imgurl_enabled(allow) || !ifd_imgurl_host_allowed(allow, next->host)) {
        ifd_errbuf(why, whylen,
                   "a redirect to host '%.100s' was refused: not one this server fetches "
                   "from (allow_image_urls)",
                   next->host);
        return IFD_EINVAL;
    }
    return 0;
}

/* ---- the fetch ---------------------------------------------------------------------------- */

/* One hop's transfer state. seen counts the bytes of every hop's body (a redirect's
 * included), so max_bytes bounds the whole chain. */
typedef struct {
    const ifd_imgurl_t *u;
    const ifd_imgurl_limits_t *lim;
    uint8_t *buf;
    size_t n, cap;
    uint64_t seen;
    bool keep; /* false on a redirect's body: counted, not kept */
    bool too_big, no_mem, refused;
    char refused_addr[INET6_ADDRSTRLEN];
} ifd__fetch_t;

static size_t ifd__write_cb(char *data, size_t size, size_t nmemb, void *arg)
{
    ifd__fetch_t *f = arg;
    size_t add = size * nmemb;
    if (f->seen + add > f->lim->max_bytes) {
        f->too_big = true;
        return 0; /* CURLE_WRITE_ERROR */
    }
    f->seen += add;
    if (!f->keep)
        return add;
    if (f->n + add > f->cap) {
        size_t cap = f->cap ? f->cap : 64 * 1024;
        while (cap < f->n + add)
            cap *= 2;
        uint8_t *p = realloc(f->buf, cap);
        if (!p) {
            f->no_mem = true;
            return 0;
        }
        f->buf = p;
        f->cap = cap;
    }
    memcpy(f->buf + f->n, data, add);
    f->n += add;
    return add;
}

/* Keeps the body of a 200 only: a redirect's body is counted and dropped. */
static size_t ifd__header_cb(char *data, size_t size, size_t nmemb, void *arg)
{
    ifd__fetch_t *f = arg;
    size_t len = size * nmemb;
    if (len > 9 && !strncmp(data, "HTTP/", 5)) { /* a status line */
        const char *sp = memchr(data, ' ', len);
        f->keep = sp && (size_t)(sp - data) + 4 <= len && !strncmp(sp + 1, "200", 3);
    }
    return len;
}

static int ifd__xfer_cb(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                        curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    const ifd__fetch_t *f = arg;
    return f->lim->cancel && atomic_load(f->lim->cancel) ? 1 : 0;
}

/* The SSRF guard: a host name's address is judged before its socket exists. */
static curl_socket_t ifd__open_cb(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
    ifd__fetch_t *f = arg;
    (void)purpose;
    if (!f->u->literal && ifd_imgurl_addr_refused(&a->addr)) {
        const void *ip = a->family == AF_INET6
                             ? (const void *)&((struct sockaddr_in6 *)&a->addr)->sin6_addr
                             : (const void *)&((struct sockaddr_in *)&a->addr)->sin_addr;
        if (!inet_ntop(a->family, ip, f->refused_addr, sizeof f->refused_addr))
            snprintf(f->refused_addr, sizeof f->refused_addr, "?");
        f->refused = true;
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

/* libcurl's own parse of url names u's host: no parser differential. */
static bool ifd__same_host(const ifd_imgurl_t *u, const char *url)
{
    CURLU *cu = curl_url();
    char *host = NULL;
    bool same = cu && !curl_url_set(cu, CURLUPART_URL, url, 0) &&
                !curl_url_get(cu, CURLUPART_HOST, &host, 0);
    if (same) {
        size_t n = strlen(host);
        if (n > 2 && host[0] == '[' && host[n - 1] == ']') {
            struct in6_addr a, b;
            host[n - 1] = 0;
            same = inet_pton(AF_INET6, host + 1, &a) == 1 &&
                   inet_pton(AF_INET6, u->host, &b) == 1 && !memcmp(&a, &b, sizeof a);
        } else {
            same = !strcasecmp(host, u->host);
        }
    }
    curl_free(host);
    curl_url_cleanup(cu);
    return same;
}

static double ifd__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One hop's options: left_s of the fetch's time, the bytes not yet seen. Redirects are never
 * followed by libcurl (the loop in ifd_imgurl_fetch judges each hop). */
static void ifd__options(CURL *h, const char *url, ifd__fetch_t *f, double left_s, char *errbuf)
{
    long total_ms = (long)(left_s * 1000.0);
    double c = left_s < IFD__CONNECT_TIMEOUT_S ? left_s : IFD__CONNECT_TIMEOUT_S;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_PROXY, ""); /* "" ignores the environment's proxies */
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, total_ms > 0 ? total_ms : 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(c * 1000.0) > 0 ? (long)(c * 1000.0) : 1L);
    curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)(f->lim->max_bytes - f->seen));
    curl_easy_setopt(h, CURLOPT_USERAGENT, "inferd");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ifd__write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, ifd__header_cb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, f);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, ifd__xfer_cb);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, f);
    curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, ifd__open_cb);
    curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, f);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
}

#define IFD__REDIRECT 1 /* ifd__hop's "the answer is a redirect" */

static bool ifd__redirect_status(long s)
{
    return s == 301 || s == 302 || s == 303 || s == 307 || s == 308;
}

/* The outcome of a finished transfer (rc: curl_easy_perform's) as an IFD code, or
 * IFD__REDIRECT with *location (curl's, owned by h) set. */
static int ifd__outcome(CURL *h, CURLcode rc, const ifd__fetch_t *f, const char *errbuf,
                        const char **location, char *why, size_t whylen)
{
    long status = 0;
    if (f->no_mem)
        return IFD_ENOMEM;
    if (f->too_big || rc == CURLE_FILESIZE_EXCEEDED)
        return IFD_ETOOBIG;
    if (rc == CURLE_ABORTED_BY_CALLBACK)
        return IFD_ECANCELED;
    if (rc == CURLE_OPERATION_TIMEDOUT) {
        ifd_errbuf(why, whylen, "the fetch took longer than %g s", f->lim->timeout_s);
        return IFD_ETIMEDOUT;
    }
    if (f->refused) {
        ifd_errbuf(why, whylen,
                   "the host %s resolves to %s, a loopback, private or link-local address, "
                   "which is fetched only when allow_image_urls lists it as an IP address",
                   f->u->host, f->refused_addr);
        return IFD_EFORMAT;
    }
    if (rc != CURLE_OK) {
        ifd_errbuf(why, whylen, "%s", *errbuf ? errbuf : curl_easy_strerror(rc));
        return IFD_EFORMAT;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (ifd__redirect_status(status)) {
        struct curl_header *loc = NULL;
        if (curl_easy_header(h, "Location", 0, CURLH_HEADER, -1, &loc) != CURLHE_OK ||
            !loc->value || !*loc->value) {
            ifd_errbuf(why, whylen, "the server answered HTTP %ld, a redirect without a Location",
                       status);
            return IFD_EFORMAT;
        }
        *location = loc->value;
        return IFD__REDIRECT;
    }
    if (status != 200) {
        ifd_errbuf(why, whylen, "the server answered HTTP %ld", status);
        return IFD_EFORMAT;
    }
    return 0;
}

/* One hop: GETs url (its host u) with what is left until deadline. 0 (the body in f), an IFD
 * code, or IFD__REDIRECT with *next the Location resolved against url (malloc'ed). */
static int ifd__hop(ifd__fetch_t *f, const char *url, double deadline, char **next, char *why,
                    size_t whylen)
{
    char errbuf[CURL_ERROR_SIZE] = "";
    const char *location = NULL;
    double left = deadline - ifd__now();
    if (left <= 0) {
        ifd_errbuf(why, whylen, "the fetch took longer than %g s", f->lim->timeout_s);
        return IFD_ETIMEDOUT;
    }
    if (!ifd__same_host(f->u, url)) {
        ifd_errbuf(why, whylen, "the URL's host cannot be read unambiguously");
        return IFD_EFORMAT;
    }
    CURL *h = curl_easy_init();
    if (!h)
        return IFD_ENOMEM;
    f->n = 0;
    f->keep = false;
    f->refused = false;
    ifd__options(h, url, f, left, errbuf);
    int rc = ifd__outcome(h, curl_easy_perform(h), f, errbuf, &location, why, whylen);
    if (rc == IFD__REDIRECT) {
        int r = ifd_imgurl_resolve(url, location, next);
        if (r) {
            ifd_errbuf(why, whylen, "a redirect was refused: its Location is not a URL");
            rc = r == IFD_ENOMEM ? r : IFD_EFORMAT;
        }
    }
    curl_easy_cleanup(h);
    return rc;
}

/* True when url was fetched already in this chain (urls[0..n)). */
static bool ifd__visited(char *const *urls, uint32_t n, const char *url)
{
    for (uint32_t i = 0; i < n; i++)
        if (!strcmp(urls[i], url))
            return true;
    return false;
}

int ifd_imgurl_fetch(const ifd_imgurl_t *u, const char *url, size_t len,
                     const ifd_imgurl_limits_t *lim, uint8_t **bytes, size_t *n, char *why,
                     size_t whylen)
{
    *bytes = NULL;
    *n = 0;
    uint32_t max_hops = lim->max_redirects > IFD_IMGURL_MAX_REDIRECTS ? IFD_IMGURL_MAX_REDIRECTS
                                                                      : lim->max_redirects;
    char *urls[IFD_IMGURL_MAX_REDIRECTS + 1] = {0};
    ifd_imgurl_t hop_u[2] = {*u};
    ifd__fetch_t f = {.u = &hop_u[0], .lim = lim};
    double deadline = ifd__now() + lim->timeout_s;
    uint32_t hops = 0;
    char *z = strndup(url, len);
    int rc = z ? ifd_imgurl_resolve(z, z, &urls[0]) : IFD_ENOMEM; /* curl's normal form */
    if (z && rc == IFD_EINVAL) { /* curl cannot read it: ifd__hop says so */
        urls[0] = z;
        z = NULL;
        rc = 0;
    }
    free(z);
    rc = rc ? rc : IFD__REDIRECT;
    while (rc == IFD__REDIRECT) {
        char *next = NULL;
        rc = ifd__hop(&f, urls[hops], deadline, &next, why, whylen);
        if (rc != IFD__REDIRECT)
            break;
        if (hops == max_hops) {
            if (max_hops)
                ifd_errbuf(why, whylen,
                           "more than %u redirects (image_url_max_redirects): not followed",
                           max_hops);
            else
                ifd_errbuf(why, whylen,
                           "the server answered a redirect: redirects are not followed "
                           "(image_url_max_redirects is 0; send the final URL)");
            rc = IFD_EFORMAT;
        } else if (ifd__visited(urls, hops + 1, next)) {
            ifd_errbuf(why, whylen, "the redirects loop (a URL of the chain again)");
            rc = IFD_EFORMAT;
        } else if (ifd_imgurl_check_redirect(lim->allow, f.u, next, &hop_u[(hops + 1) & 1], why,
                                             whylen)) {
            rc = IFD_EFORMAT;
        } else {
            f.u = &hop_u[(hops + 1) & 1];
            urls[++hops] = next;
            next = NULL;
            rc = IFD__REDIRECT;
        }
        free(next);
    }
    for (uint32_t i = 0; i <= hops; i++)
        free(urls[i]);
    if (rc) {
        free(f.buf);
        return rc;
    }
    *bytes = f.buf;
    *n = f.n;
    return 0;
}
