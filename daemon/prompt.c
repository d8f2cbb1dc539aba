/*
 * prompt.c — see prompt.h. Two renderings, chosen by the template:
 *   a Jinja template that mentions tools renders the request's own JSON
 *   (messages, tools, tool calls, tool results) itself (ifd__render_json);
 *   any other template renders {role, content} messages (and a message's
 *   reasoning_content, which reasoning templates read), with the tools
 *   described in the system message and tool calls / results written as
 *   <tool_call> / <tool_response> blocks (ifd__render_plain).
 * Both then apply continue_final_message to the rendered text and tokenize
 * it. Nothing here depends on the endpoint: the request struct is all.
 */
#include "prompt.h"

#include "error.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* A {role, content} message of the plain rendering: content holds
 * content_len bytes, which may include NULs (a request's "\u0000"). */
typedef struct {
    const char *role;
    const char *content;
    size_t content_len;
} ifd__msg_t;

/*
 * Tools with a built-in template family (which has no syntax for them):
 * the tool definitions go into the system message, Hermes-style, with
 * instructions to answer with <tool_call> blocks (parsed back by
 * proto/toolcall); assistant tool calls are rendered as such blocks and
 * role "tool" messages as user turns holding <tool_response> blocks. The
 * strings come from the arena. 0, IFD_ENOMEM.
 */
static int ifd__tool_text(ifd_arena_t *a, const ifd_oai_request_t *rq, ifd__msg_t *msgs, size_t n)
{
    ifd_buf_t b = IFD_BUF_INIT;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const ifd_oai_message_t *m = &rq->messages[i];
        bool made = true;
        ifd_buf_clear(&b);
        /* contents may hold NULs: appended by length, never as C strings */
        if (!strcmp(m->role, "tool")) {
            rc = ifd_buf_puts(&b, "<tool_response>\n") ||
                 ifd_buf_append(&b, msgs[i].content, msgs[i].content_len) ||
                 ifd_buf_puts(&b, "\n</tool_response>");
            msgs[i].role = "user";
        } else if (m->tool_calls) {
            json_error_t je;
            json_t *calls = json_loads(m->tool_calls, JSON_ALLOW_NUL, &je);
            rc = ifd_buf_append(&b, msgs[i].content, msgs[i].content_len);
            for (size_t k = 0; !rc && k < json_array_size(calls); k++) {
                json_t *f = json_object_get(json_array_get(calls, k), "function");
                json_t *args = json_object_get(f, "arguments");
                json_t *parsed = json_is_string(args)
                                     ? json_loadb(json_string_value(args), json_string_length(args),
                                                  JSON_ALLOW_NUL, &je)
                                     : json_incref(args);
                json_t *o = json_object();
                json_object_set(o, "name", json_object_get(f, "name"));
                json_object_set_new(o, "arguments", parsed ? parsed : json_object());
                char *t = json_dumps(o, JSON_COMPACT);
                rc = !t ||
                     ifd_buf_printf(&b, "%s<tool_call>\n%s\n</tool_call>", b.len ? "\n" : "", t);
                free(t);
                json_decref(o);
            }
            json_decref(calls);
        } else {
            made = false;
        }
        if (made) {
            msgs[i].content = rc ? NULL : ifd_arena_strndup(a, b.data ? b.data : "", b.len);
            msgs[i].content_len = b.len;
        }
        if (!msgs[i].content)
            rc = IFD_ENOMEM;
    }
    ifd_buf_free(&b);
    return rc ? IFD_ENOMEM : 0;
}

/* The system text that describes the tools (built-in families only), after
 * system[0..system_len) when there is one; *len gets its bytes. */
static char *ifd__tools_system(ifd_arena_t *a, const ifd_oai_request_t *rq, const char *system,
                               size_t system_len, size_t *len)
{
    json_error_t je;
    json_t *tools = json_loads(rq->tools_json, JSON_ALLOW_NUL, &je);
    ifd_buf_t b = IFD_BUF_INIT;
    int rc = 0;
    if (system && system_len)
        rc = ifd_buf_append(&b, system, system_len) || ifd_buf_puts(&b, "\n\n");
    rc = rc || ifd_buf_puts(&b, "# Tools\n\nYou can call functions to help with the request. "
                                "Their signatures (JSON Schema) are inside <tools></tools>:\n"
                                "<tools>\n");
    for (size_t i = 0; !rc && i < json_array_size(tools); i++) {
        char *t = json_dumps(json_array_get(tools, i), JSON_COMPACT);
        rc = !t || ifd_buf_printf(&b, "%s\n", t);
        free(t);
    }
    rc = rc || ifd_buf_puts(&b, "</tools>\n\nTo call a function, answer with one JSON object "
                                "per call inside <tool_call></tool_call> tags:\n<tool_call>\n"
                                "{\"name\": <function name>, \"arguments\": <the arguments as "
                                "a JSON object>}\n</tool_call>");
    json_decref(tools);
    char *out = rc ? NULL : ifd_arena_strndup(a, b.data, b.len);
    *len = b.len;
    ifd_buf_free(&b);
    return out;
}

/* A Jinja template that mentions tools renders them (and tool calls, tool
 * results) itself; any other template gets the built-in tool text above. */
static bool ifd__template_does_tools(const ifd_chat_template_t *tpl)
{
    const char *src = ifd_chat_template_source(tpl);
    return src && strstr(src, "tool");
}

/* Tools are rendered unless tool_choice is "none". */
static bool ifd__tools_rendered(const ifd_oai_request_t *rq)
{
    return rq->tools_json && rq->tool_choice != IFD_OAI_TOOL_CHOICE_NONE;
}

/* vLLM's chat_template_kwargs and documents as the template's extra
 * variables (NULL none). Both are the parser's own compact JSON. */
static json_t *ifd__template_vars(const ifd_oai_request_t *rq)
{
    if (!rq->template_kwargs && !rq->documents)
        return NULL;
    json_t *v =
        rq->template_kwargs ? json_loads(rq->template_kwargs, JSON_ALLOW_NUL, NULL) : json_object();
    if (v && rq->documents)
        json_object_set_new(v, "documents", json_loads(rq->documents, JSON_ALLOW_NUL, NULL));
    return v;
}

/*
 * vLLM's continue_final_message (rendered without a generation prompt):
 * the prompt is cut right after the last message's content, so the model
 * continues that assistant message — transformers' rule: the content
 * (stripped) must appear in the rendered text; the cut follows its last
 * occurrence, without trailing whitespace the template trimmed.
 * 0 or IFD_EINVAL (err filled).
 */
static int ifd__continue_final(const ifd_oai_request_t *rq, ifd_chat_prompt_t *pr, char *err,
                               size_t errlen)
{
    if (!rq->n_messages || !rq->continue_final_message)
        return 0;
    const ifd_oai_message_t *lm = &rq->messages[rq->n_messages - 1];
    const char *last = lm->content ? lm->content : "";
    const char *b = last, *e = last + (lm->content ? lm->content_len : 0); /* NULs included */
    while (b < e && memchr(" \t\r\n", *b, 4))
        b++;
    while (e > b && memchr(" \t\r\n", e[-1], 4))
        e--;
    size_t core = (size_t)(e - b), lead_trimmed = (size_t)(last + lm->content_len - b);
    const char *at = NULL;
    for (const char *p = pr->text;
         core && (p = memmem(p, pr->len - (size_t)(p - pr->text), b, core)); p++)
        at = p;
    if (!core || !at) {
        snprintf(err, errlen,
                 "continue_final_message is set but the final message does not "
                 "appear in the prompt the chat template renders");
        return IFD_EINVAL;
    }
    size_t rest = pr->len - (size_t)(at - pr->text);
    size_t keep = rest >= lead_trimmed && !memcmp(at, b, lead_trimmed) ? lead_trimmed : core;
    size_t cut = (size_t)(at - pr->text) + keep;
    pr->len = cut;
    pr->text[cut] = '\0';
    size_t n = 0;
    for (size_t i = 0; i < pr->n_content; i++) { /* plain spans end at the cut */
        ifd_span_t *sp = &pr->content[i];
        if (sp->off >= cut)
            break;
        if (sp->off + sp->len > cut)
            sp->len = cut - sp->off;
        n++;
    }
    pr->n_content = n;
    return 0;
}

/* The contents with images as their parts ({"type": "text"} and {"type":
 * "image"}: transformers' shape, which Gemma 3's template renders as
 * <start_of_image>) on arr's messages, the request's from index skip on.
 * 0 or IFD_ENOMEM. */
static int ifd__image_parts(const ifd_oai_request_t *rq, json_t *arr, size_t skip)
{
    for (size_t i = 0; rq->n_images && i < rq->n_messages; i++) {
        if (!rq->messages[i].parts_json)
            continue;
        json_t *parts = json_loads(rq->messages[i].parts_json, JSON_ALLOW_NUL, NULL);
        if (!parts || json_object_set_new(json_array_get(arr, i + skip), "content", parts))
            return IFD_ENOMEM;
    }
    return 0;
}

/* The model's own template over the request's JSON messages and tools. */
static int ifd__render_json(const ifd_api_t *api, const ifd_oai_request_t *rq,
                            const ifd_chat_request_t *opts, ifd_chat_prompt_t *pr, char *err,
                            size_t errlen)
{
    json_error_t je;
    json_t *msgs = json_loads(rq->messages_json, JSON_ALLOW_NUL, &je);
    json_t *tools =
        ifd__tools_rendered(rq) ? json_loads(rq->tools_json, JSON_ALLOW_NUL, &je) : NULL;
    if (!msgs || (ifd__tools_rendered(rq) && !tools)) {
        json_decref(msgs);
        json_decref(tools);
        return IFD_ENOMEM;
    }
    /* "developer" is OpenAI's new name for "system" */
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role && !strcmp(role, "developer"))
            json_object_set_new(m, "role", json_string("system"));
    }
    int prc = ifd__image_parts(rq, msgs, 0);
    if (prc) {
        json_decref(msgs);
        json_decref(tools);
        return prc;
    }
    json_t *vars = ifd__template_vars(rq);
    ifd_chat_request_t cr = *opts;
    cr.messages = msgs;
    cr.tools = tools;
    cr.vars = vars;
    int rc = ifd_chat_render_request(api->tpl, &cr, pr, err, errlen);
    json_decref(msgs);
    json_decref(tools);
    json_decref(vars);
    return rc;
}

/* m[0..n) as the JSON messages the template renders (their contents whole,
 * NULs included), or NULL with *rc set: IFD_EINVAL (invalid UTF-8: err
 * says which message, as ifd_chat_render_msgs does) or IFD_ENOMEM. */
static json_t *ifd__msgs_json(const ifd__msg_t *m, size_t n, char *err, size_t errlen, int *rc)
{
    json_t *arr = json_array();
    *rc = arr ? 0 : IFD_ENOMEM;
    for (size_t i = 0; !*rc && i < n; i++) {
        json_t *o =
            json_pack("{s:s,s:s%}", "role", m[i].role, "content", m[i].content, m[i].content_len);
        if (!o) {
            snprintf(err, errlen, "message %zu is not valid UTF-8", i);
            *rc = IFD_EINVAL;
        } else if (json_array_append_new(arr, o)) {
            *rc = IFD_ENOMEM;
        }
    }
    if (*rc) {
        json_decref(arr);
        return NULL;
    }
    return arr;
}

/* The messages' reasoning_content (a replayed reasoning: responses.h; or a
 * chat client's, as vLLM passes it) on arr's messages, which are the
 * request's from index skip on: a template that reads it (Qwen3,
 * DeepSeek-R1 style) renders it in the plain rendering too. 0 or
 * IFD_ENOMEM. */
static int ifd__plain_reasoning(const ifd_oai_request_t *rq, json_t *arr, size_t skip)
{
    if (!strstr(rq->messages_json, "\"reasoning_content\""))
        return 0; /* the common case: nothing to parse */
    json_t *src = json_loads(rq->messages_json, JSON_ALLOW_NUL, NULL);
    int rc = src ? 0 : IFD_ENOMEM;
    for (size_t i = 0; !rc && i < json_array_size(src); i++) {
        json_t *r = json_object_get(json_array_get(src, i), "reasoning_content");
        if (json_is_string(r) &&
            json_object_set(json_array_get(arr, i + skip), "reasoning_content", r))
            rc = IFD_ENOMEM;
    }
    json_decref(src);
    return rc;
}

/* {role, content} messages (and their reasoning_content), tools as text
 * (any template without tools). */
static int ifd__render_plain(const ifd_api_t *api, ifd_arena_t *a, const ifd_oai_request_t *rq,
                             const ifd_chat_request_t *opts, ifd_chat_prompt_t *pr, char *err,
                             size_t errlen)
{
    ifd__msg_t *msgs = calloc(rq->n_messages + 1, sizeof *msgs);
    if (!msgs)
        return IFD_ENOMEM;
    /* msgs[0] is kept free for a tools system message */
    ifd__msg_t *m = msgs + 1;
    for (size_t i = 0; i < rq->n_messages; i++) {
        const char *role = rq->messages[i].role;
        m[i].role = !strcmp(role, "developer") ? "system" : role;
        m[i].content = rq->messages[i].content ? rq->messages[i].content : "";
        m[i].content_len = rq->messages[i].content ? rq->messages[i].content_len : 0;
    }
    int rc = ifd__tool_text(a, rq, m, rq->n_messages);
    ifd__msg_t *all = m;
    size_t n_all = rq->n_messages;
    if (!rc && ifd__tools_rendered(rq)) {
        bool has_sys = n_all && !strcmp(m[0].role, "system");
        size_t sys_len;
        char *sys = ifd__tools_system(a, rq, has_sys ? m[0].content : NULL,
                                      has_sys ? m[0].content_len : 0, &sys_len);
        if (!sys) {
            rc = IFD_ENOMEM;
        } else if (has_sys) {
            m[0].content = sys;
            m[0].content_len = sys_len;
        } else {
            all = msgs;
            all[0].role = "system";
            all[0].content = sys;
            all[0].content_len = sys_len;
            n_all++;
        }
    }
    json_t *arr = rc ? NULL : ifd__msgs_json(all, n_all, err, errlen, &rc);
    if (!rc)
        rc = ifd__plain_reasoning(rq, arr, all == msgs ? 1 : 0);
    if (!rc)
        rc = ifd__image_parts(rq, arr, all == msgs ? 1 : 0);
    json_t *vars = ifd__template_vars(rq);
    if (!rc) {
        ifd_chat_request_t cr = *opts;
        cr.messages = arr;
        cr.tools = NULL;
        cr.vars = vars;
        rc = ifd_chat_render_request(api->tpl, &cr, pr, err, errlen);
    }
    json_decref(arr);
    json_decref(vars);
    free(msgs);
    return rc;
}

static const char ifd__boi[] = "<start_of_image>";

/* The byte offsets of the image placeholders outside pr's plain spans, into
 * at[0 .. max): their count (as ifd_image_prompt_encode finds them). */
static size_t ifd__placeholders(const ifd_chat_prompt_t *pr, size_t *at, size_t max)
{
    const size_t bl = sizeof ifd__boi - 1;
    size_t n = 0, k = 0;
    for (size_t i = 0; i + bl <= pr->len && n < max; i++) {
        while (k < pr->n_content && pr->content[k].off + pr->content[k].len <= i)
            k++;
        if (k < pr->n_content && pr->content[k].off < i + bl) {
            i = pr->content[k].off + pr->content[k].len - 1;
            continue;
        }
        if (!memcmp(pr->text + i, ifd__boi, bl)) {
            at[n++] = i;
            i += bl - 1;
        }
    }
    return n;
}

/*
 * Pan-and-scan (Gemma3Processor): the placeholder of an image with crops
 * becomes "Here is the original image <start_of_image> and here are some
 * crops to help you see better <start_of_image> <start_of_image>…" (one
 * per crop), the wording outside message text. pr's text and plain spans
 * are rewritten. 0 or IFD_ENOMEM.
 */
static int ifd__pan_and_scan(ifd_chat_prompt_t *pr, const uint32_t *n_crops, size_t n_images)
{
    size_t at[IFD_OAI_MAX_IMAGES];
    size_t n = ifd__placeholders(pr, at, n_images < IFD_OAI_MAX_IMAGES ? n_images : 0);
    bool any = false;
    for (size_t k = 0; k < n; k++)
        any |= n_crops[k] > 0;
    if (!any)
        return 0;
    ifd_buf_t b = IFD_BUF_INIT;
    size_t from = 0, sp = 0;
    int rc = 0;
    for (size_t k = 0; k < n && !rc; k++) {
        if (!n_crops[k])
            continue;
        ptrdiff_t delta = (ptrdiff_t)b.len - (ptrdiff_t)from; /* shift of what precedes */
        for (; sp < pr->n_content && pr->content[sp].off < at[k]; sp++)
            pr->content[sp].off = (size_t)((ptrdiff_t)pr->content[sp].off + delta);
        rc = ifd_buf_append(&b, pr->text + from, at[k] - from) ||
             ifd_buf_printf(&b,
                            "Here is the original image %s and here are some crops to help "
                            "you see better",
                            ifd__boi);
        for (uint32_t c = 0; !rc && c < n_crops[k]; c++)
            rc = ifd_buf_printf(&b, " %s", ifd__boi);
        from = at[k] + sizeof ifd__boi - 1;
    }
    ptrdiff_t delta = (ptrdiff_t)b.len - (ptrdiff_t)from;
    for (; sp < pr->n_content; sp++)
        pr->content[sp].off = (size_t)((ptrdiff_t)pr->content[sp].off + delta);
    if (!rc)
        rc = ifd_buf_append(&b, pr->text + from, pr->len - from);
    if (rc) {
        ifd_buf_free(&b);
        return IFD_ENOMEM;
    }
    free(pr->text);
    pr->text = b.data; /* NUL-terminated by ifd_buf */
    pr->len = b.len;
    return 0;
}

/* The rendered prompt's ids with each image placeholder expanded
 * (image_prompt.h) and the spans of the pictures' soft tokens; BOS as
 * ifd_chat_tokenize adds it. A template that rendered another number of
 * placeholders than there are pictures: a 400. */
static int ifd__tokenize_images(const ifd_api_t *api, const ifd_oai_request_t *rq,
                                ifd_chat_prompt_t *pr, ifd_tokens_t *out, ifd_prompt_images_t *img,
                                ifd_oai_error_t *err)
{
    int rc = img->n_crops ? ifd__pan_and_scan(pr, img->n_crops, rq->n_images) : 0;
    size_t n0 = out->n;
    img->n = 0;
    if (!rc)
        rc =
            ifd_image_prompt_encode(api->tok, img->ip, pr->text, pr->len, IFD_TOK_PARSE_SPECIAL,
                                    pr->content, pr->n_content, out, img->spans, img->max, &img->n);
    if (rc == IFD_ERANGE || (!rc && img->n != img->max)) {
        size_t found = rc ? img->max + 1 : img->n;
        out->n = n0;
        ifd_oai_error_set(err, 400, NULL, "invalid_value", "messages",
                          "The model's chat template rendered %s%zu image placeholder(s) for "
                          "%zu picture(s): it does not render these images.",
                          rc ? "more than " : "", rc ? img->max : found, img->max);
        return IFD_EINVAL;
    }
    ifd_token_t bos = ifd_tokenizer_bos(api->tok);
    if (!rc && ifd_tokenizer_add_bos(api->tok) && (out->n == n0 || out->ids[n0] != bos)) {
        if ((rc = ifd_tokens_push(out, bos)))
            return rc;
        memmove(out->ids + n0 + 1, out->ids + n0, (out->n - n0 - 1) * sizeof *out->ids);
        out->ids[n0] = bos;
        for (size_t k = 0; k < img->n; k++)
            img->spans[k].start++;
    }
    return rc;
}

/* truncate_prompt_tokens with images: the cut may not reach the first
 * image (its <start_of_image> kept); the spans move with the ids. */
static int ifd__truncate_images(const ifd_api_t *api, const ifd_oai_request_t *rq, ifd_tokens_t *t,
                                ifd_prompt_images_t *img, ifd_oai_error_t *err)
{
    size_t n = t->n;
    ifd_prompt_truncate(api, rq, t);
    size_t cut = n - t->n;
    if (!cut)
        return 0;
    if (img->n && (size_t)img->spans[0].start < cut + 1) {
        ifd_oai_error_set(err, 400, NULL, "invalid_value", "truncate_prompt_tokens",
                          "truncate_prompt_tokens would cut into an image: the prompt's first "
                          "image begins at token %d of %zu.",
                          img->spans[0].start - 1, n);
        return IFD_EINVAL;
    }
    for (size_t k = 0; k < img->n; k++)
        img->spans[k].start -= (int32_t)cut;
    return 0;
}

void ifd_prompt_truncate(const ifd_api_t *api, const ifd_oai_request_t *rq, ifd_tokens_t *t)
{
    int64_t k = rq->truncate_prompt_tokens < 0 ? api->max_model_len : rq->truncate_prompt_tokens;
    if (k > 0 && (int64_t)t->n > k) {
        memmove(t->ids, t->ids + (t->n - (size_t)k), (size_t)k * sizeof *t->ids);
        t->n = (size_t)k;
    }
}

int ifd_prompt_chat(const ifd_api_t *api, ifd_arena_t *a, const ifd_oai_request_t *rq,
                    const atomic_int *cancel, ifd_tokens_t *out, const char **echo,
                    ifd_prompt_images_t *img, ifd_oai_error_t *err)
{
    /* the server's budgets for a rendering (config: template_timeout,
     * template_vars_override); the cancel flag is the client's leaving */
    ifd_chat_request_t opts = {.add_generation_prompt = rq->add_generation_prompt,
                               .vars_may_override = api->cfg->template_vars_override,
                               .max_time_ms = (unsigned)(api->cfg->template_timeout * 1000.0),
                               .cancel = cancel};
    if (echo) {
        const ifd_oai_message_t *last = rq->n_messages ? &rq->messages[rq->n_messages - 1] : NULL;
        *echo = rq->echo && last && !strcmp(last->role, "assistant")
                    ? (last->content ? last->content : "")
                    : NULL;
    }
    ifd_chat_prompt_t pr = {0};
    char msg[400] = "";
    int rc = ifd__template_does_tools(api->tpl)
                 ? ifd__render_json(api, rq, &opts, &pr, msg, sizeof msg)
                 : ifd__render_plain(api, a, rq, &opts, &pr, msg, sizeof msg);
    if (!rc)
        rc = ifd__continue_final(rq, &pr, msg, sizeof msg);
    if (rc == IFD_ECANCELED) {
        ifd_chat_prompt_free(&pr);
        return rc; /* the client left: nobody to answer */
    }
    if (rc == IFD_ENOTSUP && rq->n_images) {
        ifd_oai_error_set(err, 400, NULL, "invalid_value", "messages",
                          "The model's chat template cannot render images: %s", msg);
        ifd_chat_prompt_free(&pr);
        return IFD_EINVAL;
    }
    if (rc == IFD_EINVAL || rc == IFD_ETOOBIG) {
        /* the template cannot render the request (it raised, a built-in
         * family lacks the roles, a Jinja limit): its own words */
        ifd_oai_error_set(err, 400, NULL, "invalid_value", "messages",
                          "The model's chat template cannot render these messages: %s",
                          msg[0] ? msg : ifd_strerror(rc));
        ifd_chat_prompt_free(&pr);
        return rc == IFD_ETOOBIG ? IFD_ETOOBIG : IFD_EINVAL;
    }
    if (!rc && img && rq->n_images)
        rc = ifd__tokenize_images(api, rq, &pr, out, img, err);
    else if (!rc)
        rc = ifd_chat_tokenize(api->tpl, api->tok, &pr, out);
    ifd_chat_prompt_free(&pr);
    if (!rc && img && rq->n_images)
        return ifd__truncate_images(api, rq, out, img, err);
    if (!rc)
        ifd_prompt_truncate(api, rq, out);
    return rc;
}
