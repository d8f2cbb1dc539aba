/*
 * grammar_conv_num.c — JSON Schema numeric keywords as exact digit grammars
 * (see grammar_conv_impl.h: ifd__gconv_number).
 *
 * A bounded value is written without an exponent, its integer part with at
 * most NUM_DIGITS digits (as the unbounded jint), its fraction with at most
 * 15 (or multipleOf 10^-k's k). Integer bounds are exact: the integers of
 * [lo, hi] become, per digit count, a digit-by-digit range grammar ("1" [5-9]
 * | [2-9] [0-9] | "1" [0-9]{2} …). Number bounds are exact decimals (the
 * bound's shortest round-trip text; with more fraction digits than are
 * written, rounded inward, exact for what is written): the whole parts
 * strictly inside with any fraction, and at a bound's whole part a digit-
 * by-digit fraction grammar (x >= 0.25: "0" "." ( "2" [5-9] … | [3-9] …)).
 * multipleOf: integers k >= 2 exactly
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

/* Integer magnitudes m with lo (<, or <= when not lo_ex) m (<, <=) hi.
 * Writes nothing and sets *empty when none. */
static int magnitude(ifd_buf_t *b, bound_t lo, bound_t hi, bool *empty)
{
    long long a = lo.v + lo.ex, z = hi.inf ? NUM_LIMIT : hi.v - hi.ex;
    *empty = a > z;
    return *empty ? 0 : uint_range(b, a, z);
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

/* The lower (sign 1) or upper (-1) bound from the pair minimum /
 * exclusiveMinimum (or the maxima; draft-04: exclusiveMinimum true makes
 * minimum exclusive): the tighter of the two, exclusive at equal values.
 * *have false: no bound. */
static int bound_pair(conv_t *c, const json_t *s, int sign, long double *v, bool *have,
                      bool *exclusive)
{
    const char *kin = sign > 0 ? "minimum" : "maximum";
    const char *kex = sign > 0 ? "exclusiveMinimum" : "exclusiveMaximum";
    const json_t *in = json_object_get(s, kin), *ex = json_object_get(s, kex);
    *v = 0, *have = false, *exclusive = false;
    if (in) {
        TRY(num_value(c, in, kin, v));
        *have = true;
    }
    if (ex && json_is_boolean(ex)) {
        if (json_is_true(ex) && !in)
            return ifd__gconv_err(c, IFD_ENOTSUP, "'%s': true without '%s'", kex, kin);
        *exclusive = json_is_true(ex);
    } else if (ex) {
        long double e;
        TRY(num_value(c, ex, kex, &e));
        if (!*have || (sign > 0 ? e >= *v : e <= *v))
            *v = e, *exclusive = true;
        *have = true;
    }
    return 0;
}

/* An integer's lower (upper: sign -1) bound from the pair
 * minimum/exclusiveMinimum (draft-04: exclusiveMinimum true makes minimum
 * exclusive), tightened to an inclusive integer (inward). */
static int read_bound(conv_t *c, const json_t *s, int sign, bound_t *out, bool *unsat)
{
    *out = (bound_t){0, false, true};
    long double v;
    bool have, exclusive;
    TRY(bound_pair(c, s, sign, &v, &have, &exclusive));
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
    if (f != m || exclusive) /* the next integer inward */
        f += 1;
    long long iv = (long long)f;
    *out = (bound_t){sign > 0 ? iv : -iv, false, false};
    return 0;
}

/* Integers x in [lo, hi] (bounds as read_bound gives them). */
static int range_body(conv_t *c, bound_t lo, bound_t hi, ifd_buf_t *b, bool *empty)
{
    ifd_buf_t neg = IFD_BUF_INIT, pos = IFD_BUF_INIT;
    bool ne = true, pe = true;
    int rc = 0;
    /* x >= 0: magnitudes from max(lo, 0) to hi */
    if (hi.inf || hi.v > 0 || (hi.v == 0 && !hi.ex)) {
        bound_t l = lo.inf || lo.v < 0 ? (bound_t){0, false, false} : lo;
        rc = magnitude(&pos, l, hi, &pe);
    }
    /* x < 0: x = -m with m > max(-hi, 0) … up to -lo */
    if (!rc && (lo.inf || lo.v < 0)) {
        bound_t l =
            !hi.inf && hi.v < 0 ? (bound_t){-hi.v, hi.ex, false} : (bound_t){0, true, false};
        bound_t h = lo.inf ? (bound_t){0, false, true} : (bound_t){-lo.v, lo.ex, false};
        rc = magnitude(&neg, l, h, &ne);
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

/* ---- numbers: bounds as exact decimals ---- */

/* A number's bound as a decimal: sign, whole part, fraction digits (no
 * trailing zeros; at most the fraction digits written, rounded inward,
 * which is exact for the values the grammar writes). */
typedef struct {
    bool inf, ex, neg;
    long long w;
    char f[FRAC_DIGITS + 1];
} dec_t;

/* The digits and point of v's shortest round-trip text: *w and f (the
 * whole part, f up to 40 digits). false when the whole part has more than
 * NUM_DIGITS digits. */
static bool dec_digits(double v, long long *w, char *f, size_t fcap)
{
    char t[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(t, sizeof t, "%.*e", p - 1, v);
        if (strtod(t, NULL) == v)
            break;
    }
    char dig[24];
    size_t nd = 0;
    const char *q = t + (t[0] == '-');
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9' && nd < sizeof dig - 1)
            dig[nd++] = *q;
    dig[nd] = '\0';
    int e = *q == 'e' ? atoi(q + 1) : 0; /* the first digit's power of ten */
    if (e >= NUM_DIGITS)
        return false;
    *w = 0;
    for (int i = 0; i <= e && i < (int)nd; i++)
        *w = *w * 10 + (dig[i] - '0');
    for (int i = (int)nd; i <= e; i++)
        *w *= 10;
    size_t k = 0;
    for (int i = e + 1; i < (int)nd && k + 1 < fcap; i++)
        f[k++] = i < 0 ? '0' : dig[i];
    /* leading zeros between the point and the first digit */
    if (e < -1) {
        size_t z = (size_t)(-e - 1);
        if (z + nd + 1 > fcap)
            return true; /* unreachable for doubles: 17 digits, e >= -324 is cut below */
        memmove(f + z, dig, nd);
        memset(f, '0', z);
        k = z + nd;
    } else if (e == -1) {
        memcpy(f, dig, nd);
        k = nd;
    }
    f[k] = '\0';
    return true;
}

static void strip_zeros(char *f)
{
    size_t n = strlen(f);
    while (n && f[n - 1] == '0')
        f[--n] = '\0';
}

/* The lower (sign 1) or upper (-1) bound of a number with at most fd
 * fraction digits from minimum / exclusiveMinimum (or the maxima), exact.
 * *unsat: no value of at most NUM_DIGITS whole digits satisfies it. */
static int read_dec(conv_t *c, const json_t *s, int sign, int fd, dec_t *out, bool *unsat)
{
    memset(out, 0, sizeof *out);
    out->inf = true;
    long double v;
    bool have, exclusive;
    TRY(bound_pair(c, s, sign, &v, &have, &exclusive));
    if (!have)
        return 0;
    char f[48];
    long long w;
    if (!dec_digits(fabsl(v) < 1e300L ? (double)fabsl(v) : 1e300, &w, f, sizeof f)) {
        /* beyond every value written: below it all (no bound) or above it all */
        if ((v > 0) == (sign > 0))
            *unsat = true;
        return 0;
    }
    bool neg = v < 0;
    /* fd digits at most, rounded inward: toward +inf for a lower bound */
    bool up = (sign > 0) != neg, cut = strlen(f) > (size_t)fd;
    if (cut) {
        bool rest = false;
        for (size_t i = (size_t)fd; f[i]; i++)
            rest |= f[i] != '0';
        f[fd] = '\0';
        if (rest) {
            exclusive = false;
            int i = fd - 1;
            for (; up && i >= 0; i--) { /* add one at the last digit kept */
                if (f[i] != '9') {
                    f[i]++;
                    break;
                }
                f[i] = '0';
            }
            if (up && i < 0)
                w++;
        }
    }
    strip_zeros(f);
    if (w > NUM_LIMIT) {
        if (!neg == (sign > 0))
            *unsat = true;
        return 0;
    }
    *out = (dec_t){.inf = false, .ex = exclusive, .neg = neg && (w || f[0]), .w = w};
    memcpy(out->f, f, strlen(f) + 1);
    return 0;
}

#define PUTB(...)                                                                                  \
    do {                                                                                           \
        if (ifd_buf_printf(__VA_ARGS__))                                                           \
            goto oom;                                                                              \
    } while (0)

/* Fraction digit strings s of 0..r digits with l (<, or <= unless lex) 0.s
 * and 0.s (<, <=) h, where l and h are fraction digits without trailing
 * zeros (NULL: no bound): the alternatives for the non-empty ones into b
 * (*any when there are some), *eps when the empty one (no fraction) is
 * one. Digit by digit: a first digit strictly between the bounds' leaves
 * the rest free; one equal to a bound's first digit continues under it. */
static int frac_set(ifd_buf_t *b, const char *l, bool lex, const char *h, bool hex, int r,
                    bool *any, bool *eps)
{
    if (l && !*l && !lex)
        l = NULL; /* >= 0 is no bound */
    *eps = !l && (!h || *h || !hex);
    *any = false;
    if (r == 0)
        return 0;
    int l0 = l ? (*l ? *l - '0' : 0) : -1, h0 = h ? (*h ? *h - '0' : 0) : 10;
    const char *lr = l && *l ? l + 1 : l, *hr = h && *h ? h + 1 : h;
    /* the first digits that continue under a bound: both when they agree */
    const struct {
        int d;
        const char *l, *h;
        bool use;
    } cont[2] = {{l0, lr, l && h && l0 == h0 ? hr : NULL, l && l0 <= h0},
                 {h0, NULL, hr, h && h0 > l0}};
    ifd_buf_t alt = IFD_BUF_INIT, sub = IFD_BUF_INIT;
    const char *sep = "";
    for (int i = 0; i < 2; i++) {
        bool a, e;
        if (!cont[i].use)
            continue;
        sub.len = 0;
        if (sub.data)
            sub.data[0] = '\0';
        if (frac_set(&sub, cont[i].l, lex, cont[i].h, hex, r - 1, &a, &e))
            goto oom;
        if (!a && !e)
            continue;
        PUTB(&alt, "%s\"%d\" ", sep, cont[i].d);
        if (a)
            PUTB(&alt, e ? "( %s)? " : "%s", sub.data);
        sep = "| ";
    }
    if (h0 - l0 > 1) { /* first digits strictly between: the rest is free */
        PUTB(&alt, "%s[%d-%d] ", sep, l0 + 1, h0 - 1);
        if (r > 1)
            PUTB(&alt, "[0-9]{0,%d} ", r - 1);
        sep = "| ";
    }
    *any = *sep != '\0';
    if (*any)
        PUTB(b, "( %s) ", alt.data);
    ifd_buf_free(&alt);
    ifd_buf_free(&sub);
    return 0;
oom:
    ifd_buf_free(&alt);
    ifd_buf_free(&sub);
    return IFD_ENOMEM;
}

/* A whole part (the grammar text w) followed by the fraction set (l, lex,
 * h, hex) of at most fd digits: an alternative of b, after *sep. */
static int whole_frac(ifd_buf_t *b, const char **sep, const char *w, const char *l, bool lex,
                      const char *h, bool hex, int fd)
{
    ifd_buf_t fr = IFD_BUF_INIT;
    bool a, e;
    if (frac_set(&fr, l, lex, h, hex, fd, &a, &e))
        goto oom;
    if (a || e) {
        PUTB(b, "%s%s", *sep, w);
        if (a)
            PUTB(b, e ? "( \".\" %s)? " : "\".\" %s", fr.data);
        *sep = "| ";
    }
    ifd_buf_free(&fr);
    return 0;
oom:
    ifd_buf_free(&fr);
    return IFD_ENOMEM;
}

/* Magnitudes m (non-negative decimals of at most fd fraction digits) with
 * lo (<, <=) m (<, <=) hi, both magnitudes; nothing and *empty when none. */
static int dec_magnitude(ifd_buf_t *b, const dec_t *lo, const dec_t *hi, int fd, bool *empty)
{
    long long a = lo->w, z = hi->inf ? NUM_LIMIT : hi->w;
    *empty = true;
    if (a > z)
        return 0;
    size_t at = b->len;
    const char *sep = "";
    char w[32];
    const char *top = !hi->inf && a == z ? hi->f : NULL;
    snprintf(w, sizeof w, "\"%lld\" ", a);
    if (ifd_buf_puts(b, "( ") || whole_frac(b, &sep, w, lo->f, lo->ex, top, top && hi->ex, fd))
        return IFD_ENOMEM;
    long long m1 = a + 1, m2 = hi->inf ? NUM_LIMIT : z - 1;
    if (m1 <= m2) { /* whole parts strictly between: any fraction */
        PUTB(b, "%s", sep);
        if (uint_range(b, m1, m2))
            goto oom;
        PUTB(b, "( \".\" [0-9]{1,%d} )? ", fd);
        sep = "| ";
    }
    if (!hi->inf && z > a) {
        snprintf(w, sizeof w, "\"%lld\" ", z);
        if (whole_frac(b, &sep, w, NULL, false, hi->f, hi->ex, fd))
            return IFD_ENOMEM;
    }
    if (!*sep) {
        b->len = at;
        b->data[at] = '\0';
        return 0;
    }
    *empty = false;
    PUTB(b, ") ");
    return 0;
oom:
    return IFD_ENOMEM;
}

/* Numbers x of at most fd fraction digits with lo <= x <= hi (each
 * exclusive or not), exactly: the magnitudes of x >= 0 and of x < 0. */
static int dec_range(conv_t *c, const dec_t *lo, const dec_t *hi, int fd, ifd_buf_t *b, bool *empty)
{
    static const dec_t zero = {.inf = false}, zero_ex = {.inf = false, .ex = true};
    ifd_buf_t neg = IFD_BUF_INIT, pos = IFD_BUF_INIT;
    bool ne = true, pe = true;
    int rc = 0;
    if (hi->inf || !hi->neg) /* x >= 0 */
        rc = dec_magnitude(&pos, lo->inf || lo->neg ? &zero : lo, hi, fd, &pe);
    if (!rc && (lo->inf || lo->neg)) /* x < 0: m = -x in (max(-hi, 0), -lo] */
        rc = dec_magnitude(&neg, hi->inf || !hi->neg ? &zero_ex : hi, lo, fd, &ne);
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
        TRY(range_body(c, ql, qh, b, &empty_q));
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
    static const char *const keys[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                       "multipleOf"};
    bool any = false;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        any |= json_object_get(s, keys[i]) != NULL;
    if (!any)
        return ifd_buf_puts(b, integer ? "jint " : "jnum ") ? oom(c) : 0;
    long long k = 1;
    int fd = FRAC_DIGITS;
    TRY(read_multiple(c, s, &integer, &k, &fd));
    bool unsat = false, empty;
    if (!integer) {
        dec_t dl, dh;
        TRY(read_dec(c, s, 1, fd, &dl, &unsat));
        TRY(read_dec(c, s, -1, fd, &dh, &unsat));
        empty = unsat;
        if (!empty)
            TRY(dec_range(c, &dl, &dh, fd, b, &empty));
    } else {
        bound_t lo, hi;
        TRY(read_bound(c, s, 1, &lo, &unsat));
        TRY(read_bound(c, s, -1, &hi, &unsat));
        empty = unsat;
        if (!empty && k > 1)
            TRY(multiples(c, lo, hi, k, b, &empty));
        else if (!empty)
            TRY(range_body(c, lo, hi, b, &empty));
    }
    if (empty)
        return ifd__gconv_unsat(c,
                                "no %s with at most %d digits satisfies 'minimum'/'maximum'/"
                                "'exclusive*'/'multipleOf' here",
                                integer ? "integer" : "number", NUM_DIGITS);
    return 0;
}
