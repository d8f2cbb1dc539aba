/*
 * prom.c — Prometheus text format reader (see prom.h). One pass over the
 * lines; each sample's name and labels are copied into one allocation.
 */
#include "prom.h"

#include "arena.h"
#include "error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool name_char(char c, bool first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           (!first && c >= '0' && c <= '9');
}

/* Parses one sample line [s, e) into *out. 0 ok, -1 malformed, IFD_ENOMEM. */
static int parse_line(const char *s, const char *e, ifd_cli_prom_sample_t *out)
{
    const char *p = s;
    if (p >= e || !name_char(*p, true))
        return -1;
    while (p < e && name_char(*p, false))
        p++;
    size_t nlen = (size_t)(p - s);
    /* worst case: name + labels copied + NULs */
    char *buf = malloc(nlen + 1 + (size_t)(e - s) + 2);
    if (!buf)
        return IFD_ENOMEM;
    memcpy(buf, s, nlen);
    buf[nlen] = '\0';
    char *lab = buf + nlen + 1, *w = lab;
    size_t n_labels = 0;
    if (p < e && *p == '{') {
        p++;
        for (;;) {
            while (p < e && (*p == ' ' || *p == ','))
                p++;
            if (p < e && *p == '}') {
                p++;
                break;
            }
            const char *k = p;
            while (p < e && name_char(*p, p == k))
                p++;
            if (p == k || p + 1 >= e || *p != '=' || p[1] != '"')
                goto bad;
            memcpy(w, k, (size_t)(p - k));
            w += p - k;
            *w++ = '=';
            p += 2;
            while (p < e && *p != '"') {
                char c = *p++;
                if (c == '\\' && p < e) {
                    c = *p++;
                    if (c == 'n')
                        c = '\n';
                }
                *w++ = c;
            }
            if (p >= e)
                goto bad;
            p++; /* closing quote */
            *w++ = '\0';
            n_labels++;
        }
    }
    while (p < e && (*p == ' ' || *p == '\t'))
        p++;
    if (p >= e)
        goto bad;
    char num[64];
    size_t vlen = 0;
    while (p + vlen < e && p[vlen] != ' ' && p[vlen] != '\t')
        vlen++;
    if (vlen == 0 || vlen >= sizeof(num))
        goto bad;
    memcpy(num, p, vlen);
    num[vlen] = '\0';
    double v;
    if (strcasecmp(num, "+Inf") == 0 || strcasecmp(num, "Inf") == 0) {
        v = INFINITY;
    } else if (strcasecmp(num, "-Inf") == 0) {
        v = -INFINITY;
    } else if (strcasecmp(num, "NaN") == 0) {
        v = NAN;
    } else {
        char *end;
        v = strtod(num, &end);
        if (*end)
            goto bad;
    }
    out->name = buf;
    out->labels = n_labels ? lab : NULL;
    out->n_labels = n_labels;
    out->value = v;
    return 0;
bad:
    free(buf);
    return -1;
}

int ifd_cli_prom_parse(ifd_cli_prom_t *p, const char *text, size_t len, size_t *bad)
{
    p->s = NULL;
    p->n = 0;
    size_t cap = 0, nbad = 0;
    const char *s = text, *end = text + len;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *e = nl ? nl : end;
        const char *ls = s;
        s = nl ? nl + 1 : end;
        while (ls < e && (*ls == ' ' || *ls == '\t'))
            ls++;
        while (e > ls && (e[-1] == '\r' || e[-1] == ' '))
            e--;
        if (ls == e || *ls == '#')
            continue;
        ifd_cli_prom_sample_t *ns = ifd_grow(p->s, p->n, &cap, sizeof(*ns), 64);
        if (!ns)
            goto nomem;
        p->s = ns;
        int rc = parse_line(ls, e, &p->s[p->n]);
        if (rc == IFD_ENOMEM)
            goto nomem;
        if (rc < 0)
            nbad++;
        else
            p->n++;
    }
    if (bad)
        *bad = nbad;
    return 0;
nomem:
    ifd_cli_prom_free(p);
    return IFD_ENOMEM;
}

void ifd_cli_prom_free(ifd_cli_prom_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->s[i].name); /* labels live in the same allocation */
    free(p->s);
    p->s = NULL;
    p->n = 0;
}

const char *ifd_cli_prom_label(const ifd_cli_prom_sample_t *s, const char *key)
{
    const char *l = s->labels;
    size_t klen = strlen(key);
    for (size_t i = 0; i < s->n_labels; i++) {
        if (strncmp(l, key, klen) == 0 && l[klen] == '=')
            return l + klen + 1;
        l += strlen(l) + 1;
    }
    return NULL;
}

double ifd_cli_prom_sum(const ifd_cli_prom_t *p, const char *name, const char *key,
                        const char *value, bool *found)
{
    double sum = 0;
    bool any = false;
    for (size_t i = 0; i < p->n; i++) {
        const ifd_cli_prom_sample_t *s = &p->s[i];
        if (strcmp(s->name, name) != 0)
            continue;
        if (key) {
            const char *v = ifd_cli_prom_label(s, key);
            if (!v || strcmp(v, value) != 0)
                continue;
        }
        sum += s->value;
        any = true;
    }
    if (found)
        *found = any;
    return sum;
}
