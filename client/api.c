/*
 * api.c — OpenAI request bodies and the response reader (see api.h).
 *
 * The reader is lenient in what it accepts (the shapes of OpenAI, vLLM and
 * llama.cpp all parse) and strict only where the benchmark needs it: a
 * chunk counts as content-bearing when its "choices" array is not empty.
 */
#include "api.h"

#include "error.h"
#include "image/dataurl.h"
#include "image/image.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ifd_cli_api_params_t ifd_cli_api_default_params(void)
{
    return (ifd_cli_api_params_t){
        .max_tokens = -1,
        .temperature = -1,
        .top_p = -1,
        .stream = true,
        .include_usage = true,
        .use_cache = -1,
    };
}

/* Adds the shared fields; 0 or -1 when out of memory. */
static int params_json(json_t *o, const ifd_cli_api_params_t *p, bool chat)
{
    int bad = 0;
    if (p->model)
        bad |= json_object_set_new(o, "model", json_string(p->model));
    if (p->max_tokens >= 0)
        bad |= json_object_set_new(o, chat ? "max_completion_tokens" : "max_tokens",
                                   json_integer(p->max_tokens));
    if (p->temperature >= 0)
        bad |= json_object_set_new(o, "temperature", json_real(p->temperature));
    if (p->top_p >= 0)
        bad |= json_object_set_new(o, "top_p", json_real(p->top_p));
    if (p->has_seed)
        bad |= json_object_set_new(o, "seed", json_integer(p->seed));
    bad |= json_object_set_new(o, "stream", json_boolean(p->stream));
    if (p->stream && p->include_usage) {
        json_t *so = json_object();
        bad |= json_object_set_new(so, "include_usage", json_true());
        bad |= json_object_set_new(o, "stream_options", so);
    }
    if (p->ignore_eos)
        bad |= json_object_set_new(o, "ignore_eos", json_true());
    if (p->use_cache >= 0)
        bad |= json_object_set_new(o, "use_cache", json_boolean(p->use_cache));
    return bad ? -1 : 0;
}

char *ifd_cli_api_chat_body(const ifd_cli_api_params_t *p, json_t *messages)
{
    json_t *o = json_object();
    char *s = NULL;
    if (o && params_json(o, p, true) == 0 && json_object_set(o, "messages", messages) == 0)
        s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

char *ifd_cli_api_completion_body(const ifd_cli_api_params_t *p, const char *prompt,
                                  const int32_t *tokens, size_t n_tokens)
{
    json_t *o = json_object();
    char *s = NULL;
    if (!o || params_json(o, p, false) < 0)
        goto out;
    if (tokens) {
        json_t *a = json_array();
        for (size_t i = 0; i < n_tokens; i++)
            if (json_array_append_new(a, json_integer(tokens[i])) < 0)
                break;
        if (json_object_set_new(o, "prompt", a) < 0)
            goto out;
    } else if (json_object_set_new(o, "prompt", json_string(prompt ? prompt : "")) < 0) {
        goto out;
    }
    s = json_dumps(o, JSON_COMPACT);
out:
    json_decref(o);
    return s;
}

/* ---- reader ---------------------------------------------------------------------------------- */

void ifd_cli_api_reader_init(ifd_cli_api_reader_t *r, ifd_cli_api_text_cb text,
                             ifd_cli_api_chunk_cb chunk, void *ud)
{
    memset(r, 0, sizeof(*r));
    r->text_cb = text;
    r->chunk_cb = chunk;
    r->ud = ud;
    ifd_sse_parser_init(&r->sse, 0);
}

void ifd_cli_api_reader_close(ifd_cli_api_reader_t *r)
{
    ifd_sse_parser_close(&r->sse);
    ifd_buf_free(&r->raw);
    json_decref(r->response);
    r->response = NULL;
}

static void copy_str(char *dst, size_t n, json_t *v)
{
    if (json_is_string(v))
        snprintf(dst, n, "%s", json_string_value(v));
}

static void read_usage(ifd_cli_api_reader_t *r, json_t *u)
{
    if (!json_is_object(u))
        return;
    r->has_usage = true;
    r->usage.prompt_tokens = json_integer_value(json_object_get(u, "prompt_tokens"));
    r->usage.completion_tokens = json_integer_value(json_object_get(u, "completion_tokens"));
    json_t *d = json_object_get(u, "prompt_tokens_details");
    r->usage.cached_tokens = json_integer_value(json_object_get(d, "cached_tokens"));
}

/* The text of a choice: a delta's or message's content, or a completion's text. */
static json_t *choice_text(json_t *ch)
{
    json_t *t = json_object_get(ch, "text");
    if (json_is_string(t))
        return t;
    json_t *d = json_object_get(ch, "delta");
    if (!d)
        d = json_object_get(ch, "message");
    t = json_object_get(d, "content");
    return json_is_string(t) ? t : NULL;
}

/* One response object (a stream chunk or the whole non-stream body). */
static int handle_object(ifd_cli_api_reader_t *r, json_t *o)
{
    json_t *err = json_object_get(o, "error");
    if (err) {
        if (json_is_object(err))
            copy_str(r->error, sizeof(r->error), json_object_get(err, "message"));
        else
            copy_str(r->error, sizeof(r->error), err);
        if (!r->error[0])
            snprintf(r->error, sizeof(r->error), "an error occurred during streaming");
        r->done = true;
        return 0;
    }
    if (!r->id[0])
        copy_str(r->id, sizeof(r->id), json_object_get(o, "id"));
    read_usage(r, json_object_get(o, "usage"));
    json_t *choices = json_object_get(o, "choices");
    if (!json_is_array(choices) || json_array_size(choices) == 0)
        return 0;
    r->n_chunks++;
    bool has_text = false;
    size_t i;
    json_t *ch;
    json_array_foreach(choices, i, ch)
    {
        json_t *idx = json_object_get(ch, "index");
        if (idx && json_integer_value(idx) != 0)
            continue;
        json_t *t = choice_text(ch);
        if (t && json_string_length(t) > 0) {
            has_text = true;
            if (r->text_cb) {
                int rc = r->text_cb(r->ud, json_string_value(t), json_string_length(t));
                if (rc < 0)
                    return rc;
            }
        }
        copy_str(r->finish_reason, sizeof(r->finish_reason), json_object_get(ch, "finish_reason"));
    }
    if (r->chunk_cb)
        r->chunk_cb(r->ud, has_text);
    return 0;
}

int ifd_cli_api_reader_feed(ifd_cli_api_reader_t *r, bool sse, const char *data, size_t len)
{
    if (r->mode == 0)
        r->mode = sse ? 1 : 2;
    if (r->mode == 2)
        return ifd_buf_append(&r->raw, data, len);
    int rc = ifd_sse_parser_feed(&r->sse, data, len);
    if (rc < 0)
        return rc;
    ifd_sse_event_t ev;
    while ((rc = ifd_sse_parser_next(&r->sse, &ev)) == 1) {
        if (r->done)
            continue; /* nothing counts after [DONE] or an error */
        if (ev.len >= 6 && memcmp(ev.data, "[DONE]", 6) == 0) {
            r->done = true;
            continue;
        }
        json_t *o = json_loadb(ev.data, ev.len, 0, NULL);
        if (!o)
            return IFD_EFORMAT;
        rc = handle_object(r, o);
        json_decref(o);
        if (rc < 0)
            return rc;
    }
    return rc;
}

int ifd_cli_api_reader_finish(ifd_cli_api_reader_t *r)
{
    if (r->mode != 2)
        return 0;
    json_t *o = json_loadb(r->raw.data ? r->raw.data : "", r->raw.len, 0, NULL);
    if (!o)
        return IFD_EFORMAT;
    int rc = handle_object(r, o);
    r->done = true;
    if (r->keep_response) {
        json_decref(r->response);
        r->response = o;
    } else {
        json_decref(o);
    }
    return rc;
}

void ifd_cli_api_error_message(const char *body, size_t len, char *out, size_t n)
{
    out[0] = '\0';
    json_t *o = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    if (o) {
        json_t *e = json_object_get(o, "error");
        json_t *m = json_is_object(e) ? json_object_get(e, "message") : e;
        if (!m)
            m = json_object_get(o, "message");
        if (json_is_string(m))
            snprintf(out, n, "%s", json_string_value(m));
        json_decref(o);
        if (out[0])
            return;
    }
    if (!body || !len)
        return;
    size_t l = strcspn(body, "\r\n");
    if (l > len)
        l = len;
    if (l >= n)
        l = n - 1;
    memcpy(out, body, l);
    out[l] = '\0';
}

json_t *ifd_cli_api_image_part(const char *path, char *err, size_t errlen)
{
    enum { MAX_FILE = 64 << 20 };
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    uint8_t *data = malloc(MAX_FILE + 1);
    size_t n = data ? fread(data, 1, MAX_FILE + 1, f) : 0;
    bool bad = ferror(f);
    fclose(f);
    json_t *part = NULL;
    char *url = NULL;
    ifd_image_format_t fmt = data ? ifd_image_sniff(data, n) : IFD_IMAGE_UNKNOWN;
    char mime[32];
    snprintf(mime, sizeof mime, "image/%s", ifd_image_format_name(fmt));
    if (!data)
        snprintf(err, errlen, "%s: out of memory", path);
    else if (bad)
        snprintf(err, errlen, "%s: read error", path);
    else if (n > MAX_FILE)
        snprintf(err, errlen, "%s: over %d MiB", path, MAX_FILE >> 20);
    else if (fmt == IFD_IMAGE_UNKNOWN)
        snprintf(err, errlen, "%s: not an image (JPEG, PNG, WebP or GIF)", path);
    else if (ifd_image_data_url_encode(data, n, mime, &url))
        snprintf(err, errlen, "%s: out of memory", path);
    else if (!(part = json_pack("{s:s,s:{s:s}}", "type", "image_url", "image_url", "url", url)))
        snprintf(err, errlen, "%s: out of memory", path);
    free(url);
    free(data);
    return part;
}

json_t *ifd_cli_api_user_message(const char *text, const json_t *images)
{
    if (!json_array_size(images))
        return json_pack("{s:s,s:s}", "role", "user", "content", text);
    json_t *parts = json_deep_copy(images);
    if (!parts ||
        json_array_append_new(parts, json_pack("{s:s,s:s}", "type", "text", "text", text))) {
        json_decref(parts);
        return NULL;
    }
    return json_pack("{s:s,s:o}", "role", "user", "content", parts);
}
