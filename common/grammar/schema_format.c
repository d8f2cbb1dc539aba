/*
 * schema_format.c — see schema_format.h. Each check is a small
 * recursive-descent reader over bytes (ASCII only: a non-ASCII byte is
 * never part of these formats, so "১" is not a digit); `at` walks a cursor
 * p over [p, e) and the checks succeed only when it ends at e.
 */
#include "schema_format.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p, *e;
} cur_t;

static bool digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool hexd(char c)
{
    return digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool alnum(char c)
{
    return digit(c) || alpha(c);
}

static bool in(char c, const char *set)
{
    return c && strchr(set, c) != NULL;
}

/* Exactly k digits at the cursor: their value in *v. */
static bool digits(cur_t *c, int k, int *v)
{
    *v = 0;
    for (int i = 0; i < k; i++, c->p++) {
        if (c->p >= c->e || !digit(*c->p))
            return false;
        *v = *v * 10 + (*c->p - '0');
    }
    return true;
}

static bool lit(cur_t *c, char ch)
{
    if (c->p >= c->e || *c->p != ch)
        return false;
    c->p++;
    return true;
}

/* One of two letters (RFC 3339's case-insensitive T and Z). */
static bool lit2(cur_t *c, char a, char b)
{
    return lit(c, a) || lit(c, b);
}

/* ---- RFC 3339 ---- */

static int month_days(int y, int m)
{
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : days[m - 1];
}

static bool full_date(cur_t *c)
{
    int y, m, d;
    return digits(c, 4, &y) && lit(c, '-') && digits(c, 2, &m) && lit(c, '-') && digits(c, 2, &d) &&
           m >= 1 && m <= 12 && d >= 1 && d <= month_days(y, m);
}

/* full-time: a leap second only where its UTC time is 23:59:60. */
static bool full_time(cur_t *c)
{
    int h, m, s, oh = 0, om = 0, sign = 0;
    if (!digits(c, 2, &h) || !lit(c, ':') || !digits(c, 2, &m) || !lit(c, ':') ||
        !digits(c, 2, &s) || h > 23 || m > 59 || s > 60)
        return false;
    if (lit(c, '.')) {
        if (c->p >= c->e || !digit(*c->p))
            return false;
        while (c->p < c->e && digit(*c->p))
            c->p++;
    }
    if (!lit2(c, 'Z', 'z')) {
        sign = lit(c, '+') ? 1 : lit(c, '-') ? -1 : 0;
        if (!sign || !digits(c, 2, &oh) || !lit(c, ':') || !digits(c, 2, &om) || oh > 23 || om > 59)
            return false;
    }
    int utc = ((h * 60 + m - sign * (oh * 60 + om)) % 1440 + 1440) % 1440;
    return s < 60 || utc == 23 * 60 + 59;
}

static bool done(const cur_t *c)
{
    return c->p == c->e;
}

static bool f_date(const char *s, size_t n)
{
    cur_t c = {s, s + n};
    return full_date(&c) && done(&c);
}

static bool f_time(const char *s, size_t n)
{
    cur_t c = {s, s + n};
    return full_time(&c) && done(&c);
}

static bool f_date_time(const char *s, size_t n)
{
    cur_t c = {s, s + n};
    return full_date(&c) && lit2(&c, 'T', 't') && full_time(&c) && done(&c);
}

/* A run of "<digits><unit>" items whose units follow each other in units
 * ("YMD", "HMS"), starting at any of them: RFC 3339 Appendix A's dur-year
 * [dur-month [dur-day]] chains. The number of items in *n. */
static bool dur_run(cur_t *c, const char *units, int *n)
{
    int last = -1;
    *n = 0;
    while (c->p < c->e && digit(*c->p)) {
        while (c->p < c->e && digit(*c->p))
            c->p++;
        const char *u = c->p < c->e && *c->p ? strchr(units, *c->p) : NULL;
        if (!u || (last >= 0 && u - units != last + 1))
            return false;
        last = (int)(u - units);
        c->p++;
        ++*n;
    }
    return true;
}

static bool f_duration(const char *s, size_t n)
{
    cur_t c = {s, s + n};
    int nd, nt;
    if (!lit(&c, 'P'))
        return false;
    const char *at = c.p;
    while (c.p < c.e && digit(*c.p))
        c.p++;
    if (c.p > at && lit(&c, 'W')) /* dur-week stands alone */
        return done(&c);
    c.p = at;
    if (!dur_run(&c, "YMD", &nd))
        return false;
    if (!lit(&c, 'T'))
        return nd > 0 && done(&c);
    return dur_run(&c, "HMS", &nt) && nt > 0 && done(&c);
}

/* ---- addresses ---- */

/* dec-octet: 0-255 without leading zeros. */
static bool dec_octet(cur_t *c)
{
    const char *at = c->p;
    int v = 0;
    while (c->p < c->e && digit(*c->p) && c->p - at < 3)
        v = v * 10 + (*c->p++ - '0');
    size_t k = (size_t)(c->p - at);
    return k && v <= 255 && (k == 1 || *at != '0');
}

static bool ipv4(cur_t *c)
{
    for (int i = 0; i < 4; i++)
        if ((i && !lit(c, '.')) || !dec_octet(c))
            return false;
    return true;
}

static bool f_ipv4(const char *s, size_t n)
{
    cur_t c = {s, s + n};
    return ipv4(&c) && done(&c);
}

/* RFC 4291 section 2.2: eight h16 groups, one "::" standing for one or
 * more zero groups, the last 32 bits optionally as an IPv4 address. */
static bool ipv6_text(const char *s, size_t n)
{
    cur_t c = {s, s + n};
    int groups = 0;
    bool gap = false;
    if (n >= 2 && s[0] == ':' && s[1] == ':') {
        gap = true;
        c.p += 2;
    }
    while (c.p < c.e) {
        const char *end = memchr(c.p, ':', (size_t)(c.e - c.p));
        const char *seg_end = end ? end : c.e;
        if (memchr(c.p, '.', (size_t)(seg_end - c.p))) { /* the IPv4 tail */
            cur_t v = {c.p, seg_end};
            if (end || !ipv4(&v) || !done(&v))
                return false;
            groups += 2;
            break;
        }
        size_t k = (size_t)(seg_end - c.p);
        if (k < 1 || k > 4)
            return false;
        for (size_t i = 0; i < k; i++)
            if (!hexd(c.p[i]))
                return false;
        groups++;
        if (!end)
            break;
        c.p = end + 1;
        if (c.p < c.e && *c.p == ':') {
            if (gap)
                return false;
            gap = true;
            c.p++;
        } else if (c.p == c.e) {
            return false; /* a trailing single colon */
        }
    }
    return gap ? groups <= 7 : groups == 8;
}

static bool f_ipv6(const char *s, size_t n)
{
    return ipv6_text(s, n);
}

/* RFC 3492 Punycode: whether the part of an A-label after "xn--" decodes
 * to a string with at least one code point beyond ASCII. */
static bool punycode(const char *s, size_t n)
{
    enum { BASE = 36, TMIN = 1, TMAX = 26, SKEW = 38, DAMP = 700 };
    const char *dash = NULL;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '-')
            dash = s + i;
    size_t out = dash ? (size_t)(dash - s) : 0;
    const char *p = dash ? dash + 1 : s, *e = s + n;
    if (p == e)
        return false; /* nothing encoded: not an A-label */
    uint32_t cp = 128, i = 0, bias = 72;
    bool first = true;
    while (p < e) {
        uint32_t old = i, w = 1;
        for (uint32_t k = BASE;; k += BASE) {
            if (p == e)
                return false;
            char ch = *p++;
            uint32_t d = digit(ch)                ? (uint32_t)(ch - '0' + 26)
                         : ch >= 'a' && ch <= 'z' ? (uint32_t)(ch - 'a')
                         : ch >= 'A' && ch <= 'Z' ? (uint32_t)(ch - 'A')
                                                  : BASE;
            if (d >= BASE || d > (UINT32_MAX - i) / w)
                return false;
            i += d * w;
            uint32_t t = k <= bias ? TMIN : k >= bias + TMAX ? TMAX : k - bias;
            if (d < t)
                break;
            if (w > UINT32_MAX / (BASE - t))
                return false;
            w *= BASE - t;
        }
        out++;
        uint32_t delta = first ? (i - old) / DAMP : (i - old) / 2;
        first = false;
        delta += delta / (uint32_t)out;
        uint32_t k = 0;
        for (; delta > ((BASE - TMIN) * TMAX) / 2; k += BASE)
            delta /= BASE - TMIN;
        bias = k + (BASE * delta) / (delta + SKEW);
        if (i / out > 0x10FFFF - cp)
            return false;
        cp += i / (uint32_t)out;
        i %= (uint32_t)out;
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i++;
    }
    return true;
}

/* A host name label: letters, digits and hyphens, not at either end, and
 * "--" in its third and fourth places only as an A-label's "xn--". */
static bool label(const char *s, size_t n)
{
    if (n < 1 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!alnum(s[i]) && s[i] != '-')
            return false;
    if (n < 4 || s[2] != '-' || s[3] != '-')
        return true;
    return (s[0] | 0x20) == 'x' && (s[1] | 0x20) == 'n' && punycode(s + 4, n - 4);
}

static bool f_hostname(const char *s, size_t n)
{
    if (n < 1 || n > 253)
        return false;
    for (const char *p = s, *e = s + n;;) {
        const char *dot = memchr(p, '.', (size_t)(e - p));
        if (!label(p, (size_t)((dot ? dot : e) - p)))
            return false;
        if (!dot)
            return true;
        p = dot + 1;
    }
}

/* RFC 5322 addr-spec: a dot-atom or quoted local part (at most 64 bytes),
 * "@", a host name or an address literal ([1.2.3.4], [IPv6:…]). */
static bool f_email(const char *s, size_t n)
{
    static const char atext[] = "!#$%&'*+-/=?^_`{|}~";
    const char *p = s, *e = s + n;
    if (p < e && *p == '"') {
        for (p++; p < e && *p != '"'; p++) {
            if (*p == '\\')
                p++;
            if (p >= e || *p < 32 || *p > 126)
                return false;
        }
        if (p++ >= e)
            return false;
    } else {
        bool atom = false; /* inside an atom: a dot may follow */
        for (; p < e && *p != '@'; p++) {
            if (*p == '.' && atom)
                atom = false;
            else if (alnum(*p) || in(*p, atext))
                atom = true;
            else
                return false;
        }
        if (!atom)
            return false; /* empty, or a dot at an end or twice */
    }
    if (p - s > 64 || p >= e || *p++ != '@')
        return false;
    size_t dn = (size_t)(e - p);
    if (dn >= 2 && p[0] == '[' && e[-1] == ']') {
        if (dn > 7 && memcmp(p + 1, "IPv6:", 5) == 0)
            return ipv6_text(p + 6, dn - 7);
        return f_ipv4(p + 1, dn - 2);
    }
    return f_hostname(p, dn);
}

/* One UTF-8 code point at s[0..n): its length (0: not valid UTF-8) and value. */
static size_t utf8_cp(const char *s, size_t n, uint32_t *cp)
{
    unsigned char b = (unsigned char)s[0];
    size_t len = b < 0x80 ? 1 : b >= 0xf0 && b < 0xf5 ? 4 : b >= 0xe0 ? 3 : b >= 0xc2 ? 2 : 0;
    if (!len || len > n)
        return 0;
    uint32_t v = len == 1 ? b : b & (0x7f >> len);
    for (size_t j = 1; j < len; j++) {
        unsigned char t = (unsigned char)s[j];
        if ((t & 0xc0) != 0x80)
            return 0;
        v = v << 6 | (t & 0x3f);
    }
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < least[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0; /* overlong, beyond Unicode, a surrogate */
    *cp = v;
    return len;
}

/* RFC 6531's addr-spec: RFC 5322's, with any non-ASCII character (RFC
 * 6532's UTF8-non-ascii) in the local part's atoms and quoted strings. The
 * domain must be ASCII (a host name with A-labels, or an address literal):
 * a U-label's validity is IDNA2008's tables, not here, so such an address
 * fails the check (the grammar never writes one). */
static bool f_idn_email(const char *s, size_t n)
{
    const char *at = NULL;
    /* the last '@' outside a quoted local part ends it */
    for (size_t i = 0, q = 0; i < n; i++) {
        if (s[i] == '\\' && q)
            i++;
        else if (s[i] == '"')
            q = !q;
        else if (s[i] == '@' && !q)
            at = s + i;
    }
    if (!at || at - s > 64)
        return false;
    /* the local part with each non-ASCII character read as 'a', checked as email's */
    char m[80];
    size_t k = 0;
    for (const char *p = s; p < at;) {
        uint32_t cp;
        size_t len = utf8_cp(p, (size_t)(at - p), &cp);
        if (!len)
            return false;
        m[k++] = len == 1 ? *p : 'a';
        p += len;
    }
    for (const char *p = at; p < s + n; p++) {
        if ((unsigned char)*p >= 0x80)
            return false;
    }
    size_t dn = (size_t)(s + n - at);
    char *full = malloc(k + dn);
    if (!full)
        return false;
    memcpy(full, m, k);
    memcpy(full + k, at, dn);
    bool ok = f_email(full, k + dn);
    free(full);
    return ok;
}

/* IDNA2008 host names: the ASCII ones (LDH labels and A-labels) by
 * f_hostname's rules; one holding a U-label fails (its validity is
 * Unicode's tables, not here; the grammar writes ASCII labels). */
static bool f_idn_hostname(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80)
            return false;
    return f_hostname(s, n);
}

/* RFC 6570's ucschar / iprivate (a literal may hold either). */
static bool ucs_or_private(uint32_t cp)
{
    return (cp >= 0xa0 && cp <= 0xd7ff) || (cp >= 0xe000 && cp <= 0xfdcf) ||
           (cp >= 0xfdf0 && cp <= 0xffef) ||
           (cp >= 0x10000 && cp <= 0x10fffd && (cp & 0xfffe) != 0xfffe);
}

static bool pct(const char *p, const char *e)
{
    return e - p >= 3 && p[0] == '%' && hexd(p[1]) && hexd(p[2]);
}

/* RFC 6570 (level 4): literals and expressions "{" [operator] varspec
 * *("," varspec) "}", varspec = varname [":" 1*4DIGIT (no leading 0) | "*"],
 * varname = varchar *(["."] varchar), varchar = ALPHA / DIGIT / "_" / pct. */
static bool f_uri_template(const char *s, size_t n)
{
    const char *p = s, *e = s + n;
    while (p < e) {
        if (*p == '{') {
            p++;
            if (p < e && in(*p, "+#./;?&=,!@|"))
                p++;
            for (;;) {
                bool dot = true; /* a '.' may not lead, end or double */
                const char *v = p;
                while (p < e) {
                    if (alnum(*p) || *p == '_')
                        p++, dot = false;
                    else if (pct(p, e))
                        p += 3, dot = false;
                    else if (*p == '.' && !dot)
                        p++, dot = true;
                    else
                        break;
                }
                if (p == v || dot)
                    return false;
                if (p < e && *p == '*') {
                    p++;
                } else if (p < e && *p == ':') {
                    const char *d = ++p;
                    while (p < e && digit(*p) && p - d < 4)
                        p++;
                    if (p == d || *d == '0')
                        return false;
                }
                if (p < e && *p == ',') {
                    p++;
                    continue;
                }
                if (p < e && *p == '}') {
                    p++;
                    break;
                }
                return false;
            }
            continue;
        }
        if (pct(p, e)) {
            p += 3;
            continue;
        }
        uint32_t cp;
        size_t len = utf8_cp(p, (size_t)(e - p), &cp);
        if (!len)
            return false;
        /* (the apostrophe too: RFC 6570's erratum 6937, as JSON-Schema-Test-Suite) */
        if (len == 1 ? !(cp > 0x20 && cp < 0x7f && !in((char)cp, "\"%<>\\^`{|}"))
                     : !ucs_or_private(cp))
            return false;
        p += len;
    }
    return true;
}

static bool f_uuid(const char *s, size_t n)
{
    if (n != 36)
        return false;
    for (size_t i = 0; i < n; i++)
        if (i == 8 || i == 13 || i == 18 || i == 23 ? s[i] != '-' : !hexd(s[i]))
            return false;
    return true;
}

/* ---- RFC 3986 ---- */

/* unreserved / pct-encoded / sub-delims, and the characters in more. */
static bool uchars(const char *p, const char *e, const char *more)
{
    static const char plain[] = "-._~!$&'()*+,;=";
    for (; p < e; p++) {
        if (*p == '%') {
            if (e - p < 3 || !hexd(p[1]) || !hexd(p[2]))
                return false;
            p += 2;
        } else if (!alnum(*p) && !in(*p, plain) && !in(*p, more)) {
            return false;
        }
    }
    return true;
}

/* authority = [ userinfo "@" ] host [ ":" port ] */
static bool authority(const char *p, const char *e)
{
    const char *at = memchr(p, '@', (size_t)(e - p));
    if (at) {
        if (!uchars(p, at, ":"))
            return false;
        p = at + 1;
    }
    const char *host_end;
    if (p < e && *p == '[') {
        const char *close = memchr(p, ']', (size_t)(e - p));
        if (!close)
            return false;
        const char *a = p + 1;
        bool future = close - a > 1 && (*a | 0x20) == 'v';
        if (future) { /* IPvFuture: "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" ) */
            const char *d = memchr(a, '.', (size_t)(close - a));
            if (!d || d == a + 1 || d + 1 == close || !uchars(d + 1, close, ":"))
                return false;
            for (const char *h = a + 1; h < d; h++)
                if (!hexd(*h))
                    return false;
        } else if (!ipv6_text(a, (size_t)(close - a))) {
            return false;
        }
        host_end = close + 1;
    } else {
        host_end = memchr(p, ':', (size_t)(e - p));
        if (!host_end)
            host_end = e;
        if (!uchars(p, host_end, ""))
            return false;
    }
    if (host_end == e)
        return true;
    if (*host_end != ':')
        return false;
    for (const char *d = host_end + 1; d < e; d++)
        if (!digit(*d))
            return false;
    return true;
}

/* hier-part / relative-part, then [ "?" query ] [ "#" fragment ]. noscheme:
 * a relative reference, whose first path segment holds no ':'. */
static bool uri_rest(const char *p, const char *e, bool noscheme)
{
    const char *hash = memchr(p, '#', (size_t)(e - p));
    if (hash && !uchars(hash + 1, e, ":@/?"))
        return false;
    const char *end = hash ? hash : e;
    const char *q = memchr(p, '?', (size_t)(end - p));
    if (q && !uchars(q + 1, end, ":@/?"))
        return false;
    end = q ? q : end;
    if (end - p >= 2 && p[0] == '/' && p[1] == '/') {
        const char *a = p + 2, *slash = memchr(a, '/', (size_t)(end - a));
        if (!authority(a, slash ? slash : end))
            return false;
        p = slash ? slash : end;
    } else if (noscheme) {
        const char *slash = memchr(p, '/', (size_t)(end - p));
        if (memchr(p, ':', (size_t)((slash ? slash : end) - p)))
            return false;
    }
    return uchars(p, end, ":@/");
}

/* The scheme's end (its ':') when s starts with one, else NULL. */
static const char *scheme(const char *s, const char *e)
{
    if (s == e || !alpha(*s))
        return NULL;
    const char *p = s + 1;
    while (p < e && (alnum(*p) || in(*p, "+-.")))
        p++;
    return p < e && *p == ':' ? p : NULL;
}

static bool f_uri(const char *s, size_t n)
{
    const char *colon = scheme(s, s + n);
    return colon && uri_rest(colon + 1, s + n, false);
}

static bool f_uri_reference(const char *s, size_t n)
{
    return f_uri(s, n) || uri_rest(s, s + n, true);
}

/* RFC 3987's IRIs: RFC 3986's URIs with ucschar wherever unreserved goes
 * and iprivate in the query. Each such code point is read as the letter
 * 'a' (an unreserved character) and the result checked as a uri; a
 * private-use one counts only after a '?' (in the query or the fragment:
 * a little wider than the RFC, which keeps it out of the fragment). */
static bool iri_as_uri(const char *s, size_t n, bool (*uri)(const char *, size_t))
{
    char *m = malloc(n ? n : 1);
    if (!m)
        return false;
    size_t k = 0;
    bool query = false, ok = true;
    for (size_t i = 0; i < n && ok;) {
        unsigned char b = (unsigned char)s[i];
        if (b < 0x80) {
            query |= b == '?';
            m[k++] = (char)b;
            i++;
            continue;
        }
        int len = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 0;
        if (!len || i + (size_t)len > n) {
            ok = false;
            break;
        }
        uint32_t cp = b & (0x7f >> len);
        for (int j = 1; j < len; j++) {
            unsigned char t = (unsigned char)s[i + (size_t)j];
            ok &= (t & 0xc0) == 0x80;
            cp = cp << 6 | (t & 0x3f);
        }
        bool ucs = (cp >= 0xa0 && cp <= 0xd7ff) || (cp >= 0xf900 && cp <= 0xfdcf) ||
                   (cp >= 0xfdf0 && cp <= 0xffef) ||
                   (cp >= 0x10000 && cp <= 0xefffd && (cp & 0xfffe) != 0xfffe);
        bool priv = (cp >= 0xe000 && cp <= 0xf8ff) || (cp >= 0xf0000 && cp <= 0xffffd) ||
                    (cp >= 0x100000 && cp <= 0x10fffd);
        ok &= ucs || (priv && query);
        m[k++] = 'a';
        i += (size_t)len;
    }
    ok = ok && uri(m, k);
    free(m);
    return ok;
}

static bool f_iri(const char *s, size_t n)
{
    return iri_as_uri(s, n, f_uri);
}

static bool f_iri_reference(const char *s, size_t n)
{
    return iri_as_uri(s, n, f_uri_reference);
}

/* RFC 6901: "" or ("/" reference-token)*, "~" only as "~0" or "~1". */
static bool json_pointer(const char *s, const char *e)
{
    if (s < e && *s != '/')
        return false;
    for (const char *p = s; p < e; p++)
        if (*p == '~' && (p + 1 == e || (p[1] != '0' && p[1] != '1')))
            return false;
    return true;
}

static bool f_json_pointer(const char *s, size_t n)
{
    return json_pointer(s, s + n);
}

/* draft-handrews-relative-json-pointer-01: a non-negative integer (no
 * leading zero), then "#" or a JSON pointer. */
static bool f_relative_json_pointer(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && digit(s[i]))
        i++;
    if (i == 0 || (s[0] == '0' && i > 1))
        return false;
    return (i + 1 == n && s[i] == '#') || json_pointer(s + i, s + n);
}

/* A regular expression: one PCRE2 compiles (UTF mode), PCRE2 standing in
 * for ECMA-262's grammar (they differ in corners: lookbehind, \p names). */
static bool f_regex(const char *s, size_t n)
{
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)s, n, PCRE2_UTF, &err, &off, NULL);
    pcre2_code_free(re);
    return re != NULL;
}

/* ---- the table ---- */

static const ifd_schema_format_t FORMATS[] = {
    {"date", "jdate", 10, 10, f_date},
    {"time", "jtime", 9, 21, f_time},
    {"date-time", "jdatetime", 20, 32, f_date_time},
    {"uuid", "juuid", 36, 36, f_uuid},
    {"duration", "jduration", 3, 62, f_duration},
    {"ipv4", "jipv4", 7, 15, f_ipv4},
    {"ipv6", "jipv6", 2, 45, f_ipv6},
    {"hostname", "jhostname", 1, 216, f_hostname},
    {"email", "jemail", 5, 279, f_email},
    {"uri", "juri", 4, -1, f_uri},
    {"uri-reference", "juriref", 0, -1, f_uri_reference},
    /* written as their ASCII subsets: a uri is an iri, a pointer of plain tokens a
     * pointer, a string of letters, digits, spaces, '_' and '-' a regex */
    {"iri", "juri", 4, -1, f_iri},
    {"iri-reference", "juriref", 0, -1, f_iri_reference},
    {"json-pointer", "jjsonptr", 0, -1, f_json_pointer},
    {"relative-json-pointer", "jreljsonptr", 1, -1, f_relative_json_pointer},
    {"regex", "jregex", 0, -1, f_regex},
    /* idn-email: email's rule with non-ASCII letters in the local part; idn-hostname:
     * the hostname rule (an ASCII host name is one); uri-template: RFC 6570 whole */
    {"idn-email", "jidnemail", 5, 279, f_idn_email},
    {"idn-hostname", "jhostname", 1, 216, f_idn_hostname},
    {"uri-template", "juritpl", 0, -1, f_uri_template},
};

const ifd_schema_format_t *ifd_schema_format_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof FORMATS / sizeof FORMATS[0]; i++)
        if (strcmp(name, FORMATS[i].name) == 0)
            return &FORMATS[i];
    return NULL;
}
