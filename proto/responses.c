/*
 * responses.c — see responses.h. Two halves: the translation of a
 * Responses body into a chat-completions body (then parsed by openai.c),
 * and the Response object and typed stream events built for openai.c's
 * builders when meta.kind is IFD_OAI_RESPONSES.
 *
 * Stream invariants: response.created comes first; one message item at
 * most (output_index of its opening), opened at the first text and closed
 * (output_text.done, content_part.done, output_item.done) before any
 * function_call item or the end; every item added is done before
 * response.completed / response.incomplete, whose output lists the items
 * in their output_index order with the ids their events used. Text,
 * logprobs and finished items are kept in arena buffers for the done
 * events and the final snapshot.
 */
#include "responses.h"

#include "error.h"
#include "oai_json.h"
#include "responses_impl.h"
#include "utf8.h"
#include "grammar/schema_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- translation ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    const char *why;
} refused_t;

/* Fields that need server-side state or features this server lacks:
 * refused whenever they have a value (null is "not given"). */
static const refused_t k_refused[] = {
    {"conversation", "this server keeps no conversations: send the whole conversation in 'input'"},
    {"prompt", "stored prompt templates are not supported"},
    {"max_tool_calls", "a limit on tool calls is not supported"},
    {"prompt_logprobs", "a Response has no place for them (use /v1/chat/completions)"},
};

/* Responses fields consumed by the translation (the rest of the body is
 * passed to the chat parser as it is: vLLM's sampling extras). */
static const char *const k_consumed[] = {
    "input",      "instructions", "max_output_tokens", "text",          "tools",
    "tool_choice", "store",       "metadata",          "reasoning",     "truncation",
    "include",    "top_logprobs", "background",        "service_tier",  "stream_options",
    "safety_identifier", "prompt_cache_key", "user",   "previous_response_id", "conversation",
    "prompt",     "max_tool_calls", "messages",
};

/* Chat error params back to the Responses field they came from. */
static const struct {
    const char *chat;
    const char *resp;
} k_param_map[] = {
    {"messages", "input"},
    {"max_completion_tokens", "max_output_tokens"},
    {"max_tokens", "max_output_tokens"},
    {"response_format", "text.format"},
    {"tools", "tools"},
    {"tool_choice", "tool_choice"},
    {"top_logprobs", "top_logprobs"},
};

/* A wrong type, or a missing field when j is NULL. */
static int bad_type(ifd__oai_json_ctx_t *c, const char *param, const char *want, const json_t *j)
{
    return j && !json_is_null(j) ? ifd__oai_json_bad_type(c, param, want, j)
                                 : ifd__oai_json_missing(c, param);
}

static int refuse(ifd__oai_json_ctx_t *c, const char *param, const char *why)
{
    return ifd__oai_json_fail(c, "unsupported_parameter", param,
                              "Unsupported parameter: '%s' is not supported by this server (%s).",
                              param, why);
}

/* An input_image part ({"image_url": "data:…", "detail": ignored; a
 * file_id is refused: there are no files) as a chat image_url part
 * appended to parts; its param goes to c->image_params. */
static int tr_image(ifd__oai_json_ctx_t *c, const json_t *p, size_t i, size_t k, json_t *parts)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    const json_t *url = json_object_get(p, "image_url");
    snprintf(param, sizeof param, "input[%zu].content[%zu].image_url", i, k);
    if (!url && json_object_get(p, "file_id"))
        return refuse(c, param, "images are given as data: URLs in image_url; there are no files");
    if (!json_is_string(url))
        return bad_type(c, param, "a string", url);
    snprintf(param, sizeof param, "input[%zu].content[%zu]", i, k);
    if (c->image_params && json_array_append_new(c->image_params, json_string(param)))
        return ifd__oai_json_oom(c);
    if (json_array_append_new(
            parts, json_pack("{s:s,s:{s:O}}", "type", "image_url", "image_url", "url", url)))
        return ifd__oai_json_oom(c);
    return 0;
}

/* A message content: a string, or parts of which the text kinds are kept
 * (as chat text parts) and images become chat image_url parts. */
static int tr_content(ifd__oai_json_ctx_t *c, const json_t *v, size_t i, json_t **out)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    if (json_is_string(v)) {
        *out = json_incref((json_t *)v);
        return 0;
    }
    snprintf(param, sizeof param, "input[%zu].content", i);
    if (!json_is_array(v))
        return bad_type(c, param, "a string or an array of content parts", v);
    json_t *parts = json_array();
    for (size_t k = 0; parts && k < json_array_size(v); k++) {
        const json_t *p = json_array_get(v, k);
        const json_t *tj = json_object_get(p, "type");
        const char *type = json_string_value(tj);
        snprintf(param, sizeof param, "input[%zu].content[%zu].type", i, k);
        if (!type) {
            json_decref(parts);
            return ifd__oai_json_missing(c, param);
        }
        if (ifd__oai_json_is(tj, "input_image")) {
            int rc = tr_image(c, p, i, k, parts);
            if (rc) {
                json_decref(parts);
                return rc;
            }
            continue;
        }
        if (!ifd__oai_json_is(tj, "input_text") && !ifd__oai_json_is(tj, "output_text") &&
            !ifd__oai_json_is(tj, "text")) {
            json_decref(parts);
            return ifd__oai_json_fail(
                c, "unsupported_parameter", param,
                "Unsupported content part '%.40s': only text parts (input_text, "
                "output_text) are supported by this server.",
                type);
        }
        const json_t *t = json_object_get(p, "text");
        if (!json_is_string(t)) {
            json_decref(parts);
            snprintf(param, sizeof param, "input[%zu].content[%zu].text", i, k);
            return bad_type(c, param, "a string", t);
        }
        json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", t));
    }
    if (!parts)
        return ifd__oai_json_oom(c);
    *out = parts;
    return 0;
}

/* An assistant message made by a reasoning item alone: no content yet, no calls. */
static bool reasoning_only(const json_t *m)
{
    return m && ifd__oai_json_is(json_object_get(m, "role"), "assistant") &&
           json_object_get(m, "reasoning") && !json_object_get(m, "content") &&
           !json_object_get(m, "tool_calls");
}

/* The text of a reasoning item into *out: its content parts
 * (reasoning_text), or when it has none its summary parts (summary_text),
 * joined with "\n". 0 or an error in c. */
static int reasoning_text(ifd__oai_json_ctx_t *c, const json_t *it, size_t i, json_t **out)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    static const char *const k_fields[] = {"content", "summary"};
    ifd_buf_t b = IFD_BUF_INIT;
    int rc = 0;
    for (size_t f = 0; f < 2 && !rc && !b.len; f++) {
        const json_t *parts = ifd__oai_json_get(it, k_fields[f]);
        if (parts && !json_is_array(parts)) {
            snprintf(param, sizeof param, "input[%zu].%s", i, k_fields[f]);
            rc = bad_type(c, param, "an array of text parts", parts);
        }
        for (size_t k = 0; !rc && parts && k < json_array_size(parts); k++) {
            const json_t *t = json_object_get(json_array_get(parts, k), "text");
            snprintf(param, sizeof param, "input[%zu].%s[%zu].text", i, k_fields[f], k);
            if (!json_is_string(t))
                rc = bad_type(c, param, "a string", t);
            else if ((b.len && ifd_buf_append(&b, "\n", 1)) ||
                     ifd_buf_append(&b, json_string_value(t), json_string_length(t)))
                rc = ifd__oai_json_oom(c);
        }
    }
    if (!rc && !(*out = ifd__oai_json_str(b.data, b.len)))
        rc = ifd__oai_json_oom(c);
    ifd_buf_free(&b);
    return rc;
}

/*
 * A reasoning item replayed (vLLM's rule, entrypoints/openai/responses/
 * utils.py): its text becomes the `reasoning` of the assistant message
 * just before when that has none, else of a new assistant message (which
 * the next assistant message item completes); the template reads it as
 * `reasoning_content` (the name Qwen3's, DeepSeek-R1's and most templates
 * use; vLLM sets both) or, without a place for it, drops it. Encrypted
 * reasoning cannot be read: 400.
 */
static int tr_reasoning(ifd__oai_json_ctx_t *c, const json_t *it, size_t i, json_t *msgs)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    if (ifd__oai_json_get(it, "encrypted_content")) {
        snprintf(param, sizeof param, "input[%zu].encrypted_content", i);
        return refuse(c, param, "this server produces no encrypted reasoning and cannot read it");
    }
    json_t *text = NULL;
    int rc = reasoning_text(c, it, i, &text);
    if (rc)
        return rc;
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    json_t *m = last && ifd__oai_json_is(json_object_get(last, "role"), "assistant") &&
                        !json_object_get(last, "reasoning")
                    ? json_incref(last)
                    : json_pack("{s:s}", "role", "assistant");
    int bad = 0;
    ifd__oai_json_set(m, "reasoning", json_incref(text), &bad);
    ifd__oai_json_set(m, "reasoning_content", text, &bad);
    if (!bad && m != last && json_array_append(msgs, m))
        bad++;
    json_decref(m);
    return bad ? ifd__oai_json_oom(c) : 0;
}

/* input → messages (after the instructions' system message, if any). */
static int tr_input(ifd__oai_json_ctx_t *c, const json_t *input, json_t *msgs)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    if (json_is_string(input)) {
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", input));
        return 0;
    }
    if (!json_is_array(input))
        return bad_type(c, "input", "a string or an array of input items", input);
    json_t *calls = NULL; /* tool_calls of the assistant message being gathered */
    for (size_t i = 0; i < json_array_size(input); i++) {
        const json_t *it = json_array_get(input, i);
        snprintf(param, sizeof param, "input[%zu]", i);
        if (!json_is_object(it))
            return bad_type(c, param, "an object", it);
        const json_t *tj = json_object_get(it, "type");
        const char *type = json_string_value(tj);
        if (!type || ifd__oai_json_is(tj, "message")) {
            const json_t *role = json_object_get(it, "role");
            /* the Responses API's roles are an enum (OpenAI's and vLLM's
             * types refuse others); chat takes any role (openai.h) */
            static const char *const roles[] = {"user", "assistant", "system", "developer"};
            size_t k = 0;
            while (role && k < sizeof roles / sizeof roles[0] && !ifd__oai_json_is(role, roles[k]))
                k++;
            if (role && k == sizeof roles / sizeof roles[0]) {
                snprintf(param, sizeof param, "input[%zu].role", i);
                return ifd__oai_json_fail(c, "invalid_value", param,
                                          "Invalid value for '%s': expected one of 'user', "
                                          "'assistant', 'system' or 'developer'.",
                                          param);
            }
            json_t *content = NULL;
            int rc = tr_content(c, json_object_get(it, "content"), i, &content);
            if (rc)
                return rc;
            json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
            if (ifd__oai_json_is(role, "assistant") && reasoning_only(last)) {
                /* the answer of the reasoning item just before (vLLM's rule) */
                if (json_object_set_new(last, "content", content))
                    return ifd__oai_json_oom(c);
                calls = NULL;
                continue;
            }
            json_t *m = json_pack("{s:O,s:o}", "role", role ? role : json_null(), "content",
                                  content);
            if (!m)
                return ifd__oai_json_oom(c);
            json_array_append_new(msgs, m);
            calls = NULL;
        } else if (ifd__oai_json_is(tj, "function_call")) {
            const json_t *name = json_object_get(it, "name");
            const json_t *args = json_object_get(it, "arguments");
            const json_t *id = json_object_get(it, "call_id");
            snprintf(param, sizeof param, "input[%zu].%s", i,
                     !json_is_string(name) ? "name"
                     : !json_is_string(args) ? "arguments"
                                             : "call_id");
            if (!json_is_string(name) || !json_is_string(args) || !json_is_string(id))
                return bad_type(c, param, "a string", json_object_get(it, strrchr(param, '.') + 1));
            if (!calls) { /* attach to the assistant message just before, or start one */
                json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
                const char *lr = json_string_value(json_object_get(last, "role"));
                if (!last || !lr || strcmp(lr, "assistant") ||
                    json_object_get(last, "tool_calls")) {
                    last = json_pack("{s:s,s:n}", "role", "assistant", "content");
                    if (!last || json_array_append_new(msgs, last))
                        return ifd__oai_json_oom(c);
                }
                calls = json_array();
                if (!calls || json_object_set_new(last, "tool_calls", calls))
                    return ifd__oai_json_oom(c);
            }
            json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", id, "type",
                                                   "function", "function", "name", name,
                                                   "arguments", args));
        } else if (ifd__oai_json_is(tj, "reasoning")) {
            int rc = tr_reasoning(c, it, i, msgs);
            if (rc)
                return rc;
            calls = NULL;
        } else if (ifd__oai_json_is(tj, "function_call_output")) {
            const json_t *id = json_object_get(it, "call_id");
            const json_t *output = json_object_get(it, "output");
            if (!json_is_string(id)) {
                snprintf(param, sizeof param, "input[%zu].call_id", i);
                return bad_type(c, param, "a string", id);
            }
            json_t *content = NULL;
            int rc = json_is_string(output)
                         ? (content = json_incref((json_t *)output), 0)
                         : tr_content(c, output, i, &content);
            if (rc)
                return rc;
            json_array_append_new(msgs, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id",
                                                  id, "content", content));
            calls = NULL;
        } else {
            snprintf(param, sizeof param, "input[%zu].type", i);
            return ifd__oai_json_fail(
                c, "unsupported_parameter", param,
                "Unsupported input item '%.40s': this server accepts message, reasoning, "
                "function_call and function_call_output items.",
                type);
        }
    }
    return 0;
}

/* tools: [{type: "function", name, description, parameters, strict}] → chat tools. */
static int tr_tools(ifd__oai_json_ctx_t *c, const json_t *tools, json_t *chat)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    if (!json_is_array(tools))
        return bad_type(c, "tools", "an array", tools);
    json_t *out = json_array();
    if (!out || json_object_set_new(chat, "tools", out))
        return ifd__oai_json_oom(c);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i);
        const char *type = json_string_value(json_object_get(t, "type"));
        snprintf(param, sizeof param, "tools[%zu].type", i);
        if (!ifd__oai_json_is(json_object_get(t, "type"), "function"))
            return ifd__oai_json_fail(c, "unsupported_parameter", param,
                                      "Unsupported tool type '%.40s': only function tools are "
                                      "supported by this server.",
                                      type ? type : "(none)");
        json_t *f = json_object();
        const char *keys[] = {"name", "description", "parameters", "strict"};
        for (size_t k = 0; f && k < sizeof keys / sizeof keys[0]; k++) {
            json_t *v = json_object_get(t, keys[k]);
            if (v)
                json_object_set(f, keys[k], v);
        }
        if (!f || json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function",
                                                       "function", f)))
            return ifd__oai_json_oom(c);
    }
    return 0;
}

/* tool_choice: "none" | "auto" | "required" | {type: "function", name}. */
static int tr_tool_choice(ifd__oai_json_ctx_t *c, const json_t *tc, json_t *chat)
{
    if (json_is_string(tc))
        return json_object_set(chat, "tool_choice", (json_t *)tc) ? ifd__oai_json_oom(c) : 0;
    if (!json_is_object(tc) || !ifd__oai_json_is(json_object_get(tc, "type"), "function"))
        return ifd__oai_json_fail(
            c, "unsupported_parameter", "tool_choice",
            "Unsupported 'tool_choice': use \"none\", \"auto\", \"required\" or "
            "{\"type\": \"function\", \"name\": …}.");
    json_t *name = json_object_get(tc, "name");
    if (!json_is_string(name))
        return bad_type(c, "tool_choice.name", "a string", name);
    json_t *v = json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name);
    return !v || json_object_set_new(chat, "tool_choice", v) ? ifd__oai_json_oom(c) : 0;
}

/* text.format → response_format. */
static int tr_text(ifd__oai_json_ctx_t *c, const json_t *text, json_t *chat)
{
    if (!json_is_object(text))
        return bad_type(c, "text", "an object", text);
    const json_t *f = ifd__oai_json_get(text, "format");
    if (!f)
        return 0;
    const json_t *tj = json_object_get(f, "type");
    const char *type = json_string_value(tj);
    if (!json_is_object(f) || !type)
        return ifd__oai_json_missing(c, "text.format.type");
    json_t *rf = NULL;
    if (ifd__oai_json_is(tj, "text")) {
        return 0;
    } else if (ifd__oai_json_is(tj, "json_object")) {
        rf = json_pack("{s:s}", "type", "json_object");
    } else if (ifd__oai_json_is(tj, "json_schema")) {
        json_t *js = json_object();
        const char *keys[] = {"name", "schema", "strict", "description"};
        for (size_t k = 0; js && k < sizeof keys / sizeof keys[0]; k++) {
            json_t *v = json_object_get(f, keys[k]);
            if (v)
                json_object_set(js, keys[k], v);
        }
        rf = js ? json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js) : NULL;
    } else {
        return ifd__oai_json_fail(c, "invalid_value", "text.format.type",
                                  "Invalid value '%.40s' for 'text.format.type': expected text, "
                                  "json_object or json_schema.",
                                  type);
    }
    return !rf || json_object_set_new(chat, "response_format", rf) ? ifd__oai_json_oom(c) : 0;
}

/* include, top_logprobs → logprobs, top_logprobs. */
static int tr_logprobs(ifd__oai_json_ctx_t *c, const json_t *o, json_t *chat)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    const json_t *inc = ifd__oai_json_get(o, "include");
    bool want = false;
    if (inc && !json_is_array(inc))
        return bad_type(c, "include", "an array of strings", inc);
    for (size_t i = 0; inc && i < json_array_size(inc); i++) {
        const char *s = json_string_value(json_array_get(inc, i));
        snprintf(param, sizeof param, "include[%zu]", i);
        if (ifd__oai_json_is(json_array_get(inc, i), "message.output_text.logprobs"))
            want = true;
        else if (ifd__oai_json_is(json_array_get(inc, i), "reasoning.encrypted_content"))
            continue; /* no reasoning items are produced: nothing to encrypt */
        else
            return ifd__oai_json_fail(
                c, "unsupported_parameter", param,
                "Unsupported 'include' value '%.60s': only "
                "\"message.output_text.logprobs\" and \"reasoning.encrypted_content\" are "
                "supported by this server.",
                s ? s : "(not a string)");
    }
    const json_t *top = ifd__oai_json_get(o, "top_logprobs");
    if (top && (!json_is_integer(top) || json_integer_value(top) != 0))
        want = true; /* the chat parser checks its range */
    if (!want)
        return 0;
    if (json_object_set_new(chat, "logprobs", json_true()) ||
        (top && json_object_set(chat, "top_logprobs", (json_t *)top)))
        return ifd__oai_json_oom(c);
    return 0;
}

/* A string's length in characters, as OpenAI's limits count them (the
 * parser's strings are valid UTF-8). */
static size_t chars(const json_t *str)
{
    return ifd_utf8_count(json_string_value(str), json_string_length(str));
}

static int too_long(ifd__oai_json_ctx_t *c, const char *param, size_t max, size_t got)
{
    return ifd__oai_json_fail(c, "string_above_max_length", param,
                              "Invalid '%s': string too long. Expected a string with maximum "
                              "length %zu, but got a string with length %zu instead.",
                              param, max, got);
}

/* metadata and user, which the Response repeats and the store keeps: held
 * to OpenAI's bounds (responses.h), so a request cannot make its stored
 * Response larger than its input and output. */
static int check_echoed(ifd__oai_json_ctx_t *c, const json_t *o)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    const json_t *v = ifd__oai_json_get(o, "user");
    if (v && !json_is_string(v))
        return bad_type(c, "user", "a string", v);
    if (v && chars(v) > IFD_RESPONSES_MAX_USER)
        return too_long(c, "user", IFD_RESPONSES_MAX_USER, chars(v));
    if (!(v = ifd__oai_json_get(o, "metadata")))
        return 0;
    if (!json_is_object(v))
        return bad_type(c, "metadata", "an object", v);
    if (json_object_size(v) > IFD_RESPONSES_MAX_METADATA)
        return ifd__oai_json_fail(
            c, "object_above_max_properties", "metadata",
            "Invalid 'metadata': too many properties. Expected an object with at most %d "
            "properties, but got an object with %zu properties instead.",
            IFD_RESPONSES_MAX_METADATA, json_object_size(v));
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)v, key, val)
    {
        size_t kc = ifd_utf8_count(key, strlen(key));
        if (kc > IFD_RESPONSES_MAX_METADATA_KEY)
            return ifd__oai_json_fail(
                c, "string_above_max_length", "metadata",
                "Invalid 'metadata': a key is too long. Expected keys with maximum length %d, "
                "but got a key with length %zu ('%.40s…') instead.",
                IFD_RESPONSES_MAX_METADATA_KEY, kc, key);
        snprintf(param, sizeof param, "metadata.%s", key);
        if (!json_is_string(val))
            return ifd__oai_json_bad_type(c, param, "a string", val);
        if (chars(val) > IFD_RESPONSES_MAX_METADATA_VALUE)
            return too_long(c, param, IFD_RESPONSES_MAX_METADATA_VALUE, chars(val));
    }
    return 0;
}

/* The fields the Response object repeats. */
static json_t *echo_obj(const json_t *o, const ifd_responses_state_t *st)
{
    json_t *e = json_object();
    if (!e)
        return NULL;
    static const struct {
        const char *key;
        const char *dflt; /* JSON text */
    } k_echo[] = {
        {"instructions", "null"}, {"max_output_tokens", "null"}, {"temperature", "1.0"},
        {"top_p", "1.0"},         {"tools", "[]"},               {"tool_choice", "\"auto\""},
        {"parallel_tool_calls", "true"}, {"metadata", "{}"},     {"user", "null"},
        {"top_logprobs", "0"},    {"text", "{\"format\":{\"type\":\"text\"}}"},
    };
    for (size_t i = 0; i < sizeof k_echo / sizeof k_echo[0]; i++) {
        json_t *v = ifd__oai_json_get(o, k_echo[i].key);
        if (v)
            json_object_set(e, k_echo[i].key, v);
        else
            json_object_set_new(e, k_echo[i].key,
                                json_loads(k_echo[i].dflt, JSON_DECODE_ANY, NULL));
    }
    json_object_set_new(e, "store", json_boolean(st->store));
    json_object_set_new(e, "truncation", json_string("disabled"));
    json_object_set_new(e, "previous_response_id",
                        st->previous_response_id ? json_string(st->previous_response_id)
                                                 : json_null());
    const json_t *r = ifd__oai_json_get(o, "reasoning");
    const json_t *effort = ifd__oai_json_get(r, "effort");
    const json_t *summary = ifd__oai_json_get(r, "summary");
    json_object_set_new(e, "reasoning", json_pack("{s:O,s:O}", "effort",
                                                  effort ? effort : json_null(), "summary",
                                                  summary ? summary : json_null()));
    json_object_set_new(e, "background", json_boolean(st->background));
    json_object_set_new(e, "service_tier", json_string("default"));
    return e;
}

int ifd_responses_echo_defaults(ifd_arena_t *a, ifd_oai_request_t *r, uint32_t set)
{
    if (!r->responses_echo || !(set & (IFD_OAI_GIVEN_TEMPERATURE | IFD_OAI_GIVEN_TOP_P)))
        return 0;
    json_t *e = json_loads(r->responses_echo, JSON_ALLOW_NUL, NULL);
    /* the float in force, printed as its shortest decimal (0.6f → 0.6) */
    char t[32], p[32];
    snprintf(t, sizeof t, "%.7g", (double)r->temperature);
    snprintf(p, sizeof p, "%.7g", (double)r->top_p);
    int bad = !e;
    if (e && (set & IFD_OAI_GIVEN_TEMPERATURE))
        bad |= json_object_set_new(e, "temperature", json_real(strtod(t, NULL)));
    if (e && (set & IFD_OAI_GIVEN_TOP_P))
        bad |= json_object_set_new(e, "top_p", json_real(strtod(p, NULL)));
    char *copy = bad ? NULL : ifd__oai_json_dump(a, e);
    json_decref(e);
    if (!copy)
        return IFD_ENOMEM;
    r->responses_echo = copy;
    return 0;
}

/*
 * store and previous_response_id against the server's store (NULL: none).
 * With a previous response its conversation (a JSON array of chat
 * messages) is appended to msgs: it goes after this request's
 * instructions and before its input. 0 or a parse error in c.
 */
static int tr_state(ifd__oai_json_ctx_t *c, const json_t *o, const ifd_responses_store_t *store,
                    ifd_responses_state_t *st, json_t *msgs)
{
    const json_t *v = ifd__oai_json_get(o, "store");
    if (v && !json_is_boolean(v))
        return bad_type(c, "store", "a boolean", v);
    const bool on = store && store->enabled;
    st->store = on && (!v || json_is_true(v)); /* OpenAI's (and vLLM's) default: true */
    const json_t *prev = ifd__oai_json_get(o, "previous_response_id");
    if (!prev)
        return 0;
    if (!json_is_string(prev))
        return bad_type(c, "previous_response_id", "a string", prev);
    if (!on)
        return refuse(c, "previous_response_id",
                      "no responses are stored (responses_store_entries is 0): send the whole "
                      "conversation in 'input'");
    const char *id = json_string_value(prev);
    /* an id never holds a NUL: one that does names nothing (cut short, it
     * could name another) */
    const char *conv = ifd__oai_json_has_nul(prev) ? NULL : store->conversation(store->ctx, id);
    if (!conv) {
        ifd_oai_error_set(c->err, 404, NULL, "previous_response_not_found", "previous_response_id",
                          "Previous response with id '%.100s' not found.", id);
        return IFD_EINVAL;
    }
    json_t *prior = json_loads(conv, JSON_ALLOW_NUL, NULL);
    int rc = json_is_array(prior) && !json_array_extend(msgs, prior) ? 0 : ifd__oai_json_oom(c);
    json_decref(prior);
    if (!rc && !(st->previous_response_id = ifd_arena_strdup(c->a, id)))
        rc = ifd__oai_json_oom(c);
    return rc;
}

/* One of OpenAI's values for a reasoning setting, or null. */
static int check_enum(ifd__oai_json_ctx_t *c, const json_t *r, const char *key,
                      const char *const *ok, size_t n_ok, const char *list)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    const json_t *v = ifd__oai_json_get(r, key);
    for (size_t i = 0; v && i < n_ok; i++)
        if (ifd__oai_json_is(v, ok[i]))
            return 0;
    if (!v)
        return 0;
    snprintf(param, sizeof param, "reasoning.%s", key);
    if (!json_is_string(v))
        return bad_type(c, param, "a string", v);
    return ifd__oai_json_fail(c, "invalid_value", param,
                              "Invalid value: '%.40s'. Supported values are: %s.",
                              json_string_value(v), list);
}

/*
 * reasoning: {effort, summary} (OpenAI's values checked). The effort goes
 * to the chat template as the variable reasoning_effort — what vLLM's
 * Responses endpoint passes (ResponsesRequest.build_chat_params), read by
 * templates that have effort levels (gpt-oss) and ignored by the others —
 * unless chat_template_kwargs sets it. No summary is produced (this server
 * returns no reasoning items), so `summary` is only echoed. Never a 400 for
 * a valid setting.
 */
static int tr_reasoning_param(ifd__oai_json_ctx_t *c, const json_t *o, json_t *chat)
{
    static const char *const k_effort[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
    static const char *const k_summary[] = {"auto", "concise", "detailed"};
    const json_t *r = ifd__oai_json_get(o, "reasoning");
    if (!r)
        return 0;
    if (!json_is_object(r))
        return bad_type(c, "reasoning", "an object", r);
    const size_t n_effort = sizeof k_effort / sizeof k_effort[0];
    const size_t n_summary = sizeof k_summary / sizeof k_summary[0];
    const char *summaries = "'auto', 'concise' and 'detailed'";
    int rc = check_enum(c, r, "effort", k_effort, n_effort,
                        "'none', 'minimal', 'low', 'medium', 'high' and 'xhigh'");
    if (!rc)
        rc = check_enum(c, r, "summary", k_summary, n_summary, summaries);
    if (!rc) /* its deprecated name */
        rc = check_enum(c, r, "generate_summary", k_summary, n_summary, summaries);
    const json_t *effort = ifd__oai_json_get(r, "effort");
    if (rc || !effort)
        return rc;
    json_t *kw = json_object_get(chat, "chat_template_kwargs");
    if (!kw || json_is_null(kw)) {
        kw = json_object();
        if (!kw || json_object_set_new(chat, "chat_template_kwargs", kw))
            return ifd__oai_json_oom(c);
    }
    if (!json_is_object(kw) || json_object_get(kw, "reasoning_effort"))
        return 0; /* the chat parser reports a bad one; the client's own wins */
    return json_object_set(kw, "reasoning_effort", (json_t *)effort) ? ifd__oai_json_oom(c) : 0;
}

/*
 * background: true runs the Response detached from the request (the
 * caller's part: responses.h); it needs the Response stored — `store` not
 * false, and a store on this server.
 */
static int tr_background(ifd__oai_json_ctx_t *c, const json_t *o,
                         const ifd_responses_store_t *store, ifd_responses_state_t *st)
{
    const json_t *v = ifd__oai_json_get(o, "background");
    if (v && !json_is_boolean(v))
        return bad_type(c, "background", "a boolean", v);
    if (!json_is_true(v))
        return 0;
    if (!store || !store->enabled)
        return refuse(c, "background",
                      "no responses are stored (responses_store_entries is 0), so none can be "
                      "polled");
    if (!st->store)
        return ifd__oai_json_fail(c, "invalid_value", "background",
                                  "Invalid value for 'background': background can only be used "
                                  "when 'store' is true.");
    st->background = true;
    return 0;
}

/* Builds the chat body for o; 0 or a parse error in c. */
static int translate(ifd__oai_json_ctx_t *c, const json_t *o, const ifd_responses_store_t *store,
                     ifd_responses_state_t *st, json_t **out)
{
    for (size_t i = 0; i < sizeof k_refused / sizeof k_refused[0]; i++)
        if (ifd__oai_json_get(o, k_refused[i].name))
            return refuse(c, k_refused[i].name, k_refused[i].why);
    const json_t *v;
    if ((v = ifd__oai_json_get(o, "truncation")) && !ifd__oai_json_is(v, "disabled"))
        return refuse(c, "truncation", "only \"disabled\": the context length is an error");
    if ((v = ifd__oai_json_get(o, "n")) && !(json_is_integer(v) && json_integer_value(v) == 1))
        return refuse(c, "n", "a response has one output");
    const json_t *input = ifd__oai_json_get(o, "input");
    if (!input)
        return ifd__oai_json_missing(c, "input");
    int rc = check_echoed(c, o);
    if (rc)
        return rc;

    json_t *chat = json_deep_copy(o);
    json_t *msgs = json_array();
    rc = chat && msgs ? 0 : ifd__oai_json_oom(c);
    for (size_t i = 0; !rc && i < sizeof k_consumed / sizeof k_consumed[0]; i++)
        json_object_del(chat, k_consumed[i]);
    const json_t *ins = ifd__oai_json_get(o, "instructions");
    if (!rc && ins && !json_is_string(ins))
        rc = bad_type(c, "instructions", "a string", ins);
    if (!rc && ins)
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", ins));
    if (!rc)
        rc = tr_state(c, o, store, st, msgs);
    if (!rc)
        rc = tr_background(c, o, store, st);
    if (!rc)
        rc = tr_reasoning_param(c, o, chat);
    if (!rc)
        rc = tr_input(c, input, msgs);
    if (!rc && json_array_size(msgs) == 0)
        rc = ifd__oai_json_fail(c, "invalid_value", "input", "'input' holds no message.");
    if (!rc && json_object_set(chat, "messages", msgs))
        rc = ifd__oai_json_oom(c);
    if (!rc && (v = ifd__oai_json_get(o, "max_output_tokens")))
        json_object_set(chat, "max_completion_tokens", (json_t *)v);
    if (!rc && (v = ifd__oai_json_get(o, "tools")))
        rc = tr_tools(c, v, chat);
    if (!rc && (v = ifd__oai_json_get(o, "tool_choice")))
        rc = tr_tool_choice(c, v, chat);
    if (!rc && (v = ifd__oai_json_get(o, "text")))
        rc = tr_text(c, v, chat);
    if (!rc)
        rc = tr_logprobs(c, o, chat);
    json_decref(msgs);
    if (rc) {
        json_decref(chat);
        return rc;
    }
    *out = chat;
    return 0;
}

int ifd_responses_parse(ifd_arena_t *a, const char *body, size_t len, ifd_oai_request_t *out,
                        ifd_oai_error_t *err)
{
    ifd_responses_state_t st;
    return ifd_responses_parse_stored(a, body, len, NULL, out, &st, err);
}

int ifd_responses_parse_stored(ifd_arena_t *a, const char *body, size_t len,
                               const ifd_responses_store_t *store, ifd_oai_request_t *out,
                               ifd_responses_state_t *st, ifd_oai_error_t *err)
{
    memset(err, 0, sizeof *err);
    memset(st, 0, sizeof *st);
    ifd__oai_json_ctx_t c = {.a = a, .err = err, .image_params = json_array()};
    if (!c.image_params)
        return ifd__oai_json_oom(&c);
    json_error_t je;
    json_t *o = ifd_schema_json_loadb(body, len, JSON_ALLOW_NUL, &je); /* as openai.c */
    if (!o) {
        json_decref(c.image_params);
        return ifd__oai_json_fail(
            &c, NULL, NULL, "We could not parse the JSON body of your request. (%s)", je.text);
    }
    if (!json_is_object(o)) {
        json_decref(o);
        json_decref(c.image_params);
        return ifd__oai_json_fail(&c, NULL, NULL, "The request body must be a JSON object.");
    }
    json_t *chat = NULL;
    int rc = translate(&c, o, store, st, &chat);
    char *text = rc ? NULL : json_dumps(chat, JSON_COMPACT);
    json_t *echo = rc ? NULL : echo_obj(o, st);
    char *echo_text = echo ? json_dumps(echo, JSON_COMPACT) : NULL;
    if (!rc && (!text || !echo_text))
        rc = ifd__oai_json_oom(&c);
    if (!rc) {
        rc = ifd_oai_parse_chat(a, text, strlen(text), out, err);
        for (size_t i = 0; rc && i < sizeof k_param_map / sizeof k_param_map[0]; i++) {
            size_t n = strlen(k_param_map[i].chat);
            if (!strncmp(err->param, k_param_map[i].chat, n) &&
                (err->param[n] == '\0' || err->param[n] == '[' || err->param[n] == '.')) {
                char p[sizeof err->param];
                snprintf(p, sizeof p, "%s", k_param_map[i].resp);
                snprintf(err->param, sizeof err->param, "%s", p);
                break;
            }
        }
    }
    if (!rc && !(out->responses_echo = ifd_arena_strdup(a, echo_text)))
        rc = ifd__oai_json_oom(&c);
    /* the images' params as the Responses input names them (translated in order) */
    for (size_t k = 0; !rc && json_array_size(c.image_params) == out->n_images && k < out->n_images;
         k++)
        if (!(out->images[k].param =
                  ifd_arena_strdup(a, json_string_value(json_array_get(c.image_params, k)))))
            rc = ifd__oai_json_oom(&c);
    json_decref(c.image_params);
    free(text);
    free(echo_text);
    json_decref(echo);
    json_decref(chat);
    json_decref(o);
    return rc;
}

/* ---- the Response object ---------------------------------------------------------------- */

/* An arena-grown byte buffer: the arena frees it with the request. */
typedef struct {
    char *p;
    size_t len, cap;
} abuf_t;

static int abuf_add(ifd_arena_t *a, abuf_t *b, const char *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *q = ifd_arena_alloc(a, cap);
        if (!q)
            return IFD_ENOMEM;
        if (b->len)
            memcpy(q, b->p, b->len);
        b->p = q;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

/* Appends v's JSON to b, comma-joined with what b holds (v is not consumed;
 * NULL is IFD_ENOMEM, as from a failed constructor). */
static int abuf_add_json(ifd_arena_t *a, abuf_t *b, const json_t *v)
{
    char *d = v ? json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    int rc = d ? 0 : IFD_ENOMEM;
    if (!rc && b->len)
        rc = abuf_add(a, b, ",", 1);
    if (!rc)
        rc = abuf_add(a, b, d, strlen(d));
    free(d);
    return rc;
}

/* b's comma-joined JSON values as a JSON array (NULL on OOM). */
static json_t *abuf_array(const abuf_t *b)
{
    ifd_buf_t t = IFD_BUF_INIT;
    json_t *arr = NULL;
    if (!ifd_buf_printf(&t, "[%s]", b->p ? b->p : ""))
        arr = json_loads(t.data, JSON_ALLOW_NUL, NULL); /* output text may hold NULs */
    ifd_buf_free(&t);
    return arr;
}

struct ifd__resp_stream {
    ifd_arena_t *a;
    uint64_t seq;      /* sequence_number of the next event */
    bool created;      /* response.created sent */
    bool msg_open;     /* the message item is added and not done */
    uint32_t n_items;  /* output items added so far (the next output_index) */
    uint32_t msg_index;
    abuf_t text;       /* the message's text */
    abuf_t logprobs;   /* its logprob items, JSON, comma-joined */
    abuf_t items;      /* finished output items, JSON, comma-joined */
    const char *status; /* "completed" | "incomplete" once finished */
};

static const char *id_hex(const char *id)
{
    const char *u = strchr(id, '_');
    return u ? u + 1 : id;
}

static json_t *usage_json(const ifd_oai_usage_t *u, int *bad)
{
    json_t *o = json_object();
    ifd__oai_json_set(o, "input_tokens", json_integer(u->prompt_tokens), bad);
    ifd__oai_json_set(o, "input_tokens_details",
                      json_pack("{s:i}", "cached_tokens", (int)u->cached_tokens), bad);
    ifd__oai_json_set(o, "output_tokens", json_integer(u->completion_tokens), bad);
    ifd__oai_json_set(o, "output_tokens_details", json_pack("{s:i}", "reasoning_tokens", 0), bad);
    ifd__oai_json_set(o, "total_tokens",
                      json_integer((json_int_t)u->prompt_tokens + u->completion_tokens), bad);
    return o;
}

/* {type: "output_text", text, annotations: [], logprobs}; logprobs consumed. */
static json_t *text_part(const char *text, size_t len, json_t *logprobs, int *bad)
{
    json_t *p = json_object();
    ifd__oai_json_set(p, "type", json_string("output_text"), bad);
    ifd__oai_json_set(p, "text", ifd__oai_json_str(text, len), bad);
    ifd__oai_json_set(p, "annotations", json_array(), bad);
    ifd__oai_json_set(p, "logprobs", logprobs ? logprobs : json_array(), bad);
    return p;
}

static json_t *message_item(const ifd_oai_meta_t *m, const char *status, json_t *content, int *bad)
{
    json_t *it = json_object();
    ifd__oai_json_set(it, "id", json_sprintf("msg_%s", id_hex(m->id)), bad);
    ifd__oai_json_set(it, "type", json_string("message"), bad);
    ifd__oai_json_set(it, "status", json_string(status), bad);
    ifd__oai_json_set(it, "role", json_string("assistant"), bad);
    ifd__oai_json_set(it, "content", content ? content : json_array(), bad);
    return it;
}

static json_t *call_item(const ifd_oai_tool_call_t *tc, const char *status, bool with_args,
                         int *bad)
{
    json_t *it = json_object();
    ifd__oai_json_set(it, "id", json_sprintf("fc_%s", id_hex(tc->id)), bad);
    ifd__oai_json_set(it, "type", json_string("function_call"), bad);
    ifd__oai_json_set(it, "status", json_string(status), bad);
    ifd__oai_json_set(it, "call_id", json_string(tc->id), bad);
    ifd__oai_json_set(it, "name", ifd__oai_json_str(tc->name, strlen(tc->name)), bad);
    ifd__oai_json_set(
        it, "arguments",
        with_args ? ifd__oai_json_str(tc->arguments, strlen(tc->arguments)) : json_string(""), bad);
    return it;
}

/* The Response object: the request's echo, then identity, status, output, usage. */
static json_t *response_obj(const ifd_oai_meta_t *m, const char *status, json_t *output,
                            const ifd_oai_usage_t *u, int *bad)
{
    json_t *o = json_object();
    ifd__oai_json_set(o, "id", json_string(m->id), bad);
    ifd__oai_json_set(o, "object", json_string("response"), bad);
    ifd__oai_json_set(o, "created_at", json_integer(m->created), bad);
    ifd__oai_json_set(o, "model", ifd__oai_json_str(m->model, strlen(m->model)), bad);
    ifd__oai_json_set(o, "status", json_string(status), bad);
    ifd__oai_json_set(o, "error", json_null(), bad);
    ifd__oai_json_set(o, "incomplete_details",
                      strcmp(status, "incomplete")
                          ? json_null()
                          : json_pack("{s:s}", "reason", "max_output_tokens"),
                      bad);
    ifd__oai_json_set(o, "output", output ? output : json_array(), bad);
    ifd__oai_json_set(o, "usage", u ? usage_json(u, bad) : json_null(), bad);
    json_t *echo = m->responses_echo ? json_loads(m->responses_echo, JSON_ALLOW_NUL, NULL) : NULL;
    if (m->responses_echo && (!echo || json_object_update_missing(o, echo)))
        (*bad)++;
    json_decref(echo);
    return o;
}

static const char *status_of(const char *finish)
{
    return finish && !strcmp(finish, "length") ? "incomplete" : "completed";
}

int ifd__resp_json(ifd_buf_t *out, const ifd_oai_meta_t *m, const ifd_oai_choice_t *c,
                   const ifd_oai_usage_t *usage)
{
    int bad = 0;
    json_t *output = json_array();
    if (c->text_len || !c->n_tool_calls) {
        json_t *lp =
            c->has_logprobs ? ifd__oai_json_logprob_items(c->logprobs, c->n_logprobs, &bad) : NULL;
        json_t *content = json_array();
        ifd__oai_json_add(content, text_part(c->text, c->text_len, lp, &bad), &bad);
        ifd__oai_json_add(output, message_item(m, "completed", content, &bad), &bad);
    }
    for (size_t i = 0; i < c->n_tool_calls; i++)
        ifd__oai_json_add(output, call_item(&c->tool_calls[i], "completed", true, &bad), &bad);
    json_t *o = response_obj(m, status_of(c->finish_reason), output, usage, &bad);
    return ifd__oai_json_emit(out, o, bad, false);
}

int ifd_responses_conversation(ifd_buf_t *out, const ifd_oai_request_t *rq,
                               const ifd_oai_choice_t *answer)
{
    int bad = 0;
    json_t *msgs = rq->messages_json ? json_loads(rq->messages_json, JSON_ALLOW_NUL, NULL) : NULL;
    json_t *echo = rq->responses_echo ? json_loads(rq->responses_echo, JSON_ALLOW_NUL, NULL) : NULL;
    if (!json_is_array(msgs))
        bad++;
    /* the instructions' system message is this request's alone (OpenAI's rule) */
    const json_t *ins = json_object_get(echo, "instructions");
    if (!bad && ins && !json_is_null(ins) && json_array_size(msgs))
        json_array_remove(msgs, 0);
    json_t *m = json_object();
    ifd__oai_json_set(m, "role", json_string("assistant"), &bad);
    ifd__oai_json_set(m, "content",
                      answer->text_len || !answer->n_tool_calls
                          ? ifd__oai_json_str(answer->text ? answer->text : "", answer->text_len)
                          : json_null(),
                      &bad);
    if (answer->n_tool_calls) {
        json_t *calls = json_array();
        for (size_t i = 0; i < answer->n_tool_calls; i++) {
            const ifd_oai_tool_call_t *tc = &answer->tool_calls[i];
            ifd__oai_json_add(calls,
                              json_pack("{s:s,s:s,s:{s:o,s:o}}", "id", tc->id, "type", "function",
                                        "function", "name",
                                        ifd__oai_json_str(tc->name, strlen(tc->name)), "arguments",
                                        ifd__oai_json_str(tc->arguments, strlen(tc->arguments))),
                              &bad);
        }
        ifd__oai_json_set(m, "tool_calls", calls, &bad);
    }
    if (msgs)
        ifd__oai_json_add(msgs, m, &bad);
    else
        json_decref(m);
    char *d = bad ? NULL : json_dumps(msgs, JSON_COMPACT);
    json_decref(msgs);
    json_decref(echo);
    int rc = d ? ifd_buf_puts(out, d) : IFD_ENOMEM;
    free(d);
    return rc;
}

/* ---- streaming ---------------------------------------------------------------------------- */

/* Appends "event: TYPE\ndata: {…, type, sequence_number}\n\n"; ev consumed.
 * On failure out is unchanged. */
static int event(ifd_oai_stream_t *s, ifd_buf_t *out, const char *type, json_t *ev, int bad)
{
    json_t *o = json_object(); /* type and sequence_number first, as OpenAI sends them */
    ifd__oai_json_set(o, "type", json_string(type), &bad);
    ifd__oai_json_set(o, "sequence_number", json_integer((json_int_t)s->resp->seq), &bad);
    if (!o || !ev || json_object_update(o, ev))
        bad++;
    json_decref(ev);
    int rc = ifd__oai_json_emit_event(out, type, o, bad);
    if (rc == 0)
        s->resp->seq++;
    return rc;
}

int ifd__resp_stream_init(ifd_oai_stream_t *s, ifd_arena_t *a)
{
    s->resp = ifd_arena_calloc(a, 1, sizeof *s->resp);
    if (!s->resp)
        return IFD_ENOMEM;
    s->resp->a = a;
    return 0;
}

int ifd__resp_stream_start(ifd_oai_stream_t *s, ifd_buf_t *out)
{
    ifd__resp_stream_t *r = s->resp;
    if (r->created)
        return 0;
    int bad = 0;
    json_t *ev = json_object();
    ifd__oai_json_set(ev, "response", response_obj(&s->meta, "in_progress", NULL, NULL, &bad),
                      &bad);
    int rc = event(s, out, "response.created", ev, bad);
    if (!rc) {
        bad = 0;
        ev = json_object();
        ifd__oai_json_set(ev, "response", response_obj(&s->meta, "in_progress", NULL, NULL, &bad),
                          &bad);
        rc = event(s, out, "response.in_progress", ev, bad);
    }
    if (!rc)
        r->created = true;
    return rc;
}

/* {item_id, output_index, content_index} of the message's text part. */
static json_t *text_ref(const ifd_oai_stream_t *s, int *bad)
{
    json_t *ev = json_object();
    ifd__oai_json_set(ev, "item_id", json_sprintf("msg_%s", id_hex(s->meta.id)), bad);
    ifd__oai_json_set(ev, "output_index", json_integer(s->resp->msg_index), bad);
    ifd__oai_json_set(ev, "content_index", json_integer(0), bad);
    return ev;
}

static int open_message(ifd_oai_stream_t *s, ifd_buf_t *out)
{
    ifd__resp_stream_t *r = s->resp;
    int rc = ifd__resp_stream_start(s, out);
    if (rc || r->msg_open)
        return rc;
    r->msg_index = r->n_items++;
    int bad = 0;
    json_t *ev = json_object();
    ifd__oai_json_set(ev, "output_index", json_integer(r->msg_index), &bad);
    ifd__oai_json_set(ev, "item", message_item(&s->meta, "in_progress", NULL, &bad), &bad);
    rc = event(s, out, "response.output_item.added", ev, bad);
    if (!rc) {
        bad = 0;
        ev = text_ref(s, &bad);
        ifd__oai_json_set(ev, "part", text_part("", 0, NULL, &bad), &bad);
        rc = event(s, out, "response.content_part.added", ev, bad);
    }
    if (!rc)
        r->msg_open = true;
    return rc;
}

static int close_message(ifd_oai_stream_t *s, ifd_buf_t *out)
{
    ifd__resp_stream_t *r = s->resp;
    if (!r->msg_open)
        return 0;
    const char *t = r->text.p ? r->text.p : "";
    int bad = 0;
    json_t *ev = text_ref(s, &bad);
    ifd__oai_json_set(ev, "text", ifd__oai_json_str(t, r->text.len), &bad);
    ifd__oai_json_set(ev, "logprobs", abuf_array(&r->logprobs), &bad);
    int rc = event(s, out, "response.output_text.done", ev, bad);
    if (!rc) {
        bad = 0;
        ev = text_ref(s, &bad);
        ifd__oai_json_set(ev, "part", text_part(t, r->text.len, abuf_array(&r->logprobs), &bad),
                          &bad);
        rc = event(s, out, "response.content_part.done", ev, bad);
    }
    json_t *item = NULL;
    if (!rc) {
        bad = 0;
        json_t *content = json_array();
        ifd__oai_json_add(content, text_part(t, r->text.len, abuf_array(&r->logprobs), &bad), &bad);
        item = message_item(&s->meta, "completed", content, &bad);
        ev = json_object();
        ifd__oai_json_set(ev, "output_index", json_integer(r->msg_index), &bad);
        ifd__oai_json_set(ev, "item", json_incref(item), &bad);
        rc = bad ? IFD_ENOMEM : event(s, out, "response.output_item.done", ev, bad);
        if (bad)
            json_decref(ev);
    }
    if (!rc)
        rc = abuf_add_json(r->a, &r->items, item);
    json_decref(item);
    if (!rc)
        r->msg_open = false;
    return rc;
}

int ifd__resp_stream_delta(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_choice_t *c)
{
    ifd__resp_stream_t *r = s->resp;
    int rc = open_message(s, out);
    if (rc)
        return rc;
    int bad = 0;
    json_t *lp = c->has_logprobs ? ifd__oai_json_logprob_items(c->logprobs, c->n_logprobs, &bad)
                                 : json_array();
    /* keep the logprob items for the done events */
    for (size_t i = 0; !bad && i < json_array_size(lp); i++)
        if (abuf_add_json(r->a, &r->logprobs, json_array_get(lp, i)))
            bad++;
    json_t *ev = text_ref(s, &bad);
    ifd__oai_json_set(ev, "delta", ifd__oai_json_str(c->text, c->text_len), &bad);
    ifd__oai_json_set(ev, "logprobs", lp, &bad);
    rc = event(s, out, "response.output_text.delta", ev, bad);
    if (!rc && c->text_len)
        rc = abuf_add(r->a, &r->text, c->text, c->text_len);
    return rc;
}

int ifd__resp_stream_tool_calls(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_choice_t *c)
{
    ifd__resp_stream_t *r = s->resp;
    int rc = ifd__resp_stream_start(s, out);
    if (!rc)
        rc = close_message(s, out);
    for (size_t i = 0; !rc && i < c->n_tool_calls; i++) {
        const ifd_oai_tool_call_t *tc = &c->tool_calls[i];
        uint32_t at = r->n_items++;
        int bad = 0;
        json_t *ev = json_object();
        ifd__oai_json_set(ev, "output_index", json_integer(at), &bad);
        ifd__oai_json_set(ev, "item", call_item(tc, "in_progress", false, &bad), &bad);
        rc = event(s, out, "response.output_item.added", ev, bad);
        for (int part = 0; !rc && part < 2; part++) {
            bad = 0;
            ev = json_object();
            ifd__oai_json_set(ev, "item_id", json_sprintf("fc_%s", id_hex(tc->id)), &bad);
            ifd__oai_json_set(ev, "output_index", json_integer(at), &bad);
            ifd__oai_json_set(ev, part ? "arguments" : "delta",
                              ifd__oai_json_str(tc->arguments, strlen(tc->arguments)), &bad);
            if (part)
                ifd__oai_json_set(ev, "name", ifd__oai_json_str(tc->name, strlen(tc->name)), &bad);
            rc = event(s, out,
                       part ? "response.function_call_arguments.done"
                            : "response.function_call_arguments.delta",
                       ev, bad);
        }
        if (rc)
            break;
        bad = 0;
        json_t *item = call_item(tc, "completed", true, &bad);
        ev = json_object();
        ifd__oai_json_set(ev, "output_index", json_integer(at), &bad);
        ifd__oai_json_set(ev, "item", json_incref(item), &bad);
        rc = event(s, out, "response.output_item.done", ev, bad);
        if (!rc)
            rc = abuf_add_json(r->a, &r->items, item);
        json_decref(item);
    }
    return rc;
}

int ifd__resp_stream_finish(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_choice_t *c)
{
    ifd__resp_stream_t *r = s->resp;
    int rc = 0;
    if (c->text_len || c->n_logprobs)
        rc = ifd__resp_stream_delta(s, out, c);
    if (!rc && r->n_items == 0) /* an empty answer is still one message */
        rc = open_message(s, out);
    if (!rc)
        rc = close_message(s, out);
    if (!rc)
        r->status = status_of(c->finish_reason);
    return rc;
}

int ifd__resp_stream_end(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_usage_t *usage)
{
    ifd__resp_stream_t *r = s->resp;
    const char *status = r->status ? r->status : "completed";
    int bad = 0;
    json_t *ev = json_object();
    ifd__oai_json_set(ev, "response",
                      response_obj(&s->meta, status, abuf_array(&r->items), usage, &bad), &bad);
    return event(s, out, strcmp(status, "incomplete") ? "response.completed"
                                                      : "response.incomplete",
                 ev, bad);
}

int ifd_responses_stream_snapshot(const ifd_oai_stream_t *s, const ifd_oai_usage_t *usage,
                                  ifd_buf_t *out)
{
    const ifd__resp_stream_t *r = s->resp;
    if (!r)
        return IFD_EINVAL;
    int bad = 0;
    json_t *o = response_obj(&s->meta, r->status ? r->status : "completed", abuf_array(&r->items),
                             usage, &bad);
    return ifd__oai_json_emit(out, o, bad, false);
}

/* {code, message} of a failed Response (code server_error when e has none). */
static json_t *failure_json(const ifd_oai_error_t *e, int *bad)
{
    json_t *re = json_object();
    ifd__oai_json_set(re, "code", json_string(e->code[0] ? e->code : "server_error"), bad);
    ifd__oai_json_set(re, "message", ifd__oai_json_str(e->message, strlen(e->message)), bad);
    return re;
}

int ifd_responses_status_json(ifd_buf_t *out, const ifd_oai_meta_t *m, const char *status,
                              const ifd_oai_error_t *e)
{
    int bad = 0;
    json_t *o = response_obj(m, status, NULL, NULL, &bad);
    if (e)
        ifd__oai_json_set(o, "error", failure_json(e, &bad), &bad);
    return ifd__oai_json_emit(out, o, bad, false);
}

int ifd__resp_stream_fail(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_error_t *e)
{
    int bad = 0;
    json_t *err = ifd__oai_json_error(e, &bad);
    json_t *ev = json_object();
    ifd__oai_json_set(ev, "code", e->code[0] ? json_string(e->code) : json_string(e->type), &bad);
    ifd__oai_json_set(ev, "message", ifd__oai_json_str(e->message, strlen(e->message)), &bad);
    ifd__oai_json_set(ev, "param", e->param[0] ? json_string(e->param) : json_null(), &bad);
    ifd__oai_json_set(ev, "error", err, &bad); /* the openai SDK raises APIError on it */
    int rc = event(s, out, "error", ev, bad);
    if (rc)
        return rc;
    bad = 0;
    json_t *resp = response_obj(&s->meta, "failed", abuf_array(&s->resp->items), NULL, &bad);
    ifd__oai_json_set(resp, "error", failure_json(e, &bad), &bad);
    ev = json_object();
    ifd__oai_json_set(ev, "response", resp, &bad);
    rc = event(s, out, "response.failed", ev, bad);
    if (!rc)
        s->ended = true;
    return rc;
}
