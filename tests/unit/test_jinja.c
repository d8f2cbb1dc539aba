/*
 * test_jinja.c — common/chat/jinja against expected strings rendered by Python's
 * jinja2 3.1 in transformers' environment (tests/data/jinja/jinja_golden.json,
 * from gen_jinja_golden.py: whitespace control, operators, tests, filters,
 * methods, loops, macros, namespaces, errors); load-time errors naming the
 * construct and line; the limits against hostile templates (nesting,
 * recursion, loop iterations, output and memory); and mutated templates
 * that must fail cleanly, never crash (run under ASan in test.sh).
 */
#include "testutil.h"

#include "chat/jinja/jinja.h"
#include "error.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *load_golden(void)
{
    const char *src = getenv("INFERD_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/jinja/jinja_golden.json", src ? src : ".");
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    ck_assert_msg(j != NULL, "%s:%d: %s", path, err.line, err.text);
    return j;
}

/* Parses and renders src with ctx: the return code, *out (caller frees). */
static int render(const char *src, const json_t *ctx, const ifd_jinja_limits_t *lim, char **out,
                  char *err, size_t errlen)
{
    ifd_jinja_t *t;
    *out = NULL;
    int rc = ifd_jinja_parse(&t, src, strlen(src), err, errlen);
    if (rc)
        return rc;
    size_t n;
    rc = ifd_jinja_render(t, ctx, lim, out, &n, err, errlen);
    if (!rc)
        ck_assert_uint_eq(n, strlen(*out));
    ifd_jinja_destroy(t);
    return rc;
}

START_TEST(test_golden)
{
    json_t *doc = load_golden();
    json_t *ctx = json_object_get(doc, "context");
    json_t *cases = json_object_get(doc, "cases");
    ck_assert_uint_gt(json_array_size(cases), 60);
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c)
    {
        const char *src = json_string_value(json_object_get(c, "template"));
        const char *exp = json_string_value(json_object_get(c, "expected"));
        char *out, err[512] = "";
        int rc = render(src, ctx, NULL, &out, err, sizeof err);
        if (!exp) {
            ck_assert_msg(rc != 0, "case %zu [%s]: jinja2 raised, inferd rendered [%s]", i, src,
                          out);
            const char *msg = json_string_value(json_object_get(c, "message"));
            if (msg)
                ck_assert_str_eq(err, msg);
            continue;
        }
        ck_assert_msg(rc == 0, "case %zu [%s]: %s", i, src, err);
        /* strftime_now: only its length is in the golden output */
        ck_assert_msg(strcmp(out, exp) == 0, "case %zu [%s]:\n got      [%s]\n expected [%s]", i,
                      src, out, exp);
        free(out);
    }
    json_decref(doc);
}
END_TEST

/* Constructs outside the subset and syntax errors: refused at parse time,
 * naming the construct and its line. */
START_TEST(test_load_errors)
{
    static const struct {
        const char *src;
        int rc;
        const char *needle;
    } cases[] = {
        {"a\n{% include 'x.j2' %}", IFD_ENOTSUP, "line 2: unsupported tag 'include'"},
        {"{% extends 'base' %}", IFD_ENOTSUP, "'extends'"},
        {"\n\n{% call m() %}x{% endcall %}", IFD_ENOTSUP, "line 3: unsupported tag 'call'"},
        {"{{ x | nosuchfilter }}", IFD_ENOTSUP, "no filter named 'nosuchfilter'"},
        {"{{ x is nosuchtest }}", IFD_ENOTSUP, "no test named 'nosuchtest'"},
        {"{% for x in y recursive %}{% endfor %}", IFD_ENOTSUP, "recursive"},
        {"{{ f(*args) }}", IFD_ENOTSUP, "*args"},
        {"{% if x %}never closed", IFD_EFORMAT, "endif"},
        {"{% for x in y %}{% endif %}", IFD_EFORMAT, "endif"},
        {"{{ 'unterminated }}", IFD_EFORMAT, "unterminated"},
        {"{{ x", IFD_EFORMAT, "unterminated"},
        {"{% break %}", IFD_EFORMAT, "outside a loop"},
        {"{{ 1 + }}", IFD_EFORMAT, "line 1"},
        {"{% frobnicate %}", IFD_EFORMAT, "frobnicate"},
        {"{{ a b }}", IFD_EFORMAT, "unexpected"},
        {"{{ '\\x4' }}", IFD_EFORMAT, "escape"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ifd_jinja_t *t = (ifd_jinja_t *)1;
        char err[256] = "";
        int rc = ifd_jinja_parse(&t, cases[i].src, strlen(cases[i].src), err, sizeof err);
        ck_assert_msg(rc == cases[i].rc, "[%s]: rc %d (%s), want %d", cases[i].src, rc, err,
                      cases[i].rc);
        ck_assert_ptr_null(t);
        ck_assert_msg(strstr(err, cases[i].needle), "[%s]: error '%s' lacks '%s'", cases[i].src,
                      err, cases[i].needle);
    }
    /* an unknown filter inside an if is jinja2's run-time error, not a load error
     * (IFD_ENOTSUP when reached) */
    char *out, err[256];
    ck_assert_int_eq(render("{% if x %}{{ x | nofilter }}{% endif %}ok", NULL, NULL, &out, err,
                            sizeof err),
                     0);
    ck_assert_str_eq(out, "ok");
    free(out);
    json_t *ctx = json_pack("{s:b}", "x", 1);
    ck_assert_int_eq(render("{% if x %}{{ x | nofilter }}{% endif %}", ctx, NULL, &out, err,
                            sizeof err),
                     IFD_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(err, "nofilter"));
    json_decref(ctx);
}
END_TEST

/* Limits: each hostile template ends with IFD_ETOOBIG and a message. */
START_TEST(test_limits)
{
    ifd_jinja_limits_t lim = ifd_jinja_default_limits();
    lim.max_output = 1 << 20;
    lim.max_iters = 100000;
    lim.max_memory = 64u << 20;
    char *out, err[256];
    static const struct {
        const char *src;
        const char *needle;
    } cases[] = {
        {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
         "iterations"},
        {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "deeper"},
        {"{% for i in range(99999) %}{{ 'x' * 1000 }}{% endfor %}", "output"},
        {"{{ 'x' * 100000000 }}", "larger"},
        {"{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
         "{% endfor %}",
         "bytes"},
        {"{{ range(1000000) | length }}", "range"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err[0] = '\0';
        int rc = render(cases[i].src, NULL, &lim, &out, err, sizeof err);
        ck_assert_msg(rc == IFD_ETOOBIG, "[%s]: rc %d (%s)", cases[i].src, rc, err);
        ck_assert_ptr_null(out);
        ck_assert_msg(strstr(err, cases[i].needle), "[%s]: '%s' lacks '%s'", cases[i].src, err,
                      cases[i].needle);
    }
    /* nesting deeper than the parser allows: an error, not a stack overflow */
    size_t depth = 5000;
    char *deep = malloc(depth * 2 + 16);
    size_t o = 0;
    deep[o++] = '{';
    deep[o++] = '{';
    for (size_t i = 0; i < depth; i++)
        deep[o++] = '(';
    deep[o++] = '1';
    for (size_t i = 0; i < depth; i++)
        deep[o++] = ')';
    deep[o++] = '}';
    deep[o++] = '}';
    deep[o] = '\0';
    ifd_jinja_t *t;
    ck_assert_int_eq(ifd_jinja_parse(&t, deep, o, err, sizeof err), IFD_ETOOBIG);
    free(deep);
    char *ifs = malloc(5000 * 12 + 1);
    o = 0;
    for (int i = 0; i < 5000; i++)
        o += (size_t)sprintf(ifs + o, "{%% if 1 %%}");
    ck_assert_int_eq(ifd_jinja_parse(&t, ifs, o, err, sizeof err), IFD_ETOOBIG);
    free(ifs);
}
END_TEST

/* A string of n copies of unit between head and tail (caller frees). */
static char *repeat(const char *head, const char *unit, size_t n, const char *tail)
{
    size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
    char *s = malloc(hl + ul * n + tl + 1), *o = s;
    memcpy(o, head, hl);
    o += hl;
    for (size_t i = 0; i < n; i++, o += ul)
        memcpy(o, unit, ul);
    memcpy(o, tail, tl + 1);
    return s;
}

/* Chains built in loops by the parser (filters, operators, subscripts,
 * attributes): a tree as high as the chain is long, which the renderer would
 * recurse over. 199 links parse and render; 20,000 are refused at parse time
 * with the limit named (issue 31: such a model template crashed the daemon
 * at start-up). */
START_TEST(test_chain_height)
{
    static const struct {
        const char *head, *unit, *tail, *out200;
    } chains[] = {
        {"{{ 'a'", "|trim", " }}", "a"},
        {"{{ 1", " and 1", " }}", "1"},
        {"{{ 1", " + 1", " }}", "201"},
        {"{{ 'a'", "[0]", " }}", "a"},
        {"{{ x", ".y", " }}", ""},
    };
    char err[256];
    for (size_t i = 0; i < sizeof chains / sizeof chains[0]; i++) {
        char *ok = repeat(chains[i].head, chains[i].unit, 199, chains[i].tail);
        char *out = NULL;
        int rc = render(ok, NULL, NULL, &out, err, sizeof err);
        if (chains[i].out200) {
            ck_assert_msg(rc == 0 || rc == IFD_EINVAL, "[%s…]: %d %s", chains[i].unit, rc, err);
            if (rc == 0 && strcmp(chains[i].unit, " + 1"))
                ck_assert_str_eq(out, chains[i].out200);
            else if (rc == 0)
                ck_assert_str_eq(out, "200");
        }
        free(out);
        free(ok);
        char *deep = repeat(chains[i].head, chains[i].unit, 20000, chains[i].tail);
        ifd_jinja_t *t = NULL;
        err[0] = '\0';
        ck_assert_int_eq(ifd_jinja_parse(&t, deep, strlen(deep), err, sizeof err), IFD_ETOOBIG);
        ck_assert_msg(strstr(err, "nested deeper than 200"), "%s", err);
        free(deep);
    }
}
END_TEST

/* Values nested past what a recursion may follow, and evaluation nested
 * through macros: each an IFD_ETOOBIG naming the nesting, never a stack
 * overflow (ifd__j_to_text, equality, tojson, a namespace that holds itself). */
START_TEST(test_runtime_nesting)
{
    static const char *const srcs[] = {
        "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
        "{% endfor %}{{ ns.x }}",
        "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
        "{% endfor %}{{ ns.x == ns.x }}",
        "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
        "{% endfor %}{{ ns.x|tojson }}",
        "{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}",
    };
    char *out, err[256];
    for (size_t i = 0; i < sizeof srcs / sizeof srcs[0]; i++) {
        err[0] = '\0';
        int rc = render(srcs[i], NULL, NULL, &out, err, sizeof err);
        ck_assert_msg(rc == IFD_ETOOBIG, "[%s]: %d %s", srcs[i], rc, err);
        ck_assert_msg(strstr(err, "nested too deeply"), "%s", err);
    }
    /* 64 macro calls, each inside a 150-high expression: 9,600 levels */
    char *m = repeat("{% macro f(n) %}{{ (f(n - 1) if n else 0)", " + 0", 150,
                     " }}{% endmacro %}{{ f(64) }}");
    ck_assert_int_eq(render(m, NULL, NULL, &out, err, sizeof err), IFD_ETOOBIG);
    ck_assert_msg(strstr(err, "nested too deeply"), "%s", err);
    free(m);
}
END_TEST

/* The wall-time budget and the cancel flag stop a rendering whose loops are
 * within the iteration limit but whose steps are long (`in` over a long
 * string), and work on large client values is linear: 100,000 keys looked
 * up, sorted and serialized, 200,000 items made unique, inside a generous
 * budget that the quadratic versions (minutes) would blow. */
START_TEST(test_time_and_scale)
{
    ifd_jinja_limits_t lim = ifd_jinja_default_limits();
    lim.max_time_ms = 200;
    char *out, err[256];
    const char *slow = "{% set s = 'a' * 4000000 %}{% for i in range(100000) %}"
                       "{% if 'b' in s %}x{% endif %}{% endfor %}done";
    ck_assert_int_eq(render(slow, NULL, &lim, &out, err, sizeof err), IFD_ETOOBIG);
    ck_assert_msg(strstr(err, "longer than 200 ms"), "%s", err);
    atomic_int cancel = 1;
    lim.max_time_ms = 0;
    lim.cancel = &cancel;
    ck_assert_int_eq(render(slow, NULL, &lim, &out, err, sizeof err), IFD_ECANCELED);

    json_t *kw = json_object();
    char key[32];
    for (int i = 0; i < 100000; i++) {
        snprintf(key, sizeof key, "k%d", i);
        json_object_set_new(kw, key, json_integer(i));
    }
    json_t *ctx = json_pack("{s:o}", "kw", kw);
    lim = ifd_jinja_default_limits();
    lim.max_time_ms = ifd_test_sanitized() ? 60000 : 20000;
    ck_assert_int_eq(render("{{ kw|length }} {{ kw.k99999 }} {{ kw['k5'] }} "
                            "{{ (kw|tojson(sort_keys=True))|length }} "
                            "{{ (range(100000)|list + range(100000)|list)|unique|list|length }}",
                            ctx, &lim, &out, err, sizeof err),
                     0);
    ck_assert_str_eq(out, "100000 99999 5 1677780 100000");
    free(out);
    json_decref(ctx);
}
END_TEST

/* Context values from JSON: types, order, nesting; no context at all. */
START_TEST(test_context)
{
    json_error_t je;
    json_t *ctx = json_loads("{\"z\": 1, \"a\": [1.5, \"s\", null, true, {\"k\": \"v\"}], "
                             "\"big\": 9007199254740993}",
                             0, &je);
    char *out, err[256];
    ck_assert_int_eq(render("{{ a }}|{{ a | tojson }}|{{ big }}|{{ z is integer }}", ctx, NULL,
                            &out, err, sizeof err),
                     0);
    ck_assert_str_eq(out, "[1.5, 's', None, True, {'k': 'v'}]|[1.5, \"s\", null, true, {\"k\": "
                          "\"v\"}]|9007199254740993|True");
    free(out);
    json_t *arr = json_array();
    ck_assert_int_eq(render("x", arr, NULL, &out, err, sizeof err), IFD_EINVAL);
    json_decref(arr);
    json_decref(ctx);
    ck_assert_int_eq(render("", NULL, NULL, &out, err, sizeof err), 0);
    ck_assert_str_eq(out, "");
    free(out);
}
END_TEST

/* Mutated templates: every mutation parses or fails with an error, and
 * renders or fails with an error; never a crash, a hang or a leak. */
START_TEST(test_mutations)
{
    json_t *doc = load_golden();
    json_t *ctx = json_object_get(doc, "context");
    json_t *cases = json_object_get(doc, "cases");
    static const char alphabet[] = "{}%#-+()[]'\"|.,:~=<>!* \nabcifornedset0123";
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    ifd_jinja_limits_t lim = ifd_jinja_default_limits();
    lim.max_iters = 20000;
    lim.max_output = 1 << 18;
    size_t parsed = 0;
    for (int round = 0; round < 3000; round++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const char *src = json_string_value(
            json_object_get(json_array_get(cases, (seed >> 33) % json_array_size(cases)),
                            "template"));
        size_t n = strlen(src);
        char *m = malloc(n + 8);
        memcpy(m, src, n + 1);
        int edits = 1 + (int)((seed >> 20) % 4);
        for (int e = 0; e < edits && n > 0; e++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (seed >> 33) % n;
            switch ((seed >> 12) % 3) {
            case 0: m[at] = alphabet[(seed >> 40) % (sizeof alphabet - 1)]; break;
            case 1: memmove(m + at, m + at + 1, n - at); n--; break;
            default:
                memmove(m + at + 1, m + at, n - at + 1);
                m[at] = alphabet[(seed >> 40) % (sizeof alphabet - 1)];
                n++;
            }
        }
        ifd_jinja_t *t;
        char err[256];
        if (ifd_jinja_parse(&t, m, n, err, sizeof err) == 0) {
            char *out;
            size_t on;
            parsed++;
            if (ifd_jinja_render(t, ctx, &lim, &out, &on, err, sizeof err) == 0)
                free(out);
            ifd_jinja_destroy(t);
        }
        free(m);
    }
    ck_assert_uint_gt(parsed, 100);
    json_decref(doc);
}
END_TEST

static Suite *jinja_suite(void)
{
    Suite *s = suite_create("jinja");
    ifd_test_case(s, "core", 120,
                  IFD_TESTS(test_golden, test_load_errors, test_limits, test_chain_height,
                            test_runtime_nesting, test_time_and_scale, test_context,
                            test_mutations));
    return s;
}

int main(void)
{
    return ifd_test_run(jinja_suite());
}
