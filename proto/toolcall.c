/*
 * toolcall.c — see toolcall.h. Every format is all-or-nothing: when one
 * block fails to parse (bad JSON, an unknown function) the whole output is
 * returned as content, so nothing the model wrote is lost.
 */
#include "toolcall.h"

#include "error.h"
#include "oai_json.h"

#include <jansson.h>
#include <string.h>

static const char *const MARKERS[] = {"<tool_call>", "[TOOL_CALLS]", "<|python_tag|>"};

static bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

static const ifd_oai_tool_t *find_tool(const ifd_oai_request_t *r, const char *name)
{
    for (size_t i = 0; i < r->n_tools; i++)
        if (strcmp(r->tools[i].name, name) == 0)
            return &r->tools[i];
    return NULL;
}

/* Compact JSON of an arguments value: an object, or a string holding one. */
static char *args_text(ifd_arena_t *a, const json_t *v)
{
    json_t *owned = NULL;
    if (!v) {
        return ifd_arena_strdup(a, "{}");
    }
    if (json_is_string(v)) {
        json_error_t je;
        owned = json_loads(json_string_value(v), 0, &je);
        if (!owned || !json_is_object(owned)) {
            json_decref(owned);
            return NULL;
        }
        v = owned;
    }
    char *d = json_is_object(v) ? ifd__oai_json_dump(a, v) : NULL;
    json_decref(owned);
    return d;
}

typedef struct {
    ifd_toolcall_t *v;
    size_t n, cap;
    int err;
} calls_t;

/* Adds {"name", "arguments"|"parameters"}; false when o is not such a call. */
static bool add_call(ifd_arena_t *a, const ifd_oai_request_t *r, calls_t *c, const json_t *o)
{
    if (!json_is_object(o))
        return false;
    const char *name = json_string_value(json_object_get(o, "name"));
    if (!name || !find_tool(r, name))
        return false;
    const json_t *args = json_object_get(o, "arguments");
    if (!args)
        args = json_object_get(o, "parameters");
    char *at = args_text(a, args);
    char *nm = ifd_arena_strdup(a, name);
    if (!at || !nm)
        return false;
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 4;
        ifd_toolcall_t *v = ifd_arena_alloc(a, cap * sizeof *v);
        if (!v) {
            c->err = IFD_ENOMEM;
            return false;
        }
        if (c->n)
            memcpy(v, c->v, c->n * sizeof *v);
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = (ifd_toolcall_t){nm, at};
    return true;
}

/* One JSON object or an array of them, as calls. */
static bool add_json(ifd_arena_t *a, const ifd_oai_request_t *r, calls_t *c, const char *p,
                     size_t n)
{
    json_error_t je;
    json_t *j = json_loadb(p, n, JSON_DECODE_ANY, &je);
    if (!j)
        return false;
    bool ok = true;
    if (json_is_array(j)) {
        ok = json_array_size(j) > 0;
        for (size_t i = 0; ok && i < json_array_size(j); i++)
            ok = add_call(a, r, c, json_array_get(j, i));
    } else {
        ok = add_call(a, r, c, j);
    }
    json_decref(j);
    return ok;
}

static const char *find(const char *t, size_t len, size_t from, const char *needle)
{
    size_t nl = strlen(needle);
    if (from > len || len - from < nl)
        return NULL;
    return memmem(t + from, len - from, needle, nl);
}

static size_t trim_end(const char *t, size_t n)
{
    while (n && is_ws(t[n - 1]))
        n--;
    return n;
}

static bool parse_hermes(ifd_arena_t *a, const ifd_oai_request_t *r, const char *t, size_t len,
                         calls_t *c, size_t *content)
{
    const char *open = find(t, len, 0, "<tool_call>");
    if (!open)
        return false;
    *content = trim_end(t, (size_t)(open - t));
    size_t at = (size_t)(open - t);
    while (at < len) {
        const char *o = find(t, len, at, "<tool_call>");
        if (!o) {
            /* only whitespace may follow the last block */
            for (size_t i = at; i < len; i++)
                if (!is_ws(t[i]))
                    return false;
            break;
        }
        for (size_t i = at; i < (size_t)(o - t); i++)
            if (!is_ws(t[i]))
                return false;
        size_t body = (size_t)(o - t) + strlen("<tool_call>");
        const char *close = find(t, len, body, "</tool_call>");
        size_t end = close ? (size_t)(close - t) : len;
        if (!add_json(a, r, c, t + body, end - body))
            return false;
        at = close ? end + strlen("</tool_call>") : len;
    }
    return c->n > 0;
}

static bool parse_mistral(ifd_arena_t *a, const ifd_oai_request_t *r, const char *t, size_t len,
                          calls_t *c, size_t *content)
{
    const char *m = find(t, len, 0, "[TOOL_CALLS]");
    if (!m)
        return false;
    *content = trim_end(t, (size_t)(m - t));
    size_t at = (size_t)(m - t);
    while (at < len) {
        const char *mk = find(t, len, at, "[TOOL_CALLS]");
        if (!mk)
            break;
        size_t p = (size_t)(mk - t) + strlen("[TOOL_CALLS]");
        while (p < len && is_ws(t[p]))
            p++;
        const char *next = find(t, len, p, "[TOOL_CALLS]");
        size_t end = next ? (size_t)(next - t) : len;
        if (p < len && (t[p] == '[' || t[p] == '{')) {
            if (!add_json(a, r, c, t + p, end - p))
                return false;
        } else {
            /* name[ARGS]{…} */
            const char *args = find(t, end, p, "[ARGS]");
            if (!args)
                return false;
            size_t nl = (size_t)(args - t) - p;
            char *name = ifd_arena_strndup(a, t + p, nl);
            size_t ap = (size_t)(args - t) + strlen("[ARGS]");
            json_error_t je;
            json_t *aj = json_loadb(t + ap, end - ap, 0, &je);
            json_t *o = json_object();
            bool ok = name && aj && o && json_object_set_new(o, "name", json_string(name)) == 0 &&
                      json_object_set(o, "arguments", aj) == 0 && add_call(a, r, c, o);
            json_decref(aj);
            json_decref(o);
            if (!ok)
                return false;
        }
        at = end;
    }
    return c->n > 0;
}

static bool parse_llama(ifd_arena_t *a, const ifd_oai_request_t *r, const char *t, size_t len,
                        calls_t *c)
{
    size_t p = 0;
    while (p < len && is_ws(t[p]))
        p++;
    size_t tag = strlen("<|python_tag|>");
    if (len - p >= tag && memcmp(t + p, "<|python_tag|>", tag) == 0)
        p += tag;
    while (p < len && is_ws(t[p]))
        p++;
    if (p >= len || (t[p] != '{' && t[p] != '['))
        return false;
    /* several objects separated by ';' (Llama 3.2's habit) */
    size_t start = p;
    if (add_json(a, r, c, t + start, len - start))
        return true;
    c->n = 0;
    while (start < len) {
        const char *semi = memchr(t + start, ';', len - start);
        size_t end = semi ? (size_t)(semi - t) : len;
        if (!add_json(a, r, c, t + start, end - start))
            return false;
        start = end + 1;
        while (start < len && is_ws(t[start]))
            start++;
    }
    return c->n > 0;
}

int ifd_toolcall_parse(ifd_arena_t *a, const char *text, size_t len, const ifd_oai_request_t *req,
                       ifd_toolcall_result_t *out)
{
    memset(out, 0, sizeof *out);
    out->content_len = len;
    if (!text || req->tool_choice == IFD_OAI_TOOL_CHOICE_NONE || !req->n_tools)
        return 0;
    calls_t c = {0};
    size_t content = 0;
    bool ok = false;
    switch (req->tool_choice) {
    case IFD_OAI_TOOL_CHOICE_NAMED: {
        json_error_t je;
        json_t *j = json_loadb(text, len, 0, &je);
        json_t *o = json_object();
        ok = j && o &&
             json_object_set_new(o, "name", json_string(req->tools[req->tool_index].name)) == 0 &&
             json_object_set(o, "arguments", j) == 0 && add_call(a, req, &c, o);
        json_decref(j);
        json_decref(o);
        break;
    }
    case IFD_OAI_TOOL_CHOICE_REQUIRED:
        ok = add_json(a, req, &c, text, len);
        break;
    default:
        ok = parse_hermes(a, req, text, len, &c, &content);
        if (!ok) {
            c.n = 0;
            content = 0;
            ok = parse_mistral(a, req, text, len, &c, &content);
        }
        if (!ok) {
            c.n = 0;
            content = 0;
            ok = parse_llama(a, req, text, len, &c);
        }
        break;
    }
    if (c.err)
        return c.err;
    if (!ok)
        return 0;
    /* parallel_tool_calls false: the first call only, as vLLM and OpenAI answer
     * (the forced array's grammar already allows one; auto mode parses what
     * the model wrote) */
    if (!req->parallel_tool_calls && c.n > 1)
        c.n = 1;
    out->content_len = content;
    out->calls = c.v;
    out->n_calls = c.n;
    return 0;
}

size_t ifd_toolcall_hold_from(const char *text, size_t len)
{
    size_t p = 0;
    while (p < len && is_ws(text[p]))
        p++;
    if (p < len && (text[p] == '{' || text[p] == '['))
        return 0;
    size_t best = len;
    for (size_t m = 0; m < sizeof MARKERS / sizeof MARKERS[0]; m++) {
        const char *f = find(text, len, 0, MARKERS[m]);
        if (f && (size_t)(f - text) < best)
            best = (size_t)(f - text);
        size_t ml = strlen(MARKERS[m]);
        for (size_t k = ml - 1; k > 0; k--) {
            if (k <= len && memcmp(text + len - k, MARKERS[m], k) == 0) {
                if (len - k < best)
                    best = len - k;
                break;
            }
        }
    }
    return best;
}
