/*
 * grammar_conv_num.c — JSON Schema numeric keywords as exact digit grammars
 * (see grammar_conv_impl.h: ifd__gconv_number).
 *
 * A bounded value is written without an exponent, its integer part with at
 * most NUM_DIGITS digits (as the unbounded jint), its fraction with at most
 * 15 (or multipleOf 10^-k's k). Integer bounds are exact: the integers of
 * [lo, hi] become, per digit count, a digit-by-digit range grammar ("1" [5-9]
 * | [2-9] [0-9] | "1" [0-9]{2} …). Number bounds are exact when they are
 * integers (x <= 3: integer part below 3 with any fraction, or 3 with a zero
 * fraction; x > 0: 0 with a nonzero fraction, or 1 and up); a fractional
 * bound is tightened to the next integer inward (minimum 0.5 generates 1 and
 * up), which keeps every output valid. multipleOf: integers k >= 2 exactly
 * (a remainder automaton of k states when only the sign is bounded, the
 * multiples themselves when there are at most MAX_MULTIPLES of them, a
 * range of the quotient with k's trailing zeros for powers of ten), and
 * 10^-k for numbers (at most k fraction digits). The rest is IFD_ENOTSUP
 * naming the keyword.
 */
#include "error.h"
#include "grammar_conv_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NUM_DIGITS    16
#define NUM_LIMIT     9999999999999999LL /* 10^NUM_DIGITS - 1 */
#define FRAC_DIGITS   15
#define MAX_MODULUS   1000
#define MAX_MULTIPLES 4096

/* One end of the range: the value, exclusive or not; inf: unbounded. */
typedef struct {
    long long v;
    bool ex, inf;
} bound_t;

static int oom(conv_t *c)
{
    return ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
}

#define PUT(...)                                                                                   \
    do {                                                                                           \
        if (ifd_buf_printf(__VA_ARGS__))                                                           \
            return IFD_ENOMEM;                                                                     \
    } while (0)

/* The canonical decimals of the same length L between x and y (x <= y, as
 * digit strings of length L), digit by digit. */
static int same_len(ifd_buf_t *b, const char *x, const char *y, size_t L)
{
    size_t i = 0;
    while (i < L && x[i] == y[i])
        i++;
    if (i)
        PUT(b, "\"%.*s\" ", (int)i, x);
    if (i == L)
        return 0;
    size_t rest = L - i - 1;
    if (!rest) {
        PUT(b, "[%c-%c] ", x[i], y[i]);
        return 0;
    }
    bool xz = strspn(x + i + 1, "0") == rest, y9 = strspn(y + i + 1, "9") == rest;
    char lo = x[i], hi = y[i];
    PUT(b, "( ");
    bool first = true;
    char nines[NUM_DIGITS + 1], zeros[NUM_DIGITS + 1];
    memset(nines, '9', rest), nines[rest] = '\0';
    memset(zeros, '0', rest), zeros[rest] = '\0';
    if (!xz) { /* x's first digit, then x's rest up to 99…9 */
        PUT(b, "\"%c\" ", lo);
        TRY(same_len(b, x + i + 1, nines, rest));
        lo++, first = false;
    }
    char top = hi;
    if (!y9)
        hi--;
    if (lo <= hi) {
        PUT(b, "%s[%c-%c] [0-9]{%zu} ", first ? "" : "| ", lo, hi, rest);
        first = false;
    }
    if (!y9) { /* y's first digit, then 00…0 up to y's rest */
        PUT(b, "%s\"%c\" ", first ? "" : "| ", top);
        TRY(same_len(b, zeros, y + i + 1, rest));
    }
    PUT(b, ") ");
    return 0;
}

/* The canonical decimals of [lo, hi] (0 <= lo <= hi <= NUM_LIMIT). */
static int uint_range(ifd_buf_t *b, long long lo, long long hi)
{
    char x[32], y[32];
    int lx = snprintf(x, sizeof x, "%lld", lo), ly = snprintf(y, sizeof y, "%lld", hi);
    PUT(b, "( ");
    for (int L = lx; L <= ly; L++) {
        char a[32], z[32];
        if (L == lx)
            memcpy(a, x, (size_t)L + 1);
        else
            a[0] = '1', memset(a + 1, '0', (size_t)L - 1), a[L] = '\0';
        if (L == ly)
            memcpy(z, y, (size_t)L + 1);
        else
            memset(z, '9', (size_t)L), z[L] = '\0';
        if (L > lx)
            PUT(b, "| ");
        TRY(same_len(b, a, z, (size_t)L));
    }
    PUT(b, ") ");
    return 0;
}

/* Magnitudes m (the text of a non-negative number) with lo (<, or <= when
 * not lo_ex) m (<, <=) hi, fd fraction digits at most (0: integers). Writes
 * nothing and sets *empty when none. */
static int magnitude(ifd_buf_t *b, bound_t lo, bound_t hi, int fd, bool *empty)
{
    long long top = hi.inf ? NUM_LIMIT : hi.v;
    *empty = true;
    if (!fd) { /* integers */
        long long a = lo.v + lo.ex, z = hi.inf ? NUM_LIMIT : hi.v - hi.ex;
        if (a > z)
            return 0;
        *empty = false;
        return uint_range(b, a, z);
    }
    size_t at = b->len;
    PUT(b, "( ");
    const char *sep = "";
    if (lo.ex && (hi.inf || hi.v > lo.v)) { /* lo itself with a nonzero fraction */
        PUT(b, "\"%lld\" \".\" ", lo.v);
        if (fd > 1)
            PUT(b, "[0-9]{0,%d} ", fd - 1);
        PUT(b, "[1-9] ");
        sep = "| ";
    }
    long long a = lo.v + lo.ex, z = hi.inf ? NUM_LIMIT : hi.v - 1;
    if (a <= z) { /* whole part strictly below hi: any fraction */
        PUT(b, "%s", sep);
        TRY(uint_range(b, a, z));
        PUT(b, "( \".\" [0-9]{1,%d} )? ", fd);
        sep = "| ";
    }
    if (!hi.inf && !hi.ex && (top > lo.v || (top == lo.v && !lo.ex))) { /* hi, zero fraction */
        PUT(b, "%s\"%lld\" ( \".\" \"0\"{1,%d} )? ", sep, top, fd);
        sep = "| ";
    }
    if (!*sep) {
        b->len = at;
        b->data[at] = '\0';
        return 0;
    }
    *empty = false;
    PUT(b, ") ");
    return 0;
}

/* Reads a bound keyword's value (a number) as a long double. */
static int num_value(conv_t *c, const json_t *v, const char *key, long double *out)
{
    if (json_is_integer(v))
        *out = (long double)json_integer_value(v);
    else if (json_is_real(v))
        *out = (long double)json_real_value(v);
    else
        return ifd__gconv_err(c, IFD_ENOTSUP, "'%s' must be a number", key);
    return 0;
}

/* The lower (upper: sign -1) bound from the pair minimum/exclusiveMinimum
 * (draft-04: exclusiveMinimum true makes minimum exclusive), tightened to
 * an integer (inward) where it is fractional or the value is an integer. */
static int read_bound(conv_t *c, const json_t *s, int sign, bool integer, bound_t *out,
                      bool *unsat)
{
    const char *kin = sign > 0 ? "minimum" : "maximum";
    const char *kex = sign > 0 ? "exclusiveMinimum" : "exclusiveMaximum";
    const json_t *in = json_object_get(s, kin), *ex = json_object_get(s, kex);
    *out = (bound_t){0, false, true};
    long double v = 0;
    bool have = false, exclusive = false;
    if (in) {
        TRY(num_value(c, in, kin, &v));
        have = true;
    }
    if (ex && json_is_boolean(ex)) {
        if (json_is_true(ex) && !in)
            return ifd__gconv_err(c, IFD_ENOTSUP, "'%s': true without '%s'", kex, kin);
        exclusive = json_is_true(ex);
    } else if (ex) {
        long double e;
        TRY(num_value(c, ex, kex, &e));
        /* the tighter of the two; at equal values exclusive wins */
        if (!have || (sign > 0 ? e >= v : e <= v))
            v = e, exclusive = true;
        have = true;
    }
    if (!have)
        return 0;
    long double m = sign > 0 ? v : -v; /* work on the lower bound of sign * x */
    if (m < -(long double)NUM_LIMIT)
        return 0; /* below every value written */
    if (m > (long double)NUM_LIMIT) {
        *unsat = true;
        return 0;
    }
    long double f = floorl(m);
    bool ex_out = exclusive;
    if (f != m) /* fractional: the next integer inward */
        f += 1, ex_out = false;
    else if (integer && exclusive)
        f += 1, ex_out = false;
    long long iv = (long long)f;
    *out = (bound_t){sign > 0 ? iv : -iv, ex_out, false};
    return 0;
}

/* x in [lo, hi] (bounds as read_bound gives them) with fd fraction digits. */
static int range_body(conv_t *c, bound_t lo, bound_t hi, int fd, ifd_buf_t *b, bool *empty)
{
    ifd_buf_t neg = IFD_BUF_INIT, pos = IFD_BUF_INIT;
    bool ne = true, pe = true;
    int rc = 0;
    /* x >= 0: magnitudes from max(lo, 0) to hi */
    if (hi.inf || hi.v > 0 || (hi.v == 0 && !hi.ex)) {
        bound_t l = lo.inf || lo.v < 0 ? (bound_t){0, false, false} : lo;
        rc = magnitude(&pos, l, hi, fd, &pe);
    }
    /* x < 0: x = -m with m > max(-hi, 0) … up to -lo */
    if (!rc && (lo.inf || lo.v < 0)) {
        bound_t l = !hi.inf && hi.v < 0 ? (bound_t){-hi.v, hi.ex, false}
                                        : (bound_t){0, true, false};
        bound_t h = lo.inf ? (bound_t){0, false, true} : (bound_t){-lo.v, lo.ex, false};
        rc = magnitude(&neg, l, h, fd, &ne);
    }
    *empty = ne && pe;
    if (!rc && !*empty) {
        rc = ifd_buf_puts(b, "( ");
        if (!rc && !ne)
            rc = ifd_buf_printf(b, "\"-\" %s%s", neg.data, pe ? "" : "| ");
        if (!rc && !pe)
            rc = ifd_buf_puts(b, pos.data);
        if (!rc)
            rc = ifd_buf_puts(b, ") ");
    }
    ifd_buf_free(&neg);
    ifd_buf_free(&pos);
    return rc ? oom(c) : 0;
}

/* Multiples of k (2 <= k <= MAX_MODULUS) of any length, as a remainder
 * automaton: rule r reads the digits that follow a prefix ≡ r (mod k). */
static int mod_automaton(conv_t *c, long long k, bool zero, bool negative, ifd_buf_t *b)
{
    unsigned base = c->next;
    c->next += (unsigned)k;
    for (long long r = 0; r < k; r++) {
        ifd_buf_t body = IFD_BUF_INIT;
        int rc = r == 0 ? ifd_buf_puts(&body, "\"\" ") : 0;
        for (int d = 0; d <= 9 && !rc; d++)
            rc = ifd_buf_printf(&body, "%s\"%d\" s%llu ", r == 0 || d ? "| " : "", d,
                                base + (unsigned long long)((10 * r + d) % k));
        if (rc) {
            ifd_buf_free(&body);
            return oom(c);
        }
        rc = ifd__gconv_rule(c, base + (unsigned)r, &body);
        ifd_buf_free(&body);
        TRY(rc);
    }
    /* a first digit 1-9, then the automaton */
    ifd_buf_t first = IFD_BUF_INIT;
    int rc = ifd_buf_puts(&first, "( ");
    for (int d = 1; d <= 9 && !rc; d++)
        rc = ifd_buf_printf(&first, "%s\"%d\" s%llu ", d > 1 ? "| " : "", d,
                            base + (unsigned long long)(d % k));
    if (!rc)
        rc = ifd_buf_puts(&first, ") ");
    if (!rc)
        rc = ifd_buf_printf(b, "( %s", zero ? "\"0\" | " : "");
    if (!rc && negative)
        rc = ifd_buf_printf(b, "\"-\" %s| ", first.data);
    if (!rc)
        rc = ifd_buf_printf(b, "%s) ", first.data);
    ifd_buf_free(&first);
    return rc ? oom(c) : 0;
}

/* Integers in [lo, hi] that are multiples of k >= 2. */
static int multiples(conv_t *c, bound_t lo, bound_t hi, long long k, ifd_buf_t *b, bool *empty)
{
    long long a = lo.inf ? -NUM_LIMIT : lo.v, z = hi.inf ? NUM_LIMIT : hi.v;
    /* the first and last multiple inside */
    long long fa = a % k == 0 ? a : (a > 0 ? a + (k - a % k) : a - a % k);
    long long fz = z % k == 0 ? z : (z > 0 ? z - z % k : z - (k + z % k));
    *empty = fa > fz;
    if (*empty)
        return 0;
    if ((fz - fa) / k < MAX_MULTIPLES) { /* few: the multiples themselves */
        size_t n = (size_t)((fz - fa) / k) + 1;
        lit_t *v = calloc(n, sizeof *v);
        char *txt = calloc(n, 24);
        int rc = v && txt ? 0 : oom(c);
        for (size_t i = 0; i < n && !rc; i++) {
            int len = snprintf(txt + 24 * i, 24, "%lld", fa + (long long)i * k);
            v[i] = (lit_t){txt + 24 * i, (size_t)len};
        }
        if (!rc)
            rc = ifd__gconv_literals(c, v, n, b);
        free(v);
        free(txt);
        return rc;
    }
    long long p = 1;
    int zeros = 0;
    while (p < k && p <= NUM_LIMIT / 10)
        p *= 10, zeros++;
    if (p == k && fa >= 0) { /* 10^j: the quotients, then j zeros */
        bool empty_q;
        if (ifd_buf_puts(b, "( ") || (fa == 0 && ifd_buf_puts(b, "\"0\" | ")))
            return oom(c);
        bound_t ql = {fa == 0 ? 1 : fa / k, false, false}, qh = {fz / k, false, false};
        TRY(range_body(c, ql, qh, 0, b, &empty_q));
        return ifd_buf_printf(b, "\"%0*d\" ) ", zeros, 0) ? oom(c) : 0;
    }
    bool only_sign = hi.inf && (lo.inf || lo.v == 0 || lo.v == 1);
    if (only_sign && k <= MAX_MODULUS)
        return mod_automaton(c, k, lo.inf || lo.v == 0, lo.inf, b);
    return ifd__gconv_err(c, IFD_ENOTSUP,
                          "'multipleOf' %lld with these bounds is not supported (up to %d "
                          "multiples, powers of ten, or multipleOf <= %d with only a sign bound)",
                          k, MAX_MULTIPLES, MAX_MODULUS);
}

/* multipleOf: *k an integer >= 1 (1: none), or *fd fraction digits for 10^-fd. */
static int read_multiple(conv_t *c, const json_t *s, bool *integer, long long *k, int *fd)
{
    const json_t *m = json_object_get(s, "multipleOf");
    *k = 1;
    if (!m)
        return 0;
    long double v;
    TRY(num_value(c, m, "multipleOf", &v));
    if (!(v > 0))
        return ifd__gconv_err(c, IFD_ENOTSUP, "'multipleOf' must be above 0");
    if (v == floorl(v)) {
        if (v > (long double)NUM_LIMIT)
            return ifd__gconv_err(c, IFD_ENOTSUP, "'multipleOf' over %lld", NUM_LIMIT);
        *k = (long long)v;
        *integer = true; /* the multiples of an integer are integers */
        return 0;
    }
    for (int d = 1; d <= FRAC_DIGITS; d++) {
        long double p = powl(10.0L, (long double)d);
        if (fabsl(v * p - 1.0L) < 1e-9L) {
            *fd = d;
            return 0;
        }
    }
    return ifd__gconv_err(c, IFD_ENOTSUP,
                          "'multipleOf' %Lg is not supported for numbers (integers and 10^-k are)",
                          v);
}

int ifd__gconv_number(conv_t *c, const json_t *s, bool integer, ifd_buf_t *b)
{
    static const char *const keys[] = {"minimum", "maximum", "exclusiveMinimum",
                                       "exclusiveMaximum", "multipleOf"};
    bool any = false;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        any |= json_object_get(s, keys[i]) != NULL;
    if (!any)
        return ifd_buf_puts(b, integer ? "jint " : "jnum ") ? oom(c) : 0;
    long long k = 1;
    int fd = FRAC_DIGITS;
    TRY(read_multiple(c, s, &integer, &k, &fd));
    bound_t lo, hi;
    bool unsat = false;
    TRY(read_bound(c, s, 1, integer, &lo, &unsat));
    TRY(read_bound(c, s, -1, integer, &hi, &unsat));
    bool empty = unsat;
    if (!empty && k > 1)
        TRY(multiples(c, lo, hi, k, b, &empty));
    else if (!empty)
        TRY(range_body(c, lo, hi, integer ? 0 : fd, b, &empty));
    if (empty)
        return ifd__gconv_unsat(c,
                              "no %s with at most %d digits satisfies 'minimum'/'maximum'/"
                              "'exclusive*'/'multipleOf' here",
                              integer ? "integer" : "number", NUM_DIGITS);
    return 0;
}
