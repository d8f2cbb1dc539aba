/*
 * openai.c — OpenAI request parsing/validation and response JSON (see
 * openai.h).
 *
 * Parsing: jansson reads the body; each field is then checked by a small
 * typed getter (oai_json.h) that names the field's full path in the error,
 * in OpenAI's wording, and copies what it keeps into the request arena, so
 * the JSON tree is freed before returning. The fields beyond sampling are
 * openai_ext.c's. Responses are built as jansson trees and dumped compactly
 * (no newlines, so a dump is one SSE data line) straight into the output
 * buffer; under meta kind IFD_OAI_RESPONSES the builders hand over to
 * responses.c (responses_impl.h) after their own argument checks.
 */
#include "openai.h"

#include "error.h"
#include "oai_json.h"
#include "openai_ext.h"
#include "responses_impl.h"
#include "sse.h"
#include "utf8.h"
#include "grammar/schema_json.h"

#include <jansson.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------------------ */

const char *ifd_oai_error_type(int status)
{
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 429:
        return "rate_limit_error";
    case 503:
        return "service_unavailable_error";
    default:
        return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    if (!src)
        src = "";
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

void ifd_oai_error_set(ifd_oai_error_t *e, int status, const char *type, const char *code,
                       const char *param, const char *fmt, ...)
{
    e->status = status;
    copy_str(e->type, sizeof(e->type), type ? type : ifd_oai_error_type(status));
    copy_str(e->code, sizeof(e->code), code);
    copy_str(e->param, sizeof(e->param), param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
}

/* {"error": {message, type, param, code}}: OpenAI's error body. */
static json_t *error_obj(const ifd_oai_error_t *e, int *bad)
{
    json_t *o = json_object();
    ifd__oai_json_set(o, "error", ifd__oai_json_error(e, bad), bad);
    return o;
}

int ifd_oai_error_json(ifd_buf_t *out, const ifd_oai_error_t *e)
{
    int bad = 0;
    json_t *o = error_obj(e, &bad);
    return ifd__oai_json_emit(out, o, bad, false);
}

int ifd_oai_stream_error(ifd_buf_t *out, const ifd_oai_error_t *e)
{
    int bad = 0;
    json_t *o = error_obj(e, &bad);
    return ifd__oai_json_emit(out, o, bad, true);
}

int ifd_oai_stream_fail(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_error_t *e)
{
    if (s->meta.kind == IFD_OAI_RESPONSES && s->resp)
        return ifd__resp_stream_fail(s, out, e);
    int rc = ifd_oai_stream_error(out, e);
    return rc ? rc : ifd_sse_done(out);
}

/* ---- request parsing ------------------------------------------------------------------- */

static const char *const k_roles[] = {"system",    "developer", "user",
                                      "assistant", "tool",      "function"};

/* One image part's image_url ({"url": "...", "detail": ignored}) appended
 * to rq's images (rq NULL: the endpoint takes no images, a 400). */
static int p_image_part(ifd__oai_json_ctx_t *c, const json_t *part, size_t i, size_t k,
                        ifd_oai_request_t *rq)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    snprintf(param, sizeof(param), "messages[%zu].content[%zu].type", i, k);
    if (!rq)
        return ifd__oai_json_fail(c, "invalid_value", param,
                                  "Invalid value: 'image_url'. This endpoint does not take "
                                  "images.");
    if (rq->n_images >= IFD_OAI_MAX_IMAGES)
        return ifd__oai_json_fail(c, "invalid_value", param,
                                  "Too many images: a request may hold at most %d.",
                                  IFD_OAI_MAX_IMAGES);
    snprintf(param, sizeof(param), "messages[%zu].content[%zu].image_url", i, k);
    const json_t *iu = ifd__oai_json_get(part, "image_url");
    if (!iu)
        return ifd__oai_json_missing(c, param);
    if (!json_is_object(iu))
        return ifd__oai_json_bad_type(c, param, "an object", iu);
    snprintf(param, sizeof(param), "messages[%zu].content[%zu].image_url.url", i, k);
    const json_t *url = ifd__oai_json_get(iu, "url");
    if (!url)
        return ifd__oai_json_missing(c, param);
    if (!json_is_string(url))
        return ifd__oai_json_bad_type(c, param, "a string", url);
    if (rq->n_images % 8 == 0) {
        ifd_oai_image_t *v = ifd_arena_alloc(c->a, (rq->n_images + 8) * sizeof *v);
        if (!v)
            return ifd__oai_json_oom(c);
        if (rq->n_images)
            memcpy(v, rq->images, rq->n_images * sizeof *v);
        rq->images = v;
    }
    ifd_oai_image_t *im = &rq->images[rq->n_images];
    memset(im, 0, sizeof *im);
    im->message = (uint32_t)i;
    im->part = (uint32_t)k;
    snprintf(param, sizeof(param), "messages[%zu].content[%zu]", i, k);
    int rc = ifd__oai_json_string(c, url, param, &im->url, &im->url_len);
    if (rc < 0)
        return rc;
    if (!(im->param = ifd_arena_strdup(c->a, param)))
        return ifd__oai_json_oom(c);
    rq->n_images++;
    return 0;
}

/*
 * A message's content parts: text parts joined with "\n" into dst->content
 * (vLLM's "string" content format); with image parts (image_url, or
 * Responses' input_image translated to it), also dst->parts_json, the
 * parts as the chat template sees them ([{"type": "text", "text"},
 * {"type": "image"}]), and each image appended to rq->images.
 */
static int p_content_parts(ifd__oai_json_ctx_t *c, const json_t *content, size_t i,
                           ifd_oai_message_t *dst, ifd_oai_request_t *rq)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    size_t total = 0, np = json_array_size(content), n_img = 0;
    int rc;
    for (size_t k = 0; k < np; k++) {
        const json_t *part = json_array_get(content, k);
        snprintf(param, sizeof(param), "messages[%zu].content[%zu]", i, k);
        if (!json_is_object(part))
            return ifd__oai_json_bad_type(c, param, "an object", part);
        snprintf(param, sizeof(param), "messages[%zu].content[%zu].type", i, k);
        const json_t *type = ifd__oai_json_get(part, "type");
        if (!type)
            return ifd__oai_json_missing(c, param);
        if (!json_is_string(type))
            return ifd__oai_json_bad_type(c, param, "a string", type);
        if (ifd__oai_json_is(type, "image_url")) {
            if ((rc = p_image_part(c, part, i, k, rq)) < 0)
                return rc;
            n_img++;
            continue;
        }
        if (!ifd__oai_json_is(type, "text"))
            return ifd__oai_json_fail(
                c, "invalid_value", param,
                "Invalid value: '%.64s'. Supported content parts are 'text' and "
                "'image_url'.",
                json_string_value(type));
        snprintf(param, sizeof(param), "messages[%zu].content[%zu].text", i, k);
        const json_t *text = ifd__oai_json_get(part, "text");
        if (!text)
            return ifd__oai_json_missing(c, param);
        if (!json_is_string(text))
            return ifd__oai_json_bad_type(c, param, "a string", text);
        total += json_string_length(text) + 1;
    }
    char *joined = ifd_arena_alloc(c->a, total + 1);
    json_t *parts = n_img ? json_array() : NULL;
    if (!joined || (n_img && !parts)) {
        json_decref(parts);
        return ifd__oai_json_oom(c);
    }
    size_t off = 0, n_text = 0;
    for (size_t k = 0; k < np; k++) {
        const json_t *part = json_array_get(content, k);
        const json_t *text = json_object_get(part, "text");
        if (ifd__oai_json_is(json_object_get(part, "type"), "image_url")) {
            json_array_append_new(parts, json_pack("{s:s}", "type", "image"));
            continue;
        }
        size_t tl = json_string_length(text);
        if (n_text++ > 0)
            joined[off++] = '\n';
        memcpy(joined + off, json_string_value(text), tl);
        off += tl;
        if (parts)
            json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", text));
    }
    joined[off] = '\0';
    dst->content = joined;
    dst->content_len = off;
    if (parts) {
        dst->parts_json = json_array_size(parts) == np ? ifd__oai_json_dump(c->a, parts) : NULL;
        json_decref(parts);
        if (!dst->parts_json)
            return ifd__oai_json_oom(c);
    }
    return 0;
}

/* messages: a non-empty array of {role, content, name}; image parts go to
 * rq's images (rq NULL: refused). */
static int p_messages(ifd__oai_json_ctx_t *c, const json_t *j, ifd_oai_message_t **out,
                      size_t *n_out, ifd_oai_request_t *rq)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    if (!json_is_array(j))
        return ifd__oai_json_bad_type(c, "messages", "an array", j);
    size_t n = json_array_size(j);
    if (n == 0)
        return ifd__oai_json_empty_array(c, "messages");
    ifd_oai_message_t *msgs = ifd_arena_calloc(c->a, n, sizeof(*msgs));
    if (!msgs)
        return ifd__oai_json_oom(c);
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(j, i);
        ifd_oai_message_t *dst = &msgs[i];
        int rc;
        snprintf(param, sizeof(param), "messages[%zu]", i);
        if (!json_is_object(m))
            return ifd__oai_json_bad_type(c, param, "an object", m);

        snprintf(param, sizeof(param), "messages[%zu].role", i);
        const json_t *role = ifd__oai_json_get(m, "role");
        if (!role)
            return ifd__oai_json_missing(c, param);
        if (!json_is_string(role))
            return ifd__oai_json_bad_type(c, param, "a string", role);
        /* any role goes to the template, as vLLM passes it (a model's own
         * template may know "ipython", "observation", …); the built-in
         * families refuse what they cannot spell (chat_template.h) */
        size_t r = 0;
        while (r < sizeof(k_roles) / sizeof(k_roles[0]) && !ifd__oai_json_is(role, k_roles[r]))
            r++;
        if (r < sizeof(k_roles) / sizeof(k_roles[0])) {
            dst->role = k_roles[r];
        } else {
            if ((rc = ifd__oai_json_no_nul(c, role, param)) < 0)
                return rc;
            if (json_string_length(role) == 0)
                return ifd__oai_json_fail(c, "invalid_value", param,
                                          "Invalid value for '%s': a role cannot be empty.", param);
            if (!(dst->role = ifd_arena_strdup(c->a, json_string_value(role))))
                return ifd__oai_json_oom(c);
        }

        snprintf(param, sizeof(param), "messages[%zu].name", i);
        const json_t *name = ifd__oai_json_get(m, "name");
        size_t unused; /* messages_json renders the name whole */
        if (name && (rc = ifd__oai_json_string(c, name, param, &dst->name, &unused)) < 0)
            return rc;
        if ((rc = ifd__oai_ext_message_tools(c, m, i, dst)) < 0)
            return rc;

        snprintf(param, sizeof(param), "messages[%zu].content", i);
        const json_t *content = ifd__oai_json_get(m, "content");
        if (!content) {
            /* An assistant turn may be only tool calls. */
            if (strcmp(dst->role, "assistant") != 0)
                return ifd__oai_json_missing(c, param);
            dst->content = ifd_arena_strdup(c->a, "");
            if (!dst->content)
                return ifd__oai_json_oom(c);
            continue;
        }
        if (json_is_string(content)) {
            rc = ifd__oai_json_string(c, content, param, &dst->content, &dst->content_len);
            if (rc < 0)
                return rc;
            continue;
        }
        if (!json_is_array(content))
            return ifd__oai_json_bad_type(c, param, "a string or an array", content);
        if ((rc = p_content_parts(c, content, i, dst, rq)) < 0)
            return rc;
    }
    *out = msgs;
    *n_out = n;
    return 0;
}

/* stop: a string or an array of at most IFD_OAI_MAX_STOP strings. */
static int p_stop(ifd__oai_json_ctx_t *c, const json_t *j, ifd_oai_request_t *r)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    size_t n = 1;
    if (json_is_array(j)) {
        n = json_array_size(j);
        if (n > IFD_OAI_MAX_STOP)
            return ifd__oai_json_array_too_long(c, "stop", IFD_OAI_MAX_STOP, n);
    } else if (!json_is_string(j)) {
        return ifd__oai_json_bad_type(c, "stop", "a string or an array of strings", j);
    }
    r->stop = ifd_arena_calloc(c->a, n ? n : 1, sizeof(char *));
    r->stop_len = ifd_arena_calloc(c->a, n ? n : 1, sizeof(size_t));
    if (!r->stop || !r->stop_len)
        return ifd__oai_json_oom(c);
    r->n_stop = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_array(j) ? json_array_get(j, i) : j;
        if (json_is_array(j))
            snprintf(param, sizeof(param), "stop[%zu]", i);
        else
            snprintf(param, sizeof(param), "stop");
        char *str;
        size_t len;
        int rc = ifd__oai_json_string(c, s, param, &str, &len);
        if (rc < 0)
            return rc;
        if (len > 0) { /* an empty stop string would match everywhere: dropped */
            r->stop[r->n_stop] = str;
            r->stop_len[r->n_stop++] = len;
        }
    }
    return 0;
}

void ifd_oai_names_add(ifd_oai_names_t *l, const char *name)
{
    size_t len = strlen(l->text);
    int k = snprintf(l->text + len, sizeof l->text - len, "%s%s", l->n ? ", " : "", name);
    if (k < 0 || (size_t)k >= sizeof l->text - len)
        l->text[len] = '\0'; /* did not fit: counted only */
    else
        l->listed++;
    l->n++;
}

const char *ifd_oai_names_more(const ifd_oai_names_t *l, char *buf, size_t cap)
{
    if (cap)
        buf[0] = '\0';
    if (l->listed < l->n)
        snprintf(buf, cap, " and %zu more", l->n - l->listed);
    return buf;
}

/* A bad logit_bias key, quoted, into l. */
static void bad_key_add(ifd_oai_names_t *l, const char *key)
{
    char q[40];
    snprintf(q, sizeof q, "'%.32s'", key);
    ifd_oai_names_add(l, q);
}

/* The 400 naming every bad logit_bias key: what, then the list. */
static int bad_keys_fail(ifd__oai_json_ctx_t *c, const char *code, const char *what,
                         const ifd_oai_names_t *l)
{
    char more[48];
    return ifd__oai_json_fail(c, code, "logit_bias", "Invalid %s in 'logit_bias': %s%s.", what,
                              l->text, ifd_oai_names_more(l, more, sizeof more));
}

/* logit_bias: {"<token id>": bias in [-100, 100], …}. A refusal names
 * every bad key (keys that are not token ids first, then bad values). */
static int p_logit_bias(ifd__oai_json_ctx_t *c, const json_t *j, ifd_oai_request_t *r)
{
    if (!json_is_object(j))
        return ifd__oai_json_bad_type(c, "logit_bias", "an object", j);
    size_t n = json_object_size(j);
    if (n > IFD_OAI_MAX_LOGIT_BIAS)
        return ifd__oai_json_fail(
            c, "invalid_value", "logit_bias",
            "Invalid 'logit_bias': too many entries. Expected at most %d, but got %zu "
            "instead.",
            IFD_OAI_MAX_LOGIT_BIAS, n);
    r->logit_bias = n ? ifd_arena_calloc(c->a, n, sizeof(*r->logit_bias)) : NULL;
    if (n && !r->logit_bias)
        return ifd__oai_json_oom(c);
    r->n_logit_bias = 0;
    ifd_oai_names_t keys = {0}, vals = {0};
    const char *vals_code = NULL; /* the first bad value's */
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)j, key, val)
    {
        const char *k = key;
        long long id = 0;
        bool ok = *k != '\0' && strlen(k) <= 10;
        for (; ok && *k; k++) {
            if (*k < '0' || *k > '9')
                ok = false;
            else
                id = id * 10 + (*k - '0');
        }
        if (!ok || id > INT32_MAX) {
            bad_key_add(&keys, key);
            continue;
        }
        double b = json_is_number(val) ? json_number_value(val) : 0.0;
        if (!json_is_number(val) || b < -100.0 || b > 100.0) {
            if (!vals_code)
                vals_code = !json_is_number(val) ? "invalid_type"
                            : b < 0              ? "decimal_below_min_value"
                                                 : "decimal_above_max_value";
            bad_key_add(&vals, key);
            continue;
        }
        r->logit_bias[r->n_logit_bias].id = (int32_t)id;
        r->logit_bias[r->n_logit_bias].bias = (float)b;
        r->n_logit_bias++;
    }
    if (keys.n)
        return bad_keys_fail(c, "invalid_value", "keys (not token ids: non-negative integers)",
                             &keys);
    if (vals.n)
        return bad_keys_fail(c, vals_code,
                             "values (numbers in [-100, 100] expected) for the tokens", &vals);
    return 0;
}

/* Fields both endpoints share. */
static int p_common(ifd__oai_json_ctx_t *c, const json_t *o, ifd_oai_request_t *r)
{
    const json_t *v;
    int64_t iv;
    int rc;

    if ((v = ifd__oai_json_get(o, "model")) &&
        (rc = ifd__oai_json_string(c, v, "model", &r->model, NULL)) < 0)
        return rc;

    /* Both are checked; max_completion_tokens wins over the deprecated max_tokens.
     * Completions take 0 too, with echo only (checked once echo is known). */
    const int64_t lo = r->kind == IFD_OAI_COMPLETION ? 0 : 1;
    if ((v = ifd__oai_json_get(o, "max_tokens"))) {
        if ((rc = ifd__oai_json_int(c, v, "max_tokens", lo, INT32_MAX, &iv)) < 0)
            return rc;
        r->max_tokens = iv;
    }
    if ((v = ifd__oai_json_get(o, "max_completion_tokens"))) {
        if ((rc = ifd__oai_json_int(c, v, "max_completion_tokens", lo, INT32_MAX, &iv)) < 0)
            return rc;
        r->max_tokens = iv;
    }

    if ((v = ifd__oai_json_get(o, "temperature"))) {
        if ((rc = ifd__oai_json_number(c, v, "temperature", 0, false, 2, &r->temperature)) < 0)
            return rc;
        r->sampling_given |= IFD_OAI_GIVEN_TEMPERATURE;
    }
    if ((v = ifd__oai_json_get(o, "top_p"))) {
        if ((rc = ifd__oai_json_number(c, v, "top_p", 0, false, 1, &r->top_p)) < 0)
            return rc;
        r->sampling_given |= IFD_OAI_GIVEN_TOP_P;
    }
    if ((v = ifd__oai_json_get(o, "top_k"))) {
        if ((rc = ifd__oai_json_int(c, v, "top_k", -1, INT32_MAX, &iv)) < 0)
            return rc;
        r->top_k = iv < 0 ? 0 : (int32_t)iv;
        r->sampling_given |= IFD_OAI_GIVEN_TOP_K;
    }
    if ((v = ifd__oai_json_get(o, "min_p"))) {
        if ((rc = ifd__oai_json_number(c, v, "min_p", 0, false, 1, &r->min_p)) < 0)
            return rc;
        r->sampling_given |= IFD_OAI_GIVEN_MIN_P;
    }
    if ((v = ifd__oai_json_get(o, "frequency_penalty")) &&
        (rc = ifd__oai_json_number(c, v, "frequency_penalty", -2, false, 2,
                                   &r->frequency_penalty)) < 0)
        return rc;
    if ((v = ifd__oai_json_get(o, "presence_penalty")) &&
        (rc = ifd__oai_json_number(c, v, "presence_penalty", -2, false, 2, &r->presence_penalty)) <
            0)
        return rc;
    if ((v = ifd__oai_json_get(o, "repetition_penalty"))) {
        if ((rc = ifd__oai_json_number(c, v, "repetition_penalty", 0, true, 1e6,
                                       &r->repetition_penalty)) < 0)
            return rc;
        r->sampling_given |= IFD_OAI_GIVEN_REPETITION_PENALTY;
    }
    if ((v = ifd__oai_json_get(o, "seed"))) {
        if ((rc = ifd__oai_json_int(c, v, "seed", INT64_MIN, INT64_MAX, &iv)) < 0)
            return rc;
        r->has_seed = true;
        r->seed = (uint64_t)iv;
    }
    if ((v = ifd__oai_json_get(o, "stop")) && (rc = p_stop(c, v, r)) < 0)
        return rc;
    if ((v = ifd__oai_json_get(o, "stop_token_ids")) &&
        (rc = ifd__oai_json_token_array(c, v, "stop_token_ids", IFD_OAI_MAX_STOP_IDS, true,
                                        &r->stop_token_ids, &r->n_stop_token_ids)) < 0)
        return rc;
    if ((v = ifd__oai_json_get(o, "logit_bias")) && (rc = p_logit_bias(c, v, r)) < 0)
        return rc;
    if ((v = ifd__oai_json_get(o, "n"))) {
        if ((rc = ifd__oai_json_int(c, v, "n", 1, IFD_OAI_MAX_N, &iv)) < 0)
            return rc;
        r->n = (uint32_t)iv;
    }
    if ((v = ifd__oai_json_get(o, "stream")) &&
        (rc = ifd__oai_json_bool(c, v, "stream", &r->stream)) < 0)
        return rc;
    if ((v = ifd__oai_json_get(o, "stream_options"))) {
        if (!json_is_object(v))
            return ifd__oai_json_bad_type(c, "stream_options", "an object", v);
        if (!r->stream)
            return ifd__oai_json_fail(
                c, "invalid_value", "stream_options",
                "The 'stream_options' parameter is only allowed when 'stream' is "
                "enabled.");
        const json_t *iu = ifd__oai_json_get(v, "include_usage");
        if (iu &&
            (rc = ifd__oai_json_bool(c, iu, "stream_options.include_usage", &r->include_usage)) < 0)
            return rc;
    }
    if ((v = ifd__oai_json_get(o, "ignore_eos")) &&
        (rc = ifd__oai_json_bool(c, v, "ignore_eos", &r->ignore_eos)) < 0)
        return rc;
    if ((v = ifd__oai_json_get(o, "use_cache")) &&
        (rc = ifd__oai_json_bool(c, v, "use_cache", &r->use_cache)) < 0)
        return rc;
    return 0;
}

static void request_defaults(ifd_oai_request_t *r, ifd_oai_kind_t kind)
{
    memset(r, 0, sizeof(*r));
    r->kind = kind;
    r->max_tokens = -1;
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    r->repetition_penalty = 1.0f;
    r->n = 1;
    r->use_cache = true;
    r->add_generation_prompt = true;
    r->parallel_tool_calls = true;
    r->do_pan_and_scan = -1;
}

uint32_t ifd_oai_apply_sampling_defaults(ifd_oai_request_t *r,
                                         const ifd_oai_sampling_defaults_t *d)
{
    /* one row per field: its bit, the model's value, where it goes, its range */
    const struct {
        uint32_t bit;
        float v, lo, hi;
        bool lo_open;
        float *dst;
    } f[] = {
        {IFD_OAI_GIVEN_TEMPERATURE, d->temperature, 0, 2, false, &r->temperature},
        {IFD_OAI_GIVEN_TOP_P, d->top_p, 0, 1, true, &r->top_p},
        {IFD_OAI_GIVEN_MIN_P, d->min_p, 0, 1, false, &r->min_p},
        {IFD_OAI_GIVEN_REPETITION_PENALTY, d->repetition_penalty, 0, 1e6f, true,
         &r->repetition_penalty},
    };
    uint32_t set = 0;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if ((r->sampling_given & f[i].bit) || !(f[i].v >= f[i].lo) || f[i].v > f[i].hi ||
            (f[i].lo_open && f[i].v == f[i].lo))
            continue;
        *f[i].dst = f[i].v;
        set |= f[i].bit;
    }
    if (!(r->sampling_given & IFD_OAI_GIVEN_TOP_K) && d->top_k >= 0) {
        r->top_k = d->top_k;
        set |= IFD_OAI_GIVEN_TOP_K;
    }
    return set;
}

/* Parses the body into a JSON object, or fills the error. */
static json_t *load_object(ifd__oai_json_ctx_t *c, const char *body, size_t len)
{
    json_error_t je;
    /* "\u0000" is accepted as vLLM accepts it (openai.h says where it may go) */
    json_t *root =
        ifd_schema_json_loadb(body ? body : "", body ? len : 0,
                              JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!root) {
        ifd__oai_json_fail(
            c, NULL, NULL,
            "We could not parse the JSON body of your request: %s (line %d, column %d).", je.text,
            je.line, je.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        ifd__oai_json_fail(c, "invalid_type", NULL,
                           "Invalid type for the request body: expected a JSON object, but got %s "
                           "instead.",
                           ifd__oai_json_type_name(root));
        json_decref(root);
        return NULL;
    }
    return root;
}

int ifd_oai_parse_chat(ifd_arena_t *a, const char *body, size_t len, ifd_oai_request_t *out,
                       ifd_oai_error_t *err)
{
    ifd__oai_json_ctx_t c = {.a = a, .err = err};
    request_defaults(out, IFD_OAI_CHAT);
    json_t *o = load_object(&c, body, len);
    if (!o)
        return IFD_EINVAL;
    const json_t *v;
    int64_t iv;
    int rc;

    if (!(v = ifd__oai_json_get(o, "messages"))) {
        rc = ifd__oai_json_missing(&c, "messages");
        goto out;
    }
    if ((rc = p_messages(&c, v, &out->messages, &out->n_messages, out)) < 0)
        goto out;
    if ((rc = p_common(&c, o, out)) < 0)
        goto out;
    if ((v = ifd__oai_json_get(o, "logprobs")) &&
        (rc = ifd__oai_json_bool(&c, v, "logprobs", &out->logprobs)) < 0)
        goto out;
    if ((v = ifd__oai_json_get(o, "top_logprobs"))) {
        if ((rc = ifd__oai_json_logprobs(&c, v, "top_logprobs", &iv)) < 0)
            goto out;
        if (!out->logprobs) {
            rc = ifd__oai_json_fail(
                &c, "invalid_value", "top_logprobs",
                "Invalid value for 'top_logprobs': 'logprobs' must be set to true when "
                "'top_logprobs' is used.");
            goto out;
        }
        out->top_logprobs = iv < 0 ? IFD_OAI_LOGPROBS_VOCAB : (uint32_t)iv;
    }
    if ((v = ifd__oai_json_get(o, "add_generation_prompt")) &&
        (rc = ifd__oai_json_bool(&c, v, "add_generation_prompt", &out->add_generation_prompt)) < 0)
        goto out;
    if ((v = ifd__oai_json_get(o, "continue_final_message")) &&
        (rc = ifd__oai_json_bool(&c, v, "continue_final_message", &out->continue_final_message)) <
            0)
        goto out;
    if ((rc = ifd__oai_ext_parse(&c, o, out)) < 0)
        goto out;
    if (!(out->messages_json = ifd__oai_json_dump(a, ifd__oai_json_get(o, "messages")))) {
        rc = ifd__oai_json_oom(&c);
        goto out;
    }
    rc = 0;
out:
    json_decref(o);
    return rc;
}

/* prompt: a string, [string…], [int…] (one prompt of ids) or [[int…]…]. */
static int p_prompt(ifd__oai_json_ctx_t *c, const json_t *j, ifd_oai_request_t *r)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    int rc;
    if (json_is_string(j)) {
        r->prompts = ifd_arena_calloc(c->a, 1, sizeof(*r->prompts));
        if (!r->prompts)
            return ifd__oai_json_oom(c);
        r->n_prompts = 1;
        return ifd__oai_json_string(c, j, "prompt", &r->prompts[0].text, &r->prompts[0].text_len);
    }
    if (!json_is_array(j))
        return ifd__oai_json_bad_type(c, "prompt", "a string or an array", j);
    size_t n = json_array_size(j);
    if (n == 0)
        return ifd__oai_json_empty_array(c, "prompt");
    const json_t *first = json_array_get(j, 0);
    if (json_is_integer(first)) {
        r->prompts = ifd_arena_calloc(c->a, 1, sizeof(*r->prompts));
        if (!r->prompts)
            return ifd__oai_json_oom(c);
        r->n_prompts = 1;
        return ifd__oai_json_token_array(c, j, "prompt", SIZE_MAX, false, &r->prompts[0].tokens,
                                         &r->prompts[0].n_tokens);
    }
    if (n > IFD_OAI_MAX_PROMPTS)
        return ifd__oai_json_array_too_long(c, "prompt", IFD_OAI_MAX_PROMPTS, n);
    bool strings = json_is_string(first);
    r->prompts = ifd_arena_calloc(c->a, n, sizeof(*r->prompts));
    if (!r->prompts)
        return ifd__oai_json_oom(c);
    r->n_prompts = n;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(j, i);
        snprintf(param, sizeof(param), "prompt[%zu]", i);
        if (strings) {
            if ((rc = ifd__oai_json_string(c, e, param, &r->prompts[i].text,
                                           &r->prompts[i].text_len)) < 0)
                return rc;
        } else if (json_is_array(e)) {
            if ((rc = ifd__oai_json_token_array(c, e, param, SIZE_MAX, false, &r->prompts[i].tokens,
                                                &r->prompts[i].n_tokens)) < 0)
                return rc;
        } else {
            return ifd__oai_json_bad_type(
                c, param, i == 0 ? "a string, an integer or an array" : "an array", e);
        }
    }
    return 0;
}

int ifd_oai_parse_completion(ifd_arena_t *a, const char *body, size_t len, ifd_oai_request_t *out,
                             ifd_oai_error_t *err)
{
    ifd__oai_json_ctx_t c = {.a = a, .err = err};
    request_defaults(out, IFD_OAI_COMPLETION);
    json_t *o = load_object(&c, body, len);
    if (!o)
        return IFD_EINVAL;
    const json_t *v;
    int64_t iv;
    int rc;

    if (!(v = ifd__oai_json_get(o, "prompt"))) {
        rc = ifd__oai_json_missing(&c, "prompt");
        goto out;
    }
    if ((rc = p_prompt(&c, v, out)) < 0)
        goto out;
    if ((rc = p_common(&c, o, out)) < 0)
        goto out;
    if (out->max_tokens < 0)
        out->max_tokens = IFD_OAI_DEFAULT_COMPLETION_MAX_TOKENS;
    if ((v = ifd__oai_json_get(o, "logprobs"))) {
        if ((rc = ifd__oai_json_logprobs(&c, v, "logprobs", &iv)) < 0)
            goto out;
        out->logprobs = true;
        out->top_logprobs = iv < 0 ? IFD_OAI_LOGPROBS_VOCAB : (uint32_t)iv;
    }
    if ((v = ifd__oai_json_get(o, "echo")) &&
        (rc = ifd__oai_json_bool(&c, v, "echo", &out->echo)) < 0)
        goto out;
    if (out->max_tokens == 0 && !out->echo) { /* vLLM: 0 scores the prompt, with echo */
        rc = ifd__oai_json_fail(
            &c, "integer_below_min_value", "max_tokens",
            "Invalid 'max_tokens': integer below minimum value. Expected a value "
            ">= 1 (0 only with 'echo'), but got 0 instead.");
        goto out;
    }
    if ((v = ifd__oai_json_get(o, "suffix"))) {
        if (!json_is_string(v)) {
            rc = ifd__oai_json_bad_type(&c, "suffix", "a string", v);
            goto out;
        }
        if (json_string_length(v) > 0) {
            rc = ifd__oai_json_fail(
                &c, "unsupported_parameter", "suffix",
                "Unsupported parameter: 'suffix' is not supported by this server.");
            goto out;
        }
    }
    if ((v = ifd__oai_json_get(o, "best_of"))) {
        if ((rc = ifd__oai_json_int(&c, v, "best_of", 1, IFD_OAI_MAX_N, &iv)) < 0)
            goto out;
        if (iv < (int64_t)out->n) {
            rc = ifd__oai_json_fail(
                &c, "invalid_value", "best_of",
                "Invalid 'best_of': it must be greater than or equal to 'n' (%u), but "
                "got %" PRId64 ".",
                out->n, iv);
            goto out;
        }
        if (iv > (int64_t)out->n) {
            rc = ifd__oai_json_fail(
                &c, "unsupported_value", "best_of",
                "Unsupported value: 'best_of' greater than 'n' is not supported by this "
                "server.");
            goto out;
        }
    }
    if ((rc = ifd__oai_ext_parse(&c, o, out)) < 0)
        goto out;
    rc = 0;
out:
    json_decref(o);
    return rc;
}

int ifd_oai_parse_tokenize(ifd_arena_t *a, const char *body, size_t len, ifd_oai_tokenize_t *out,
                           ifd_oai_error_t *err)
{
    ifd__oai_json_ctx_t c = {.a = a, .err = err};
    memset(out, 0, sizeof(*out));
    out->add_special_tokens = true;
    out->add_generation_prompt = true;
    json_t *o = load_object(&c, body, len);
    if (!o)
        return IFD_EINVAL;
    const json_t *v, *prompt = ifd__oai_json_get(o, "prompt"),
                     *messages = ifd__oai_json_get(o, "messages");
    int rc = 0;
    if ((v = ifd__oai_json_get(o, "model")) &&
        (rc = ifd__oai_json_string(&c, v, "model", &out->model, NULL)) < 0)
        goto out;
    if (prompt && messages) {
        rc = ifd__oai_json_fail(&c, "invalid_value", "messages",
                                "Give either 'prompt' or 'messages', not both.");
        goto out;
    }
    if (!prompt && !messages) {
        rc = ifd__oai_json_missing(&c, "prompt");
        goto out;
    }
    if (prompt &&
        (rc = ifd__oai_json_string(&c, prompt, "prompt", &out->prompt, &out->prompt_len)) < 0)
        goto out;
    if (messages && (rc = p_messages(&c, messages, &out->messages, &out->n_messages, NULL)) < 0)
        goto out;
    if ((v = ifd__oai_json_get(o, "add_special_tokens")) &&
        (rc = ifd__oai_json_bool(&c, v, "add_special_tokens", &out->add_special_tokens)) < 0)
        goto out;
    if ((v = ifd__oai_json_get(o, "add_generation_prompt")) &&
        (rc = ifd__oai_json_bool(&c, v, "add_generation_prompt", &out->add_generation_prompt)) < 0)
        goto out;
    if ((v = ifd__oai_json_get(o, "return_token_strs")) &&
        (rc = ifd__oai_json_bool(&c, v, "return_token_strs", &out->return_token_strs)) < 0)
        goto out;
out:
    json_decref(o);
    return rc;
}

int ifd_oai_parse_detokenize(ifd_arena_t *a, const char *body, size_t len,
                             ifd_oai_detokenize_t *out, ifd_oai_error_t *err)
{
    ifd__oai_json_ctx_t c = {.a = a, .err = err};
    memset(out, 0, sizeof(*out));
    json_t *o = load_object(&c, body, len);
    if (!o)
        return IFD_EINVAL;
    const json_t *v;
    int rc = 0;
    if ((v = ifd__oai_json_get(o, "model")) &&
        (rc = ifd__oai_json_string(&c, v, "model", &out->model, NULL)) < 0)
        goto out;
    if (!(v = ifd__oai_json_get(o, "tokens"))) {
        rc = ifd__oai_json_missing(&c, "tokens");
        goto out;
    }
    rc = ifd__oai_json_token_array(&c, v, "tokens", SIZE_MAX, true, &out->tokens, &out->n_tokens);
out:
    json_decref(o);
    return rc;
}

/* ---- responses ----------------------------------------------------------------------- */

void ifd_oai_make_id(char *out, ifd_oai_kind_t kind, uint64_t r0, uint64_t r1)
{
    snprintf(out, IFD_OAI_ID_MAX, "%s%016" PRIx64 "%016" PRIx64,
             kind == IFD_OAI_CHAT ? "chatcmpl-" : kind == IFD_OAI_RESPONSES ? "resp_" : "cmpl-",
             r0, r1);
}

static json_t *usage_obj(const ifd_oai_usage_t *u, int *bad)
{
    json_t *o = json_object();
    ifd__oai_json_set(o, "prompt_tokens", json_integer(u->prompt_tokens), bad);
    ifd__oai_json_set(o, "completion_tokens", json_integer(u->completion_tokens), bad);
    ifd__oai_json_set(o, "total_tokens",
                      json_integer((json_int_t)u->prompt_tokens + (json_int_t)u->completion_tokens),
                      bad);
    json_t *d = json_object();
    ifd__oai_json_set(d, "cached_tokens", json_integer(u->cached_tokens), bad);
    ifd__oai_json_set(o, "prompt_tokens_details", d, bad);
    return o;
}

int ifd_oai_usage_json(ifd_buf_t *out, const ifd_oai_usage_t *u)
{
    int bad = 0;
    json_t *o = usage_obj(u, &bad);
    return ifd__oai_json_emit(out, o, bad, false);
}

/* A choice's "logprobs" value: null, or its kind's shape (oai_json.h). */
static void w_choice_logprobs(ifd__oai_w_t *w, ifd_oai_kind_t kind, const ifd_oai_choice_t *c)
{
    if (!c->has_logprobs)
        IFD__OAI_W_LIT(w, "null");
    else if (kind == IFD_OAI_CHAT)
        ifd__oai_w_chat_logprobs(w, c->logprobs, c->n_logprobs);
    else
        ifd__oai_w_completion_logprobs(w, c->logprobs_prefix, c->logprobs, c->n_logprobs,
                                       c->text_offset);
}

int ifd_oai_logprobs_json(ifd_buf_t *out, ifd_oai_kind_t kind, const ifd_oai_logprob_t *lp,
                          size_t n, uint32_t text_offset)
{
    ifd_oai_choice_t c = {
        .has_logprobs = true, .logprobs = lp, .n_logprobs = n, .text_offset = text_offset};
    ifd__oai_w_t w;
    ifd__oai_w_begin(&w, out, 0);
    w_choice_logprobs(&w, kind, &c);
    return ifd__oai_w_end(&w);
}

/* A choice's vLLM prompt_logprobs: written once by the caller, or now. */
static void w_choice_prompt_logprobs(ifd__oai_w_t *w, const ifd_oai_choice_t *c)
{
    if (c->prompt_logprobs_json)
        ifd__oai_w_raw(w, c->prompt_logprobs_json, c->prompt_logprobs_json_len);
    else
        ifd__oai_w_prompt_logprobs(w, c->prompt_logprobs, c->n_prompt_logprobs, c->prompt_top);
}

int ifd_oai_prompt_logprobs_json(ifd_buf_t *out, const ifd_oai_prompt_logprob_t *v, size_t n,
                                 uint32_t top)
{
    ifd__oai_w_t w;
    ifd__oai_w_begin(&w, out, 0);
    if (n && !v)
        w.rc = IFD_ENOMEM;
    ifd__oai_w_prompt_logprobs(&w, v, n, top);
    return ifd__oai_w_end(&w);
}

void ifd_oai_lp_prefix_free(ifd_oai_lp_prefix_t *p)
{
    ifd_buf_free(&p->tokens);
    ifd_buf_free(&p->token_logprobs);
    ifd_buf_free(&p->top_logprobs);
    ifd_buf_free(&p->text_offset);
    p->n = 0;
    p->chars = 0;
}

int ifd_oai_lp_prefix_build(ifd_oai_lp_prefix_t *p, const ifd_oai_logprob_t *lp, size_t n)
{
    memset(p, 0, sizeof *p);
    ifd_buf_t *col[4] = {&p->tokens, &p->token_logprobs, &p->top_logprobs, &p->text_offset};
    int rc = n && !lp ? IFD_EINVAL : 0;
    for (int c = 0; c < 4 && !rc; c++) {
        uint64_t chars = 0;
        ifd__oai_w_t w;
        ifd__oai_w_begin(&w, col[c], 0);
        ifd__oai_w_completion_column(&w, c, lp, n, &chars);
        rc = ifd__oai_w_end(&w);
        p->chars = chars;
    }
    if (rc) {
        ifd_oai_lp_prefix_free(p);
        return rc;
    }
    p->n = n;
    return 0;
}

/* {"id","object","created","model"[,"system_fingerprint"]} */
static json_t *base_obj(const ifd_oai_meta_t *m, const char *object, int *bad)
{
    json_t *o = json_object();
    ifd__oai_json_set(o, "id", json_string(m->id), bad);
    ifd__oai_json_set(o, "object", json_string(object), bad);
    ifd__oai_json_set(o, "created", json_integer(m->created), bad);
    ifd__oai_json_set(o, "model", ifd__oai_json_str(m->model, strlen(m->model)), bad);
    if (m->system_fingerprint)
        ifd__oai_json_set(o, "system_fingerprint", json_string(m->system_fingerprint), bad);
    return o;
}

static bool meta_ok(const ifd_oai_meta_t *m)
{
    return m && m->id && m->model &&
           (m->kind == IFD_OAI_CHAT || m->kind == IFD_OAI_COMPLETION ||
            m->kind == IFD_OAI_RESPONSES);
}

/* [{id, type: "function", function: {name, arguments}}]; with only_header
 * >= 0, stream deltas: {index, id, type, function: {name, arguments: ""}}
 * for call only_header, or (only_header == -2) {index, function:
 * {arguments}} for every call. */
static json_t *tool_calls_json(const ifd_oai_tool_call_t *tc, size_t n, long only_header, int *bad)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        if (only_header >= 0 && (size_t)only_header != i)
            continue;
        json_t *t = json_object();
        json_t *f = json_object();
        if (only_header != -1)
            ifd__oai_json_set(t, "index", json_integer((json_int_t)i), bad);
        if (only_header != -2) {
            ifd__oai_json_set(t, "id", json_string(tc[i].id), bad);
            ifd__oai_json_set(t, "type", json_string("function"), bad);
            ifd__oai_json_set(f, "name", ifd__oai_json_str(tc[i].name, strlen(tc[i].name)), bad);
        }
        ifd__oai_json_set(f, "arguments",
                          only_header >= 0
                              ? json_string("")
                              : ifd__oai_json_str(tc[i].arguments, strlen(tc[i].arguments)),
                          bad);
        ifd__oai_json_set(t, "function", f, bad);
        ifd__oai_json_add(arr, t, bad);
    }
    return arr;
}

/* The head of a response or chunk object, {"id",…,"model"[,
 * "system_fingerprint"], without its closing brace. */
static void w_head(ifd__oai_w_t *w, const ifd_oai_meta_t *m, const char *object)
{
    int bad = 0;
    IFD__OAI_W_LIT(w, "{");
    ifd__oai_w_json(w, base_obj(m, object, &bad), bad, true);
}

static void w_finish(ifd__oai_w_t *w, const char *reason)
{
    IFD__OAI_W_LIT(w, ",\"finish_reason\":");
    if (reason)
        ifd__oai_w_cstr(w, reason);
    else
        IFD__OAI_W_LIT(w, "null");
}

/* ,"<key>":[ids…] */
static void w_ids(ifd__oai_w_t *w, const char *key, const int32_t *ids, size_t n)
{
    IFD__OAI_W_LIT(w, ",");
    ifd__oai_w_cstr(w, key);
    IFD__OAI_W_LIT(w, ":[");
    for (size_t i = 0; i < n && !w->rc; i++) {
        if (i)
            IFD__OAI_W_LIT(w, ",");
        ifd__oai_w_int(w, ids[i]);
    }
    IFD__OAI_W_LIT(w, "]");
}

/* A choice's vLLM extras after its finish_reason: completions' prompt
 * logprobs (non-streamed: null when not asked) and prompt_token_ids, and
 * token_ids. */
static void w_choice_ids(ifd__oai_w_t *w, bool chat, bool streamed, const ifd_oai_choice_t *c)
{
    if (!chat && !streamed) {
        IFD__OAI_W_LIT(w, ",\"prompt_logprobs\":");
        if (c->has_prompt_logprobs)
            w_choice_prompt_logprobs(w, c);
        else
            IFD__OAI_W_LIT(w, "null");
    }
    if (!chat && c->prompt_token_ids)
        w_ids(w, "prompt_token_ids", c->prompt_token_ids, c->n_prompt_token_ids);
    if (c->has_token_ids)
        w_ids(w, "token_ids", c->token_ids, c->n_token_ids);
}

/* One choice of a non-streamed chat or completions response. */
static void w_choice(ifd__oai_w_t *w, ifd_oai_kind_t kind, const ifd_oai_choice_t *c)
{
    bool chat = kind == IFD_OAI_CHAT;
    IFD__OAI_W_LIT(w, "{\"index\":");
    ifd__oai_w_int(w, c->index);
    if (chat) {
        IFD__OAI_W_LIT(w, ",\"message\":{\"role\":\"assistant\",\"content\":");
        if (c->n_tool_calls && !c->text_len)
            IFD__OAI_W_LIT(w, "null");
        else
            ifd__oai_w_str(w, c->text, c->text_len);
        IFD__OAI_W_LIT(w, ",\"refusal\":null");
        if (c->n_tool_calls) {
            int bad = 0;
            IFD__OAI_W_LIT(w, ",\"tool_calls\":");
            ifd__oai_w_json(w, tool_calls_json(c->tool_calls, c->n_tool_calls, -1, &bad), bad,
                            false);
        }
        IFD__OAI_W_LIT(w, "}");
    } else {
        IFD__OAI_W_LIT(w, ",\"text\":");
        ifd__oai_w_str(w, c->text, c->text_len);
    }
    IFD__OAI_W_LIT(w, ",\"logprobs\":");
    w_choice_logprobs(w, kind, c);
    w_finish(w, c->finish_reason);
    w_choice_ids(w, chat, false, c);
    IFD__OAI_W_LIT(w, "}");
}

int ifd_oai_response_json(ifd_buf_t *out, const ifd_oai_meta_t *m, const ifd_oai_choice_t *choices,
                          size_t n_choices, const ifd_oai_usage_t *usage)
{
    return ifd_oai_response_json_max(out, m, choices, n_choices, usage, 0);
}

int ifd_oai_response_json_max(ifd_buf_t *out, const ifd_oai_meta_t *m,
                              const ifd_oai_choice_t *choices, size_t n_choices,
                              const ifd_oai_usage_t *usage, size_t max_bytes)
{
    if (!meta_ok(m) || !usage || (n_choices && !choices))
        return IFD_EINVAL;
    for (size_t i = 0; i < n_choices; i++)
        if (choices[i].logprobs_prefix && choices[i].text_offset)
            return IFD_EINVAL;
    if (m->kind == IFD_OAI_RESPONSES) {
        if (n_choices != 1)
            return IFD_EINVAL;
        size_t start = out->len;
        int rc = ifd__resp_json(out, m, choices, usage);
        if (rc == 0 && max_bytes && out->len - start > max_bytes) {
            out->len = start; /* one choice, built as a tree: bounded by the caller's checks */
            out->data[start] = '\0';
            rc = IFD_ETOOBIG;
        }
        return rc;
    }
    bool chat = m->kind == IFD_OAI_CHAT;
    ifd__oai_w_t w;
    ifd__oai_w_begin(&w, out, max_bytes);
    w_head(&w, m, chat ? "chat.completion" : "text_completion");
    IFD__OAI_W_LIT(&w, ",\"choices\":[");
    for (size_t i = 0; i < n_choices && !w.rc; i++) {
        if (i)
            IFD__OAI_W_LIT(&w, ",");
        w_choice(&w, m->kind, &choices[i]);
    }
    IFD__OAI_W_LIT(&w, "]");
    if (chat) { /* vLLM: once, at the top; null when not asked */
        IFD__OAI_W_LIT(&w, ",\"prompt_logprobs\":");
        if (n_choices && choices[0].has_prompt_logprobs)
            w_choice_prompt_logprobs(&w, &choices[0]);
        else
            IFD__OAI_W_LIT(&w, "null");
        if (n_choices && choices[0].prompt_token_ids)
            w_ids(&w, "prompt_token_ids", choices[0].prompt_token_ids,
                  choices[0].n_prompt_token_ids);
    }
    int bad = 0;
    IFD__OAI_W_LIT(&w, ",\"usage\":");
    ifd__oai_w_json(&w, usage_obj(usage, &bad), bad, false);
    IFD__OAI_W_LIT(&w, "}");
    return ifd__oai_w_end(&w);
}

/* ---- size bounds --------------------------------------------------------------------- */

/* The fewest bytes each piece is written in (oai_json.c's writers): a
 * string of L bytes takes >= L + 2 (a byte is >= 1 byte, a replaced one 3),
 * a number >= 3 ("0.0"; an integer >= 1), a bytes array >= 2L - 1 + 2.
 * Chat: {"token":S,"logprob":R,"bytes":[…]} >= 36 + 3L as an alternative,
 * plus ,"top_logprobs":[…] for the token >= 54 + 3L; completions: the four
 * columns >= 10 + L per token; a prompt logprobs entry
 * "<id>":{"logprob":R,"rank":I,"decoded_token":S} >= 47 + L, a row
 * ",{…}" >= 3 + its entries. */
#define MIN_CHAT_TOKEN 54u
#define MIN_CHAT_TOP   36u
#define MIN_CMPL_TOKEN 10u
#define MIN_PLP_ENTRY  47u
#define MIN_PLP_ROW    3u

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

uint64_t ifd_oai_token_min_bytes(ifd_oai_kind_t kind, const ifd_oai_logprob_t *lp)
{
    if (!lp)
        return 0;
    if (kind != IFD_OAI_COMPLETION) {
        uint64_t n = MIN_CHAT_TOKEN + 3 * (uint64_t)lp->len;
        for (size_t k = 0; k < lp->n_top; k++)
            n += MIN_CHAT_TOP + 3 * (uint64_t)lp->top[k].len;
        return n;
    }
    return MIN_CMPL_TOKEN + lp->len;
}

uint64_t ifd_oai_response_min_bytes(ifd_oai_kind_t kind, const ifd_oai_request_t *r,
                                    const size_t *prompt_tokens, size_t n_prompts)
{
    bool cmpl = kind == IFD_OAI_COMPLETION;
    bool echo_lp = cmpl && r->echo && r->logprobs;
    uint64_t n = r->n ? r->n : 1;
    /* tokens every choice surely has: min_tokens hold off every stop */
    uint64_t gen = r->min_tokens;
    if (r->max_tokens >= 0 && (uint64_t)r->max_tokens < gen)
        gen = (uint64_t)r->max_tokens;
    uint64_t per_token = 0;
    if (r->logprobs)
        per_token =
            cmpl ? MIN_CMPL_TOKEN : MIN_CHAT_TOKEN + (uint64_t)MIN_CHAT_TOP * r->top_logprobs;
    uint64_t total = 0;
    for (size_t p = 0; p < n_prompts; p++) {
        uint64_t rows = prompt_tokens[p] > 1 ? prompt_tokens[p] - 1 : 0;
        uint64_t per_choice = sat_mul(gen, per_token);
        if (echo_lp)
            per_choice = sat_add(per_choice, sat_mul(prompt_tokens[p], MIN_CMPL_TOKEN));
        if (r->prompt_logprobs || echo_lp) {
            /* vLLM's shapes: every choice's in completions, once in chat; a
             * row holds the token and `top` alternatives, the token at most
             * once among them */
            uint64_t top = r->prompt_logprobs ? r->prompt_top_logprobs : r->top_logprobs;
            uint64_t row = MIN_PLP_ROW + MIN_PLP_ENTRY * (top ? top : 1);
            uint64_t plp = sat_mul(rows, row);
            if (cmpl)
                per_choice = sat_add(per_choice, plp);
            else
                total = sat_add(total, plp);
        }
        total = sat_add(total, sat_mul(per_choice, n));
    }
    return total;
}

/* ---- streaming ------------------------------------------------------------------------- */

enum { ST_NEW = 0, ST_STARTED = 1, ST_FINISHED = 2 };

int ifd_oai_stream_init(ifd_oai_stream_t *s, ifd_arena_t *a, const ifd_oai_meta_t *m,
                        uint32_t n_choices, bool include_usage)
{
    memset(s, 0, sizeof(*s));
    if (!meta_ok(m) || n_choices == 0)
        return IFD_EINVAL;
    s->meta = *m;
    s->include_usage = include_usage;
    s->n_choices = n_choices;
    s->state = ifd_arena_calloc(a, n_choices, sizeof(*s->state));
    s->text_offset = ifd_arena_calloc(a, n_choices, sizeof(*s->text_offset));
    if (!s->state || !s->text_offset)
        return IFD_ENOMEM;
    if (m->kind == IFD_OAI_RESPONSES)
        return n_choices == 1 ? ifd__resp_stream_init(s, a) : IFD_EINVAL;
    return 0;
}

/* "usage": null, or with continuous_usage_stats the usage so far. */
static json_t *chunk_usage(const ifd_oai_stream_t *s, int *bad)
{
    return s->live_usage ? usage_obj(s->live_usage, bad) : json_null();
}

/* One chunk with one choice; `role` adds role:"assistant" (chat). Written
 * like a whole response (its logprobs may be a prompt's: echo). */
static int stream_chunk(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_choice_t *c, bool role,
                        const char *finish)
{
    bool chat = s->meta.kind == IFD_OAI_CHAT;
    ifd_oai_choice_t tmp = *c;
    tmp.text_offset = s->text_offset[c->index];
    if (tmp.logprobs_prefix && tmp.text_offset)
        return IFD_EINVAL;
    ifd__oai_w_t w;
    ifd__oai_w_begin(&w, out, 0);
    IFD__OAI_W_LIT(&w, "data: ");
    w_head(&w, &s->meta, chat ? "chat.completion.chunk" : "text_completion");
    IFD__OAI_W_LIT(&w, ",\"choices\":[{\"index\":");
    ifd__oai_w_int(&w, c->index);
    if (chat) {
        IFD__OAI_W_LIT(&w, ",\"delta\":{");
        if (role)
            IFD__OAI_W_LIT(&w, "\"role\":\"assistant\"");
        if (role || c->text_len > 0) {
            if (role)
                IFD__OAI_W_LIT(&w, ",");
            IFD__OAI_W_LIT(&w, "\"content\":");
            ifd__oai_w_str(&w, c->text, c->text_len);
        }
        IFD__OAI_W_LIT(&w, "}");
    } else {
        IFD__OAI_W_LIT(&w, ",\"text\":");
        ifd__oai_w_str(&w, c->text, c->text_len);
    }
    IFD__OAI_W_LIT(&w, ",\"logprobs\":");
    w_choice_logprobs(&w, s->meta.kind, &tmp);
    w_finish(&w, finish);
    w_choice_ids(&w, chat, true, c);
    IFD__OAI_W_LIT(&w, "}]");
    if (chat && c->prompt_token_ids)
        w_ids(&w, "prompt_token_ids", c->prompt_token_ids, c->n_prompt_token_ids);
    if (s->include_usage) {
        int bad = 0;
        IFD__OAI_W_LIT(&w, ",\"usage\":");
        ifd__oai_w_json(&w, chunk_usage(s, &bad), bad, false);
    }
    IFD__OAI_W_LIT(&w, "}\n\n");
    int rc = ifd__oai_w_end(&w);
    if (rc == 0)
        s->text_offset[c->index] += (uint32_t)ifd_utf8_count(c->text, c->text_len);
    return rc;
}

static int stream_check(const ifd_oai_stream_t *s, const ifd_oai_choice_t *c)
{
    if (!s->state || s->ended || !c || c->index >= s->n_choices ||
        s->state[c->index] == ST_FINISHED || (c->text_len > 0 && !c->text))
        return IFD_EINVAL;
    return 0;
}

int ifd_oai_stream_start(ifd_oai_stream_t *s, ifd_buf_t *out)
{
    if (!s->state || s->ended)
        return IFD_EINVAL;
    if (s->meta.kind == IFD_OAI_RESPONSES)
        return ifd__resp_stream_start(s, out);
    if (s->meta.kind != IFD_OAI_CHAT)
        return 0;
    for (uint32_t i = 0; i < s->n_choices; i++) {
        if (s->state[i] != ST_NEW)
            continue;
        ifd_oai_choice_t c = {.index = i};
        if (s->prompt_token_ids) { /* once, with the first chunk */
            c.prompt_token_ids = s->prompt_token_ids;
            c.n_prompt_token_ids = s->n_prompt_token_ids;
        }
        int rc = stream_chunk(s, out, &c, true, NULL);
        s->prompt_token_ids = NULL;
        if (rc < 0)
            return rc;
        s->state[i] = ST_STARTED;
    }
    return 0;
}

int ifd_oai_stream_delta(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_choice_t *c)
{
    int rc = stream_check(s, c);
    if (rc < 0 || c->finish_reason)
        return IFD_EINVAL;
    if (s->meta.kind == IFD_OAI_RESPONSES) {
        if (c->text_len == 0 && c->n_logprobs == 0)
            return 0;
        rc = ifd__resp_stream_delta(s, out, c);
        if (rc == 0)
            s->state[c->index] = ST_STARTED;
        return rc;
    }
    bool role = s->meta.kind == IFD_OAI_CHAT && s->state[c->index] == ST_NEW;
    if (!role && c->text_len == 0 && !c->has_logprobs && !c->n_token_ids && !c->prompt_token_ids)
        return 0; /* nothing to say */
    rc = stream_chunk(s, out, c, role, NULL);
    if (rc == 0)
        s->state[c->index] = ST_STARTED;
    return rc;
}

int ifd_oai_stream_tool_calls(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_choice_t *c)
{
    int rc = stream_check(s, c);
    if (rc < 0 || c->finish_reason)
        return IFD_EINVAL;
    if (s->meta.kind == IFD_OAI_RESPONSES) {
        rc = ifd__resp_stream_tool_calls(s, out, c);
        if (rc == 0)
            s->state[c->index] = ST_STARTED;
        return rc;
    }
    if (s->meta.kind != IFD_OAI_CHAT)
        return IFD_EINVAL;
    for (size_t i = 0; i < c->n_tool_calls && !rc; i++) {
        for (int part = 0; part < 2 && !rc; part++) {
            int bad = 0;
            json_t *o = base_obj(&s->meta, "chat.completion.chunk", &bad);
            json_t *ch = json_object();
            ifd__oai_json_set(ch, "index", json_integer(c->index), &bad);
            json_t *delta = json_object();
            if (s->state[c->index] == ST_NEW) {
                ifd__oai_json_set(delta, "role", json_string("assistant"), &bad);
                s->state[c->index] = ST_STARTED;
            }
            json_t *one = tool_calls_json(c->tool_calls + i, 1, part ? -2 : 0, &bad);
            /* the index is the call's place in the message */
            json_t *first = json_array_get(one, 0);
            if (first)
                ifd__oai_json_set(first, "index", json_integer((json_int_t)i), &bad);
            ifd__oai_json_set(delta, "tool_calls", one, &bad);
            ifd__oai_json_set(ch, "delta", delta, &bad);
            ifd__oai_json_set(ch, "logprobs", json_null(), &bad);
            ifd__oai_json_set(ch, "finish_reason", json_null(), &bad);
            json_t *arr = json_array();
            ifd__oai_json_add(arr, ch, &bad);
            ifd__oai_json_set(o, "choices", arr, &bad);
            if (s->include_usage)
                ifd__oai_json_set(o, "usage", chunk_usage(s, &bad), &bad);
            rc = ifd__oai_json_emit(out, o, bad, true);
        }
    }
    return rc;
}

int ifd_oai_stream_finish(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_choice_t *c)
{
    int rc = stream_check(s, c);
    if (rc < 0 || !c->finish_reason)
        return IFD_EINVAL;
    if (s->meta.kind == IFD_OAI_RESPONSES) {
        rc = ifd__resp_stream_finish(s, out, c);
        if (rc == 0)
            s->state[c->index] = ST_FINISHED;
        return rc;
    }
    bool role = s->meta.kind == IFD_OAI_CHAT && s->state[c->index] == ST_NEW;
    rc = stream_chunk(s, out, c, role, c->finish_reason);
    if (rc == 0)
        s->state[c->index] = ST_FINISHED;
    return rc;
}

int ifd_oai_stream_end(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_usage_t *usage)
{
    if (!s->state || s->ended || (s->include_usage && !usage))
        return IFD_EINVAL;
    for (uint32_t i = 0; i < s->n_choices; i++)
        if (s->state[i] != ST_FINISHED)
            return IFD_EINVAL;
    if (s->meta.kind == IFD_OAI_RESPONSES) {
        if (!usage)
            return IFD_EINVAL;
        int rc = ifd__resp_stream_end(s, out, usage);
        if (rc == 0)
            s->ended = true;
        return rc;
    }
    size_t start = out->len;
    int rc = 0;
    if (s->include_usage) {
        int bad = 0;
        bool chat = s->meta.kind == IFD_OAI_CHAT;
        json_t *o = base_obj(&s->meta, chat ? "chat.completion.chunk" : "text_completion", &bad);
        ifd__oai_json_set(o, "choices", json_array(), &bad);
        ifd__oai_json_set(o, "usage", usage_obj(usage, &bad), &bad);
        rc = ifd__oai_json_emit(out, o, bad, true);
    }
    if (rc == 0 && (rc = ifd_sse_done(out)) < 0) {
        out->len = start;
        if (out->data)
            out->data[start] = '\0';
    }
    if (rc == 0)
        s->ended = true;
    return rc;
}

/* ---- other endpoints --------------------------------------------------------------------- */

static json_t *model_obj(const ifd_oai_model_t *m, int *bad)
{
    json_t *e = json_object();
    ifd__oai_json_set(e, "id", ifd__oai_json_str(m->id, strlen(m->id)), bad);
    ifd__oai_json_set(e, "object", json_string("model"), bad);
    ifd__oai_json_set(e, "created", json_integer(m->created), bad);
    ifd__oai_json_set(e, "owned_by", json_string(m->owned_by ? m->owned_by : "inferd"), bad);
    const char *root = m->root ? m->root : m->id;
    ifd__oai_json_set(e, "root", ifd__oai_json_str(root, strlen(root)), bad);
    ifd__oai_json_set(e, "parent", json_null(), bad);
    if (m->max_model_len > 0)
        ifd__oai_json_set(e, "max_model_len", json_integer(m->max_model_len), bad);
    if (m->architecture)
        ifd__oai_json_set(e, "architecture", json_string(m->architecture), bad);
    if (m->format)
        ifd__oai_json_set(e, "format", json_string(m->format), bad);
    return e;
}

int ifd_oai_models_json(ifd_buf_t *out, const ifd_oai_model_t *models, size_t n)
{
    if (n && !models)
        return IFD_EINVAL;
    int bad = 0;
    json_t *data = json_array();
    for (size_t i = 0; i < n; i++) {
        if (!models[i].id) {
            bad++;
            continue;
        }
        ifd__oai_json_add(data, model_obj(&models[i], &bad), &bad);
    }
    json_t *o = json_object();
    ifd__oai_json_set(o, "object", json_string("list"), &bad);
    ifd__oai_json_set(o, "data", data, &bad);
    return ifd__oai_json_emit(out, o, bad, false);
}

int ifd_oai_model_json(ifd_buf_t *out, const ifd_oai_model_t *m)
{
    if (!m || !m->id)
        return IFD_EINVAL;
    int bad = 0;
    return ifd__oai_json_emit(out, model_obj(m, &bad), bad, false);
}

int ifd_oai_tokenize_json(ifd_buf_t *out, const int32_t *tokens, size_t n, int64_t max_model_len,
                          const ifd_oai_bytes_t *token_strs)
{
    if (n && !tokens)
        return IFD_EINVAL;
    int bad = 0;
    json_t *o = json_object();
    ifd__oai_json_set(o, "count", json_integer((json_int_t)n), &bad);
    ifd__oai_json_set(o, "max_model_len", json_integer(max_model_len), &bad);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        ifd__oai_json_add(arr, json_integer(tokens[i]), &bad);
    ifd__oai_json_set(o, "tokens", arr, &bad);
    if (token_strs) {
        json_t *strs = json_array();
        for (size_t i = 0; i < n; i++)
            ifd__oai_json_add(strs, ifd__oai_json_str(token_strs[i].p, token_strs[i].len), &bad);
        ifd__oai_json_set(o, "token_strs", strs, &bad);
    } else {
        ifd__oai_json_set(o, "token_strs", json_null(), &bad);
    }
    return ifd__oai_json_emit(out, o, bad, false);
}

int ifd_oai_detokenize_json(ifd_buf_t *out, const char *text, size_t len)
{
    int bad = 0;
    json_t *o = json_object();
    ifd__oai_json_set(o, "prompt", ifd__oai_json_str(text, len), &bad);
    return ifd__oai_json_emit(out, o, bad, false);
}
