/*
 * jinja_lex.c — the Jinja lexer (jinja_lex.h): the segment pass with Hugging
 * Face's whitespace settings, and the tag tokenizer with Python's string
 * escapes. The parser (jinja_parse.c) drives both.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "jinja_impl.h"
#include "jinja_lex.h"
#include "utf8.h"

int ifd__jerr_record(int *first, char *err, size_t errlen, int line, int rc, const char *fmt,
                     va_list ap)
{
    if (*first)
        return *first;
    *first = rc;
    if (err && errlen) {
        int k = snprintf(err, errlen, "line %d: ", line);
        if (k >= 0 && (size_t)k < errlen)
            vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
    }
    return rc;
}

int ifd__jparse_err(P *p, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rc = ifd__jerr_record(&p->rc, p->err, p->errlen, p->line, rc, fmt, ap);
    va_end(ap);
    return rc;
}

static int seg_push(P *p, int kind, const char *s, size_t n, int line)
{
    seg_t *ns = ifd_grow(p->segs, p->nseg, &p->cap, sizeof *ns, 64);
    if (!ns)
        return ifd__jparse_err(p, IFD_ENOMEM, "out of memory");
    p->segs = ns;
    p->segs[p->nseg++] = (seg_t){kind, s, n, line};
    return 0;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* At a \r in s[0..n): appends \n to d, steps *i over a \r\n pair and
 * returns true (Jinja normalises source newlines, in data and literals). */
static bool put_newline(const char *s, size_t n, size_t *i, char *d, size_t *o)
{
    if (s[*i] != '\r')
        return false;
    d[(*o)++] = '\n';
    if (*i + 1 < n && s[*i + 1] == '\n')
        (*i)++;
    return true;
}

/* Data text: \r\n and \r become \n; copied into the arena. */
static int push_data(P *p, const char *s, size_t n, int line)
{
    if (n == 0)
        return 0;
    char *d = ifd_arena_alloc(p->A, n + 1);
    if (!d)
        return ifd__jparse_err(p, IFD_ENOMEM, "out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (!put_newline(s, n, &i, d, &o))
            d[o++] = s[i];
    }
    d[o] = '\0';
    return seg_push(p, SEG_DATA, d, o, line);
}

static int count_lines(const char *s, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == '\n';
    return k;
}

/* Finds the end delimiter `c` + '}' of a tag starting at i, skipping string
 * literals unless `plain` (comments). Returns its index or (size_t)-1. */
static size_t find_tag_end(const char *s, size_t len, size_t i, char c, bool plain)
{
    while (i + 1 < len) {
        char ch = s[i];
        if (!plain && (ch == '\'' || ch == '"')) {
            i++;
            while (i < len && s[i] != ch) {
                if (s[i] == '\\')
                    i++;
                i++;
            }
            i++;
            continue;
        }
        if (ch == c && s[i + 1] == '}')
            return i;
        i++;
    }
    return (size_t)-1;
}

static bool inner_is(const char *s, size_t n, const char *word)
{
    while (n && is_ws(*s))
        s++, n--;
    while (n && is_ws(s[n - 1]))
        n--;
    return n == strlen(word) && memcmp(s, word, n) == 0;
}

int ifd__jlex_segment(P *p, const char *src, size_t len)
{
    if (len && src[len - 1] == '\n') {
        len--;
        if (len && src[len - 1] == '\r')
            len--;
    }
    size_t pos = 0, data = 0;
    int line = 1;
    bool line_starting = true, lstrip_next = false;
    for (;;) {
        size_t t = pos;
        while (t + 1 < len &&
               !(src[t] == '{' && (src[t + 1] == '{' || src[t + 1] == '%' || src[t + 1] == '#')))
            t++;
        bool eof = t + 1 >= len;
        size_t dend = eof ? len : t;
        /* the data before the tag, with whitespace control applied */
        size_t a = data, e = dend;
        if (lstrip_next) {
            size_t a0 = a;
            while (a < e && is_ws(src[a]))
                a++;
            if (a > a0)
                line_starting = src[a - 1] == '\n';
            lstrip_next = false;
        }
        char kind = eof ? 0 : src[t + 1];
        char lmod = eof || t + 2 >= len ? 0 : src[t + 2];
        if (!eof && lmod == '-') {
            while (e > a && is_ws(src[e - 1]))
                e--;
        } else if (!eof && kind != '{' && lmod != '+') {
            size_t l = e;
            while (l > a && src[l - 1] != '\n')
                l--;
            bool nl = l > a || (l == a && a > data && src[a - 1] == '\n');
            if (nl || line_starting) {
                size_t k = l;
                while (k < e && (src[k] == ' ' || src[k] == '\t'))
                    k++;
                if (k == e)
                    e = l;
            }
        }
        if (push_data(p, src + a, e - a, line + count_lines(src + data, a - data)))
            return p->rc;
        if (eof)
            return 0;
        line += count_lines(src + data, t - data);
        p->line = line;
        size_t in = t + 2 + (lmod == '-' || lmod == '+');
        char endc = kind == '{' ? '}' : kind;
        size_t end = find_tag_end(src, len, in, endc, kind == '#');
        if (end == (size_t)-1)
            return ifd__jparse_err(p, IFD_EFORMAT, "unterminated '{%c' tag", kind);
        size_t iend = end;
        char rmod = end > in ? src[end - 1] : 0;
        if (rmod == '-' || (rmod == '+' && kind != '{'))
            iend--;
        if (kind == '%' && inner_is(src + in, iend - in, "raw")) {
            /* {% raw %} … {% endraw %}: verbatim up to the end tag */
            size_t q = end + 2, rs = q;
            for (;;) {
                const char *m = q < len ? strstr(src + q, "{%") : NULL;
                if (!m || (size_t)(m - src) >= len)
                    return ifd__jparse_err(p, IFD_EFORMAT, "missing endraw");
                size_t mi = (size_t)(m - src) + 2 + (m[2] == '-' || m[2] == '+');
                size_t me = find_tag_end(src, len, mi, '%', true);
                if (me == (size_t)-1)
                    return ifd__jparse_err(p, IFD_EFORMAT, "missing endraw");
                size_t mie = src[me - 1] == '-' ? me - 1 : me;
                if (inner_is(src + mi, mie - mi, "endraw")) {
                    size_t re = (size_t)(m - src);
                    if (m[2] == '-')
                        while (re > rs && is_ws(src[re - 1]))
                            re--;
                    if (push_data(p, src + rs, re - rs, line))
                        return p->rc;
                    end = me;
                    rmod = src[me - 1];
                    break;
                }
                q = me + 2;
            }
        } else if (kind != '#') {
            if (seg_push(p, kind == '{' ? SEG_VAR : SEG_BLOCK, src + in, iend - in, line))
                return p->rc;
        }
        line += count_lines(src + t, end + 2 - t);
        pos = end + 2;
        line_starting = false;
        if (rmod == '-') {
            lstrip_next = true;
        } else if (kind != '{' && rmod != '+' && pos < len && src[pos] == '\n') {
            pos++;
            line++;
            line_starting = true;
        }
        data = pos;
    }
}

/* ---- tokens ---------------------------------------------------------------------------- */

static int tok_push(P *p, tok_t t)
{
    tok_t *nt = ifd_grow(p->toks, p->nt, &p->tcap, sizeof *nt, 32);
    if (!nt)
        return ifd__jparse_err(p, IFD_ENOMEM, "out of memory");
    p->toks = nt;
    p->toks[p->nt++] = t;
    return 0;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Python's one-character escapes and what they stand for; \x, \u and \U
 * take 2, 4 and 8 hex digits. */
static const char ifd__simple_escapes[] = "ntrabfv\\'\"";
static const char ifd__simple_values[] = "\n\t\r\a\b\f\v\\'\"";
static const int ifd__hex_digits[] = {2, 4, 8};

/* A string literal s[0..n) without quotes, decoded as Python's
 * unicode-escape does (unknown escapes stay as written). */
static int decode_string(P *p, const char *s, size_t n, tok_t *t)
{
    char *d = ifd_arena_alloc(p->A, n + 1);
    if (!d)
        return ifd__jparse_err(p, IFD_ENOMEM, "out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (put_newline(s, n, &i, d, &o))
            continue;
        if (s[i] != '\\' || i + 1 >= n) {
            d[o++] = s[i];
            continue;
        }
        char c = s[++i];
        const char *simple = c ? strchr(ifd__simple_escapes, c) : NULL;
        const char *hex = c ? strchr("xuU", c) : NULL;
        int digits = hex ? ifd__hex_digits[hex - "xuU"] : 0;
        if (simple) {
            d[o++] = ifd__simple_values[simple - ifd__simple_escapes];
        } else if (c == '\n') { /* a backslash-newline continues the line */
        } else if (c >= '0' && c <= '7') {
            uint32_t v = 0;
            int k = 0;
            while (k < 3 && i < n && s[i] >= '0' && s[i] <= '7') {
                v = v * 8 + (uint32_t)(s[i] - '0');
                i++, k++;
            }
            i--;
            o += ifd_utf8_put((uint8_t *)d + o, v);
        } else if (!digits) {
            d[o++] = '\\';
            d[o++] = c;
        }
        if (digits) {
            uint32_t v = 0;
            if (i + (size_t)digits >= n)
                return ifd__jparse_err(p, IFD_EFORMAT, "truncated \\%c escape", c);
            for (int k = 1; k <= digits; k++) {
                int h = hexval(s[i + (size_t)k]);
                if (h < 0)
                    return ifd__jparse_err(p, IFD_EFORMAT, "bad \\%c escape", c);
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF)
                return ifd__jparse_err(p, IFD_EFORMAT, "bad \\%c escape", c);
            i += (size_t)digits;
            o += ifd_utf8_put((uint8_t *)d + o, v);
        }
    }
    d[o] = '\0';
    t->s = d;
    t->n = o;
    return 0;
}

static const char *const ifd__ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                       "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                       "]",  "{",  "}",  ",",  ".",  ":",  "|", NULL};

int ifd__jlex_tokenize(P *p, const char *s, size_t n)
{
    p->nt = p->ti = 0;
    size_t i = 0;
    while (i < n) {
        char c = s[i];
        if (is_ws(c)) {
            i++;
            continue;
        }
        tok_t t = {0};
        if (isalpha((unsigned char)c) || c == '_') {
            size_t b = i;
            while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '_'))
                i++;
            t.kind = TK_NAME;
            t.s = s + b;
            t.n = i - b;
        } else if (isdigit((unsigned char)c)) {
            char buf[128];
            size_t o = 0, b = i;
            bool fl = false;
            while (i < n && (isdigit((unsigned char)s[i]) || s[i] == '_')) {
                if (s[i] != '_' && o < sizeof buf - 1)
                    buf[o++] = s[i];
                i++;
            }
            if (i + 1 < n && s[i] == '.' && isdigit((unsigned char)s[i + 1])) {
                fl = true;
                buf[o++] = s[i++];
                while (i < n && (isdigit((unsigned char)s[i]) || s[i] == '_')) {
                    if (s[i] != '_' && o < sizeof buf - 1)
                        buf[o++] = s[i];
                    i++;
                }
            }
            if (i < n && (s[i] == 'e' || s[i] == 'E')) {
                size_t k = i + 1;
                if (k < n && (s[k] == '+' || s[k] == '-'))
                    k++;
                if (k < n && isdigit((unsigned char)s[k])) {
                    fl = true;
                    while (i < k && o < sizeof buf - 1)
                        buf[o++] = s[i++];
                    while (i < n && isdigit((unsigned char)s[i]) && o < sizeof buf - 1)
                        buf[o++] = s[i++];
                }
            }
            buf[o] = '\0';
            if (i - b >= sizeof buf - 8)
                return ifd__jparse_err(p, IFD_EFORMAT, "number literal too long");
            if (fl) {
                t.kind = TK_FLOAT;
                t.f = strtod(buf, NULL);
            } else {
                t.kind = TK_INT;
                char *endp;
                unsigned long long v = strtoull(buf, &endp, 10);
                if (v > INT64_MAX)
                    return ifd__jparse_err(p, IFD_ENOTSUP, "integer literal beyond 64 bits");
                t.i = (int64_t)v;
            }
        } else if (c == '\'' || c == '"') {
            size_t b = ++i;
            while (i < n && s[i] != c) {
                if (s[i] == '\\')
                    i++;
                i++;
            }
            if (i >= n)
                return ifd__jparse_err(p, IFD_EFORMAT, "unterminated string literal");
            t.kind = TK_STR;
            if (decode_string(p, s + b, i - b, &t))
                return p->rc;
            i++;
        } else {
            int k = 0;
            for (; ifd__ops[k]; k++) {
                size_t l = strlen(ifd__ops[k]);
                if (i + l <= n && memcmp(s + i, ifd__ops[k], l) == 0)
                    break;
            }
            if (!ifd__ops[k])
                return ifd__jparse_err(p, IFD_EFORMAT, "unexpected character '%c'", c);
            t.kind = TK_OP;
            t.s = ifd__ops[k];
            t.n = strlen(t.s);
            i += t.n;
        }
        if (tok_push(p, t))
            return p->rc;
    }
    return tok_push(p, (tok_t){TK_END, "", 0, 0, 0});
}
