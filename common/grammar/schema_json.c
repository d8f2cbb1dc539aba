/*
 * schema_json.c — integers beyond int64 in JSON text read as doubles where
 * that is exact for a schema (schema_json.h). The text is parsed once as it
 * is; only when jansson says "too big integer" is it scanned: a small
 * tokenizer copies it, appending ".0" to each integer literal beyond int64
 * (jansson then reads a real), and tracks whether the literal sits inside
 * an `enum` or `const` value, where an inexact one is refused. Malformed
 * text is copied as it is, for jansson to report.
 */
#include "grammar/schema_json.h"

#include "arena.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NEST 2048 /* jansson's own nesting limit */

/* Whether the integer literal s[0..n) (an optional '-', then digits) lies
 * outside int64. */
static bool beyond_int64(const char *s, size_t n)
{
    bool neg = n && s[0] == '-';
    const char *d = s + neg;
    size_t k = n - neg;
    const char *lim = neg ? "9223372036854775808" : "9223372036854775807";
    if (k != 19)
        return k > 19;
    return memcmp(d, lim, 19) > 0;
}

/* Whether the double nearest the integer literal s[0..n) is that integer:
 * its shortest round-trip digits, read as a decimal, equal the literal. */
static bool exact_double(const char *s, size_t n)
{
    char lit[64];
    size_t neg = s[0] == '-', k = n - neg;
    if (k + 1 > sizeof lit)
        return false; /* over 63 digits: a double's 17 cannot hold them */
    memcpy(lit, s + neg, k);
    lit[k] = '\0';
    double d = strtod(lit, NULL);
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, d);
        if (strtod(e, NULL) == d)
            break;
    }
    /* e: "D.DDDDe+XX": the digits, and the literal has XX + 1 of them */
    char m[24];
    size_t mn = 0;
    const char *x = e;
    for (; *x && *x != 'e'; x++)
        if (*x != '.' && mn + 1 < sizeof m)
            m[mn++] = *x;
    if (*x != 'e' || (size_t)(atoi(x + 1) + 1) != k)
        return false;
    while (mn > 1 && m[mn - 1] == '0')
        mn--;
    while (k > 1 && lit[k - 1] == '0')
        k--;
    return k == mn && memcmp(lit, m, k) == 0;
}

/* Copies text with integers beyond int64 made reals; -1 with err filled
 * when one inside enum/const is not a double exactly, -2 out of memory. */
static int widen(const char *t, size_t len, ifd_buf_t *out, json_error_t *err)
{
    /* per open container: an object?, inside enum/const? (4 KiB of stack, on
     * the rare path where jansson refused a number) */
    struct {
        bool obj, data, names; /* names: an object of names (properties, $defs, …) */
    } st[MAX_NEST];
    int top = -1;
    bool want_key = false, member_data = false, member_names = false;
    size_t i = 0, from = 0;
    while (i < len) {
        char ch = t[i];
        if (ch == '"') {
            size_t s = ++i;
            while (i < len && t[i] != '"')
                i += t[i] == '\\' ? 2 : 1;
            if (top >= 0 && st[top].obj && want_key) {
                size_t n = (i < len ? i : len) - s;
                bool kw = !st[top].names; /* a keyword, not a property's name */
                bool dk = kw && ((n == 4 && !memcmp(t + s, "enum", 4)) ||
                                 (n == 5 && !memcmp(t + s, "const", 5)));
                member_data = st[top].data || dk;
                member_names = false;
                static const char *const maps[] = {"properties", "patternProperties", "$defs",
                                                   "definitions", "dependentSchemas"};
                for (size_t m = 0; kw && m < sizeof maps / sizeof maps[0]; m++)
                    member_names |= n == strlen(maps[m]) && !memcmp(t + s, maps[m], n);
                want_key = false;
            }
            i++;
        } else if (ch == '{' || ch == '[') {
            if (top + 1 >= MAX_NEST)
                break; /* jansson refuses the depth itself */
            bool data = top < 0 ? false : st[top].obj ? member_data : st[top].data;
            bool names = top >= 0 && st[top].obj && member_names && !data && ch == '{';
            st[++top].obj = ch == '{';
            st[top].data = data;
            st[top].names = names;
            want_key = ch == '{';
            i++;
        } else if (ch == '}' || ch == ']') {
            if (top >= 0)
                top--;
            want_key = false;
            i++;
        } else if (ch == ',') {
            want_key = top >= 0 && st[top].obj;
            i++;
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            size_t s = i;
            i += ch == '-';
            while (i < len && t[i] >= '0' && t[i] <= '9')
                i++;
            bool integer = i == len || (t[i] != '.' && t[i] != 'e' && t[i] != 'E');
            while (i < len && (strchr("0123456789.eE+-", t[i])))
                i++;
            if (!integer || !beyond_int64(t + s, i - s))
                continue;
            bool data = top < 0 ? false : st[top].obj ? member_data : st[top].data;
            if (data && !exact_double(t + s, i - s)) {
                snprintf(err->text, sizeof err->text,
                         "the integer %.*s%s in an 'enum' or 'const' has more digits than a "
                         "double holds exactly",
                         (int)(i - s > 40 ? 40 : i - s), t + s, i - s > 40 ? "…" : "");
                err->position = (int)s;
                err->line = 1, err->column = 1;
                for (size_t q = 0; q < s; q++)
                    if (t[q] == '\n')
                        err->line++, err->column = 1;
                    else
                        err->column++;
                return -1;
            }
            if (ifd_buf_append(out, t + from, i - from) || ifd_buf_puts(out, ".0"))
                return -2;
            from = i;
        } else {
            i++;
        }
    }
    return ifd_buf_append(out, t + from, len - from) ? -2 : 0;
}

json_t *ifd_schema_json_loadb(const char *text, size_t len, size_t flags, json_error_t *err)
{
    json_t *j = json_loadb(text, len, flags, err);
    if (j || !strstr(err->text, "too big")) /* "too big (negative) integer" */
        return j;
    ifd_buf_t b = IFD_BUF_INIT;
    json_error_t first = *err;
    int rc = widen(text, len, &b, err);
    if (rc == 0)
        j = json_loadb(b.data ? b.data : "", b.len, flags, err);
    else if (rc == -2)
        *err = first;
    ifd_buf_free(&b);
    return j;
}
