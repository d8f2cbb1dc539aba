/*
 * jinja_render.c — renders one Jinja template file over a list of contexts
 * with common/jinja (the C side of test_chat_template_conformance.py).
 *
 *   jinja_render TEMPLATE CASES.json
 *
 * CASES.json is a JSON array of context objects. Prints one JSON array, one
 * entry per case: {"ok": true, "out": "..."} or {"ok": false, "err": "..."};
 * a template that does not parse gives {"parse_error": "..."} instead.
 * strftime_now uses the fixed time of $INFERD_JINJA_NOW (Unix seconds) when set.
 * Exit 0, or 2 on a usage or I/O error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    size_t k;
    while (s && (k = fread(s + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            char *ns = realloc(s, cap *= 2);
            if (!ns) {
                free(s);
                s = NULL;
            }
            s = ns;
        }
    }
    fclose(f);
    *len = n;
    return s;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: jinja_render TEMPLATE CASES.json\n");
        return 2;
    }
    size_t len;
    char *src = slurp(argv[1], &len);
    if (!src) {
        fprintf(stderr, "jinja_render: cannot read %s\n", argv[1]);
        return 2;
    }
    json_error_t je;
    json_t *cases = json_load_file(argv[2], 0, &je);
    if (!json_is_array(cases)) {
        fprintf(stderr, "jinja_render: %s: %s\n", argv[2], je.text);
        free(src);
        return 2;
    }
    char err[1024];
    ifd_jinja_t *t;
    json_t *res;
    int rc = ifd_jinja_parse(&t, src, len, err, sizeof err);
    if (rc) {
        res = json_pack("{s:s}", "parse_error", err);
    } else {
        res = json_array();
        ifd_jinja_limits_t lim = ifd_jinja_default_limits();
        const char *now = getenv("INFERD_JINJA_NOW");
        if (now)
            lim.now = strtoll(now, NULL, 10);
        size_t i;
        json_t *c;
        json_array_foreach(cases, i, c)
        {
            char *out;
            size_t n;
            rc = ifd_jinja_render(t, c, &lim, &out, &n, err, sizeof err);
            if (rc)
                json_array_append_new(res, json_pack("{s:b,s:s}", "ok", 0, "err", err));
            else
                json_array_append_new(res, json_pack("{s:b,s:s%}", "ok", 1, "out", out, n));
            free(out);
        }
        ifd_jinja_destroy(t);
    }
    char *dump = json_dumps(res, JSON_COMPACT | JSON_ENSURE_ASCII);
    puts(dump ? dump : "null");
    free(dump);
    json_decref(res);
    json_decref(cases);
    free(src);
    return 0;
}
