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

int ifd__oai_json_logprobs(ifd__oai_json_ctx_t *c, const json_t *j, const char *param, int64_t *out)
{
    return ifd__oai_json_int(c, j, param, -1, INT32_MAX, out);
}

int ifd__oai_json_empty_array(ifd__oai_json_ctx_t *c, const char *param)
{
    return ifd__oai_json_fail(
        c, "empty_array", param,
        "Invalid '%s': empty array. Expected an array with minimum length 1, but got "
        "an empty array instead.",
        param);
}

int ifd__oai_json_array_too_long(ifd__oai_json_ctx_t *c, const char *param, size_t max, size_t got)
{
    return ifd__oai_json_fail(
        c, "array_above_max_length", param,
        "Invalid '%s': array too long. Expected an array with maximum length %zu, but "
        "got an array with length %zu instead.",
        param, max, got);
}

int ifd__oai_json_token_array(ifd__oai_json_ctx_t *c, const json_t *j, const char *base, size_t max,
                              bool allow_empty, int32_t **out, size_t *n_out)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    if (!json_is_array(j))
        return ifd__oai_json_bad_type(c, base, "an array", j);
    size_t n = json_array_size(j);
    if (n == 0 && !allow_empty)
        return ifd__oai_json_empty_array(c, base);
    if (n > max)
        return ifd__oai_json_array_too_long(c, base, max, n);
    int32_t *ids = n ? ifd_arena_alloc(c->a, n * sizeof(int32_t)) : NULL;
    if (n && !ids)
        return ifd__oai_json_oom(c);
    for (size_t i = 0; i < n; i++) {
        snprintf(param, sizeof(param), "%s[%zu]", base, i);
        int64_t v = 0;
        int rc = ifd__oai_json_int(c, json_array_get(j, i), param, 0, INT32_MAX, &v);
        if (rc < 0)
            return rc;
        ids[i] = (int32_t)v;
    }
    *out = ids;
    *n_out = n;
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

/* ---- writing JSON text straight into a buffer ------------------------------------- */

void ifd__oai_w_begin(ifd__oai_w_t *w, ifd_buf_t *out, size_t limit)
{
    w->out = out;
    w->start = out->len;
    w->limit = limit;
    w->rc = 0;
    w->tmp = (ifd_buf_t)IFD_BUF_INIT;
}

int ifd__oai_w_end(ifd__oai_w_t *w)
{
    ifd_buf_free(&w->tmp);
    if (w->rc) {
        w->out->len = w->start;
        if (w->out->data)
            w->out->data[w->start] = '\0';
    }
    return w->rc;
}

/* Room for n more bytes at the end of the output, or NULL once failed. */
static char *w_room(ifd__oai_w_t *w, size_t n)
{
    if (w->rc)
        return NULL;
    if (ifd_buf_reserve(w->out, n)) {
        w->rc = IFD_ENOMEM;
        return NULL;
    }
    return w->out->data + w->out->len;
}

/* n bytes were written at w_room's pointer. */
static void w_grew(ifd__oai_w_t *w, size_t n)
{
    w->out->len += n;
    w->out->data[w->out->len] = '\0';
    if (w->limit && w->out->len - w->start > w->limit)
        w->rc = IFD_ETOOBIG;
}

void ifd__oai_w_raw(ifd__oai_w_t *w, const char *p, size_t n)
{
    char *d = w_room(w, n);
    if (!d)
        return;
    memcpy(d, p, n);
    w_grew(w, n);
}

void ifd__oai_w_cstr(ifd__oai_w_t *w, const char *s)
{
    ifd__oai_w_str(w, s, s ? strlen(s) : 0);
}

/* Input bytes escaped per reservation: the output of a slice is at most 6
 * bytes per byte (a control character), plus a sequence running past it. */
#define W_SLICE 16384

void ifd__oai_w_str(ifd__oai_w_t *w, const char *p, size_t n)
{
    static const char hex[] = "0123456789ABCDEF"; /* jansson writes \u001F */
    const uint8_t *s = (const uint8_t *)p;
    size_t i = 0;
    if (!p)
        n = 0; /* as ifd__oai_json_str: "" */
    ifd__oai_w_raw(w, "\"", 1);
    while (i < n) {
        size_t end = n - i > W_SLICE ? i + W_SLICE : n;
        char *d = w_room(w, 6 * (end - i) + 8);
        if (!d)
            return;
        char *o = d;
        while (i < end) {
            uint8_t c = s[i];
            if (c >= 0x20 && c < 0x80) {
                if (c == '"' || c == '\\')
                    *o++ = '\\';
                *o++ = (char)c;
                i++;
            } else if (c < 0x20) {
                *o++ = '\\';
                switch (c) {
                case '\b':
                    *o++ = 'b';
                    break;
                case '\f':
                    *o++ = 'f';
                    break;
                case '\n':
                    *o++ = 'n';
                    break;
                case '\r':
                    *o++ = 'r';
                    break;
                case '\t':
                    *o++ = 't';
                    break;
                default:
                    memcpy(o, "u00", 3);
                    o[3] = hex[c >> 4];
                    o[4] = hex[c & 15];
                    o += 5;
                }
                i++;
            } else {
                /* the steps of ifd_utf8_sanitize: a valid sequence, or U+FFFD */
                int k = ifd_utf8_check(s + i, n - i);
                if (k > 0) {
                    memcpy(o, s + i, (size_t)k);
                    o += k;
                    i += (size_t)k;
                } else {
                    memcpy(o, "\xEF\xBF\xBD", 3);
                    o += 3;
                    i += k < 0 ? (size_t)-k : n - i;
                }
            }
        }
        w_grew(w, (size_t)(o - d));
    }
    ifd__oai_w_raw(w, "\"", 1);
}

/* A double as jansson's jsonp_dtostr prints it: "%.<precision>g", ".0"
 * added when it would read back as an integer, the exponent without '+'
 * or leading zeros. Returns the length. */
static size_t w_dtostr(char *buf, size_t size, double v)
{
    int r = snprintf(buf, size, "%.9g", v);
    if (r < 0 || (size_t)r + 3 >= size)
        return 0;
    size_t len = (size_t)r;
    if (!strchr(buf, '.') && !strchr(buf, 'e')) {
        memcpy(buf + len, ".0", 3);
        len += 2;
    }
    char *start = strchr(buf, 'e');
    if (start) {
        start++;
        char *end = start + 1;
        if (*start == '-')
            start++;
        while (*end == '0')
            end++;
        if (end != start) {
            memmove(start, end, len - (size_t)(end - buf) + 1);
            len -= (size_t)(end - start);
        }
    }
    return len;
}

void ifd__oai_w_real(ifd__oai_w_t *w, double v)
{
    if (!isfinite(v))
        v = v > 0 ? 9999.0 : -9999.0;
    char buf[48];
    size_t len = w_dtostr(buf, sizeof buf, v);
    if (!len) {
        if (!w->rc)
            w->rc = IFD_ENOMEM; /* cannot happen: %.9g fits */
        return;
    }
    ifd__oai_w_raw(w, buf, len);
}

void ifd__oai_w_int(ifd__oai_w_t *w, int64_t v)
{
    char buf[24], *e = buf + sizeof buf, *p = e;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    ifd__oai_w_raw(w, p, (size_t)(e - p));
}

static int w_dump_cb(const char *p, size_t n, void *data)
{
    ifd__oai_w_t *w = data;
    ifd__oai_w_raw(w, p, n);
    return w->rc ? -1 : 0;
}

void ifd__oai_w_json(ifd__oai_w_t *w, json_t *j, int bad, bool embed)
{
    if (!w->rc && (!j || bad))
        w->rc = IFD_ENOMEM;
    if (!w->rc &&
        json_dump_callback(j, w_dump_cb, w,
                           DUMP_FLAGS | JSON_ENCODE_ANY | (embed ? JSON_EMBED : 0)) != 0 &&
        !w->rc)
        w->rc = IFD_ENOMEM;
    json_decref(j);
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

/* ---- the logprobs shapes, written ------------------------------------------------- */

/* {"token":S,"logprob":R,"bytes":[…] of one token, without its closing brace. */
static void w_lp_entry(ifd__oai_w_t *w, const char *p, size_t n, double logprob)
{
    if (!p)
        n = 0;
    IFD__OAI_W_LIT(w, "{\"token\":");
    ifd__oai_w_str(w, p, n);
    IFD__OAI_W_LIT(w, ",\"logprob\":");
    ifd__oai_w_real(w, logprob);
    IFD__OAI_W_LIT(w, ",\"bytes\":[");
    char *d = w_room(w, 4 * n + 1);
    if (!d)
        return;
    char *o = d;
    for (size_t i = 0; i < n; i++) {
        unsigned b = (unsigned char)p[i];
        if (i)
            *o++ = ',';
        if (b >= 100)
            *o++ = (char)('0' + b / 100);
        if (b >= 10)
            *o++ = (char)('0' + b / 10 % 10);
        *o++ = (char)('0' + b % 10);
    }
    *o++ = ']';
    w_grew(w, (size_t)(o - d));
}

void ifd__oai_w_chat_logprobs(ifd__oai_w_t *w, const ifd_oai_logprob_t *lp, size_t n)
{
    if (n && !lp && !w->rc)
        w->rc = IFD_ENOMEM; /* as the tree builders count a missing value */
    IFD__OAI_W_LIT(w, "{\"content\":[");
    for (size_t i = 0; i < n && !w->rc; i++) {
        if (i)
            IFD__OAI_W_LIT(w, ",");
        w_lp_entry(w, lp[i].bytes, lp[i].len, lp[i].logprob);
        IFD__OAI_W_LIT(w, ",\"top_logprobs\":[");
        for (size_t k = 0; k < lp[i].n_top; k++) {
            const ifd_oai_top_logprob_t *t = &lp[i].top[k];
            if (k)
                IFD__OAI_W_LIT(w, ",");
            w_lp_entry(w, t->bytes, t->len, t->logprob);
            IFD__OAI_W_LIT(w, "}");
        }
        IFD__OAI_W_LIT(w, "]}");
    }
    IFD__OAI_W_LIT(w, "],\"refusal\":null}");
}

/* Completions' {"<token>": logprob, …} of one token's alternatives. Keys
 * are C strings in a JSON object: the sanitized text cut at a NUL, and a
 * key met again keeps its first place and takes the later value. The keys
 * are sanitized once into w->tmp (koff[k] .. koff[k + 1]). */
static void w_top_object(ifd__oai_w_t *w, const ifd_oai_top_logprob_t *t, size_t n)
{
    size_t koff_small[33], *koff = koff_small;
    if (n + 1 > sizeof koff_small / sizeof koff_small[0] &&
        !(koff = malloc((n + 1) * sizeof *koff))) {
        w->rc = IFD_ENOMEM;
        return;
    }
    ifd_buf_clear(&w->tmp);
    koff[0] = 0;
    for (size_t k = 0; k < n && !w->rc; k++) {
        const char *p = t[k].bytes ? t[k].bytes : "";
        size_t len = t[k].bytes ? t[k].len : 0;
        const char *nul = memchr(p, 0, len);
        if (nul)
            len = (size_t)(nul - p);
        if (ifd_buf_reserve(&w->tmp, 3 * len))
            w->rc = IFD_ENOMEM;
        else
            w->tmp.len += ifd_utf8_sanitize(w->tmp.data + w->tmp.len, p, len);
        koff[k + 1] = w->tmp.len;
    }
#define KEQ(a, b)                                                                                  \
    (koff[(a) + 1] - koff[a] == koff[(b) + 1] - koff[b] &&                                         \
     memcmp(w->tmp.data + koff[a], w->tmp.data + koff[b], koff[(a) + 1] - koff[a]) == 0)
    IFD__OAI_W_LIT(w, "{");
    bool first = true;
    for (size_t k = 0; k < n && !w->rc; k++) {
        bool seen = false;
        for (size_t j = 0; j < k && !seen; j++)
            seen = KEQ(j, k);
        if (seen)
            continue;
        size_t last = k;
        for (size_t j = k + 1; j < n; j++)
            if (KEQ(j, k))
                last = j;
        if (!first)
            IFD__OAI_W_LIT(w, ",");
        first = false;
        ifd__oai_w_str(w, w->tmp.data + koff[k], koff[k + 1] - koff[k]);
        IFD__OAI_W_LIT(w, ":");
        ifd__oai_w_real(w, t[last].logprob);
    }
#undef KEQ
    IFD__OAI_W_LIT(w, "}");
    if (koff != koff_small)
        free(koff);
}

void ifd__oai_w_completion_column(ifd__oai_w_t *w, int column, const ifd_oai_logprob_t *lp,
                                  size_t n, uint64_t *chars)
{
    for (size_t i = 0; i < n && !w->rc; i++) {
        const ifd_oai_logprob_t *l = &lp[i];
        if (i)
            IFD__OAI_W_LIT(w, ",");
        switch (column) {
        case 0:
            ifd__oai_w_str(w, l->bytes, l->bytes ? l->len : 0);
            break;
        case 1:
            if (l->no_logprob)
                IFD__OAI_W_LIT(w, "null");
            else
                ifd__oai_w_real(w, l->logprob);
            break;
        case 2:
            if (l->no_logprob) {
                IFD__OAI_W_LIT(w, "null");
            } else if (l->n_top == 0) { /* logprobs: 0 — vLLM's {token: its logprob} */
                ifd_oai_top_logprob_t self = {l->bytes, l->bytes ? l->len : 0, l->logprob};
                w_top_object(w, &self, 1);
            } else {
                w_top_object(w, l->top, l->n_top);
            }
            break;
        default:
            ifd__oai_w_int(w, (int64_t)*chars);
            *chars += ifd_utf8_count(l->bytes, l->bytes ? l->len : 0);
            break;
        }
    }
}

void ifd__oai_w_completion_logprobs(ifd__oai_w_t *w, const ifd_oai_lp_prefix_t *prefix,
                                    const ifd_oai_logprob_t *lp, size_t n, uint64_t offset)
{
    static const char *const head[4] = {"{\"tokens\":[", "],\"token_logprobs\":[",
                                        "],\"top_logprobs\":[", "],\"text_offset\":["};
    if (n && !lp && !w->rc)
        w->rc = IFD_ENOMEM;
    for (int col = 0; col < 4 && !w->rc; col++) {
        ifd__oai_w_raw(w, head[col], strlen(head[col]));
        uint64_t chars = offset;
        if (prefix) {
            const ifd_buf_t *b = col == 0   ? &prefix->tokens
                                 : col == 1 ? &prefix->token_logprobs
                                 : col == 2 ? &prefix->top_logprobs
                                            : &prefix->text_offset;
            if (b->len)
                ifd__oai_w_raw(w, b->data, b->len);
            if (prefix->n && n)
                IFD__OAI_W_LIT(w, ",");
            chars += prefix->chars;
        }
        ifd__oai_w_completion_column(w, col, lp, n, &chars);
    }
    IFD__OAI_W_LIT(w, "]}");
}

/* "<id>":{"logprob":R,"rank":I,"decoded_token":S} */
static void w_plp_entry(ifd__oai_w_t *w, const ifd_oai_plp_token_t *t, uint32_t rank)
{
    IFD__OAI_W_LIT(w, "\"");
    ifd__oai_w_int(w, (int)t->id);
    IFD__OAI_W_LIT(w, "\":{\"logprob\":");
    ifd__oai_w_real(w, t->logprob);
    IFD__OAI_W_LIT(w, ",\"rank\":");
    ifd__oai_w_int(w, rank);
    IFD__OAI_W_LIT(w, ",\"decoded_token\":");
    ifd__oai_w_str(w, t->bytes, t->bytes ? t->len : 0);
    IFD__OAI_W_LIT(w, "}");
}

/* A row's entry: its id and place (0: the token itself, e > 0: the
 * alternative e - 1). */
typedef struct {
    int32_t id;
    uint32_t at;
} plp_key_t;

static int plp_key_cmp(const void *x, const void *y)
{
    const plp_key_t *a = x, *b = y;
    if (a->id != b->id)
        return a->id < b->id ? -1 : 1;
    return a->at < b->at ? -1 : a->at > b->at;
}

/* Each row's entries sorted by (id, place): an id's first place writes the
 * entry of its last place (what a JSON object built key by key keeps) —
 * O(m log m) a row where comparing every pair was O(m²) (m reaches the
 * vocabulary with --max-logprobs -1). */
void ifd__oai_w_prompt_logprobs(ifd__oai_w_t *w, const ifd_oai_prompt_logprob_t *v, size_t n,
                                uint32_t top)
{
    size_t cap = 0;
    for (size_t i = 0; i < n; i++) {
        size_t m = v[i].n_top < top ? v[i].n_top : top;
        cap = m + 1 > cap ? m + 1 : cap;
    }
    plp_key_t *keys = NULL;
    uint32_t *last = NULL; /* last[e]: the place to write at e, UINT32_MAX: none */
    if (cap && (!(keys = malloc(cap * sizeof *keys)) || !(last = malloc(cap * sizeof *last))))
        w->rc = IFD_ENOMEM;
    IFD__OAI_W_LIT(w, "[null");
    for (size_t i = 0; i < n && !w->rc; i++) {
        const ifd_oai_prompt_logprob_t *p = &v[i];
        size_t m = p->n_top < top ? p->n_top : top;
        for (size_t e = 0; e <= m; e++) {
            keys[e] = (plp_key_t){e ? p->top[e - 1].id : p->tok.id, (uint32_t)e};
            last[e] = UINT32_MAX;
        }
        qsort(keys, m + 1, sizeof *keys, plp_key_cmp);
        for (size_t k = 0, g; k <= m; k = g) {
            for (g = k + 1; g <= m && keys[g].id == keys[k].id; g++)
                ;
            last[keys[k].at] = keys[g - 1].at;
        }
        IFD__OAI_W_LIT(w, ",{");
        bool first = true;
        for (size_t e = 0; e <= m; e++) {
            if (last[e] == UINT32_MAX)
                continue;
            if (!first)
                IFD__OAI_W_LIT(w, ",");
            first = false;
            if (last[e])
                w_plp_entry(w, &p->top[last[e] - 1], last[e]);
            else
                w_plp_entry(w, &p->tok, p->tok.rank);
        }
        IFD__OAI_W_LIT(w, "}");
    }
    IFD__OAI_W_LIT(w, "]");
    free(keys);
    free(last);
}
