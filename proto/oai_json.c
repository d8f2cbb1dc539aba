/*
 * oai_json.c — see oai_json.h. The one home of the OpenAI JSON helpers:
 * openai.c, openai_ext.c and responses.c call these and nothing of each
 * other's, so a getter's wording or a builder's sanitizing is written once.
 */
#include "oai_json.h"

#include "error.h"
#include "utf8.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading a request --------------------------------------------------------------- */

int ifd__oai_json_fail(ifd__oai_json_ctx_t *c, const char *code, const char *param, const char *fmt,
                       ...)
{
    /* formatted here, then copied: the same bytes (and the same cut) as
     * formatting straight into the error */
    char msg[sizeof c->err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ifd_oai_error_set(c->err, 400, "invalid_request_error", code, param, "%s", msg);
    return IFD_EINVAL;
}

int ifd__oai_json_oom(ifd__oai_json_ctx_t *c)
{
    ifd_oai_error_set(c->err, 500, NULL, NULL, NULL, "out of memory");
    return IFD_ENOMEM;
}

const char *ifd__oai_json_type_name(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a decimal number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

int ifd__oai_json_bad_type(ifd__oai_json_ctx_t *c, const char *param, const char *want,
                           const json_t *j)
{
    return ifd__oai_json_fail(c, "invalid_type", param,
                              "Invalid type for '%s': expected %s, but got %s instead.", param,
                              want, ifd__oai_json_type_name(j));
}

int ifd__oai_json_missing(ifd__oai_json_ctx_t *c, const char *param)
{
    return ifd__oai_json_fail(c, "missing_required_parameter", param,
                              "Missing required parameter: '%s'.", param);
}

json_t *ifd__oai_json_get(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return (v && !json_is_null(v)) ? v : NULL;
}

int ifd__oai_json_number(ifd__oai_json_ctx_t *c, const json_t *j, const char *param, double lo,
                         bool lo_open, double hi, float *out)
{
    if (!json_is_number(j))
        return ifd__oai_json_bad_type(c, param, "a decimal", j);
    double v = json_number_value(j);
    if (v < lo || (lo_open && v == lo))
        return ifd__oai_json_fail(
            c, "decimal_below_min_value", param,
            "Invalid '%s': decimal below minimum value. Expected a value %s %g, but "
            "got %g instead.",
            param, lo_open ? ">" : ">=", lo, v);
    if (v > hi)
        return ifd__oai_json_fail(
            c, "decimal_above_max_value", param,
            "Invalid '%s': decimal above maximum value. Expected a value <= %g, but "
            "got %g instead.",
            param, hi, v);
    *out = (float)v;
    return 0;
}

int ifd__oai_json_int(ifd__oai_json_ctx_t *c, const json_t *j, const char *param, int64_t lo,
                      int64_t hi, int64_t *out)
{
    if (!json_is_integer(j)) {
        if (json_is_real(j))
            return ifd__oai_json_fail(
                c, "invalid_type", param,
                "Invalid type for '%s': expected an integer, but got a decimal number "
                "instead.",
                param);
        return ifd__oai_json_bad_type(c, param, "an integer", j);
    }
    int64_t v = json_integer_value(j);
    if (v < lo)
        return ifd__oai_json_fail(
            c, "integer_below_min_value", param,
            "Invalid '%s': integer below minimum value. Expected a value >= %" PRId64
            ", but got %" PRId64 " instead.",
            param, lo, v);
    if (v > hi)
        return ifd__oai_json_fail(
            c, "integer_above_max_value", param,
            "Invalid '%s': integer above maximum value. Expected a value <= %" PRId64
            ", but got %" PRId64 " instead.",
            param, hi, v);
    *out = v;
    return 0;
}

int ifd__oai_json_bool(ifd__oai_json_ctx_t *c, const json_t *j, const char *param, bool *out)
{
    if (!json_is_boolean(j))
        return ifd__oai_json_bad_type(c, param, "a boolean", j);
    *out = json_is_true(j);
    return 0;
}

bool ifd__oai_json_has_nul(const json_t *j)
{
    return json_is_string(j) && memchr(json_string_value(j), '\0', json_string_length(j));
}

bool ifd__oai_json_is(const json_t *j, const char *lit)
{
    size_t n = strlen(lit);
    return json_is_string(j) && json_string_length(j) == n && !memcmp(json_string_value(j), lit, n);
}

int ifd__oai_json_nul(ifd__oai_json_ctx_t *c, const char *param)
{
    return ifd__oai_json_fail(c, "invalid_value", param,
                              "Invalid '%s': it contains a NUL character (\\u0000), which this "
                              "field cannot hold.",
                              param);
}

/* Recursion is bounded by the JSON parser's depth limit. */
int ifd__oai_json_no_nul(ifd__oai_json_ctx_t *c, const json_t *j, const char *param)
{
    size_t i;
    const char *k;
    json_t *v;
    switch (json_typeof(j)) {
    case JSON_STRING:
        return ifd__oai_json_has_nul(j) ? ifd__oai_json_nul(c, param) : 0;
    case JSON_ARRAY:
        json_array_foreach(j, i, v)
        {
            if (ifd__oai_json_no_nul(c, v, param))
                return IFD_EINVAL;
        }
        return 0;
    case JSON_OBJECT:
        json_object_foreach((json_t *)j, k, v)
        {
            if (ifd__oai_json_no_nul(c, v, param))
                return IFD_EINVAL;
        }
        return 0;
    default:
        return 0;
    }
}

/* The arena copy is the whole string, NULs and all. */
int ifd__oai_json_string(ifd__oai_json_ctx_t *c, const json_t *j, const char *param, char **out,
                         size_t *len)
{
    if (!json_is_string(j))
        return ifd__oai_json_bad_type(c, param, "a string", j);
    if (!len && ifd__oai_json_has_nul(j))
        return ifd__oai_json_nul(c, param);
    size_t n = json_string_length(j);
    char *s = ifd_arena_strndup(c->a, json_string_value(j), n);
    if (!s)
        return ifd__oai_json_oom(c);
    *out = s;
    if (len)
        *len = n;
    return 0;
}

char *ifd__oai_json_dump(ifd_arena_t *a, const json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s)
        return NULL;
    char *d = ifd_arena_strdup(a, s);
    free(s);
    return d;
}

/* ---- building a response ------------------------------------------------------------- */

json_t *ifd__oai_json_str(const char *p, size_t n)
{
    if (!p || n == 0)
        return json_string("");
    json_t *s = json_stringn(p, n); /* succeeds iff valid UTF-8 */
    if (s || n > SIZE_MAX / 3)
        return s;
    char *clean = malloc(3 * n); /* what ifd_utf8_sanitize may write at most */
    if (!clean)
        return NULL;
    s = json_stringn_nocheck(clean, ifd_utf8_sanitize(clean, p, n));
    free(clean);
    return s;
}

json_t *ifd__oai_json_real(double v)
{
    if (!isfinite(v))
        v = v > 0 ? 9999.0 : -9999.0;
    return json_real(v);
}

void ifd__oai_json_set(json_t *o, const char *key, json_t *v, int *bad)
{
    if (!o || !v || json_object_set_new(o, key, v) != 0)
        (*bad)++;
}

void ifd__oai_json_add(json_t *a, json_t *v, int *bad)
{
    if (!a || !v || json_array_append_new(a, v) != 0)
        (*bad)++;
}

static int dump_cb(const char *p, size_t n, void *data)
{
    return ifd_buf_append(data, p, n) == 0 ? 0 : -1;
}

/* No newlines (a dump is one SSE data line); floats to 9 significant
 * digits, enough for a float logprob to read back the same. */
#define DUMP_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(9))

/* Appends j (consumed): bare, or as one SSE event ("data: …\n\n", after
 * "event: <event>\n" when event is not NULL). On failure out is unchanged. */
static int emit(ifd_buf_t *out, json_t *j, int bad, bool sse, const char *event)
{
    size_t start = out->len;
    int rc = 0;
    if (!j || bad) {
        rc = IFD_ENOMEM;
        goto done;
    }
    if ((event && ifd_buf_printf(out, "event: %s\n", event) < 0) ||
        (sse && ifd_buf_append(out, "data: ", 6) < 0) ||
        json_dump_callback(j, dump_cb, out, DUMP_FLAGS) != 0 ||
        (sse && ifd_buf_append(out, "\n\n", 2) < 0))
        rc = IFD_ENOMEM;
done:
    json_decref(j);
    if (rc < 0) {
        out->len = start;
        if (out->data)
            out->data[start] = '\0';
    }
    return rc;
}

int ifd__oai_json_emit(ifd_buf_t *out, json_t *j, int bad, bool sse)
{
    return emit(out, j, bad, sse, NULL);
}

int ifd__oai_json_emit_event(ifd_buf_t *out, const char *event, json_t *j, int bad)
{
    return emit(out, j, bad, true, event);
}

json_t *ifd__oai_json_error(const ifd_oai_error_t *e, int *bad)
{
    json_t *o = json_object();
    ifd__oai_json_set(o, "message", ifd__oai_json_str(e->message, strlen(e->message)), bad);
    ifd__oai_json_set(o, "type", json_string(e->type), bad);
    ifd__oai_json_set(o, "param", e->param[0] ? json_string(e->param) : json_null(), bad);
    ifd__oai_json_set(o, "code", e->code[0] ? json_string(e->code) : json_null(), bad);
    return o;
}

/* A token's raw bytes as integers: the one place invalid UTF-8 survives. */
static json_t *bytes_array(const char *p, size_t n, int *bad)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        ifd__oai_json_add(a, json_integer((unsigned char)p[i]), bad);
    return a;
}

/* {token, logprob, bytes} of one token. */
static json_t *logprob_entry(const char *p, size_t n, double logprob, int *bad)
{
    json_t *e = json_object();
    ifd__oai_json_set(e, "token", ifd__oai_json_str(p, n), bad);
    ifd__oai_json_set(e, "logprob", ifd__oai_json_real(logprob), bad);
    ifd__oai_json_set(e, "bytes", bytes_array(p, n, bad), bad);
    return e;
}

json_t *ifd__oai_json_logprob_items(const ifd_oai_logprob_t *lp, size_t n, int *bad)
{
    json_t *content = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *e = logprob_entry(lp[i].bytes, lp[i].len, lp[i].logprob, bad);
        json_t *top = json_array();
        for (size_t k = 0; k < lp[i].n_top; k++) {
            const ifd_oai_top_logprob_t *t = &lp[i].top[k];
            ifd__oai_json_add(top, logprob_entry(t->bytes, t->len, t->logprob, bad), bad);
        }
        ifd__oai_json_set(e, "top_logprobs", top, bad);
        ifd__oai_json_add(content, e, bad);
    }
    return content;
}
