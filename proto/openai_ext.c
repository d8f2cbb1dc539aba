/*
 * openai_ext.c — the request fields beyond plain sampling: structured
 * outputs (compiled to grammar text here, so an unsupported schema is a 400
 * before anything runs), tools and tool_choice, message tool calls, and a
 * table of OpenAI/vLLM parameters this server does not implement, each
 * accepted only at its "off" value and otherwise refused with 400 naming
 * it (never silently ignored).
 */
#include "openai_ext.h"

#include "oai_json.h"

#include "error.h"
#include "grammar/grammar.h"
#include "grammar/grammar_conv.h"
#include "grammar/schema_json.h"

#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- refused extras ---------------------------------------------------------------- */

typedef enum {
    OK_NULL,  /* only absent / null */
    OK_FALSE, /* false */
    OK_TRUE,  /* true (the default) */
    OK_ZERO,  /* 0 */
    OK_EMPTY, /* an empty array, object or string */
} ok_t;

enum { EP_C = 1, EP_P = 2, EP_BOTH = 3 };

static const struct {
    const char *name;
    int ep;
    ok_t ok;
    const char *why;
} EXTRAS[] = {
    {"use_beam_search", EP_BOTH, OK_FALSE, "beam search is not implemented"},
    {"bad_words", EP_BOTH, OK_EMPTY, "use logit_bias"},
    {"logits_processors", EP_BOTH, OK_EMPTY, "custom logits processors cannot be loaded"},
    {"skip_special_tokens", EP_BOTH, OK_TRUE, "special tokens are always skipped"},
    {"spaces_between_special_tokens", EP_BOTH, OK_TRUE, "special tokens are always skipped"},
    {"functions", EP_C, OK_EMPTY, "use 'tools' (the deprecated 'functions' is not supported)"},
    {"function_call", EP_C, OK_NULL, "use 'tool_choice'"},
    {"chat_template", EP_C, OK_NULL, "the server's template is used (--chat-template)"},
    {"audio", EP_C, OK_NULL, "audio output is not supported"},
    {"prediction", EP_C, OK_NULL, "predicted outputs are not supported"},
    {"web_search_options", EP_C, OK_NULL, "web search is not supported"},
    {"reasoning_effort", EP_C, OK_NULL, "reasoning effort is not supported"},
    {"store", EP_C, OK_FALSE, "completions are not stored"},
    {"guided_whitespace_pattern", EP_BOTH, OK_NULL, "the whitespace rule is fixed"},
    {"cache_salt", EP_BOTH, OK_NULL, "prefix-cache salts are not supported"},
    {"mm_processor_kwargs", EP_P, OK_EMPTY, "completions take no images"},
};

static bool extra_ok(const json_t *v, ok_t ok)
{
    switch (ok) {
    case OK_NULL:
        return false; /* get() already skipped null */
    case OK_FALSE:
        return json_is_false(v);
    case OK_TRUE:
        return json_is_true(v);
    case OK_ZERO:
        return json_is_integer(v) && json_integer_value(v) == 0;
    case OK_EMPTY:
        return (json_is_array(v) && json_array_size(v) == 0) ||
               (json_is_object(v) && json_object_size(v) == 0) ||
               (json_is_string(v) && json_string_length(v) == 0);
    }
    return false;
}

static int p_extras(ifd__oai_json_ctx_t *c, const json_t *o, ifd_oai_kind_t kind)
{
    int ep = kind == IFD_OAI_CHAT ? EP_C : EP_P;
    for (size_t i = 0; i < sizeof EXTRAS / sizeof EXTRAS[0]; i++) {
        if (!(EXTRAS[i].ep & ep))
            continue;
        const json_t *v = ifd__oai_json_get(o, EXTRAS[i].name);
        if (v && !extra_ok(v, EXTRAS[i].ok))
            return ifd__oai_json_fail(
                c, "unsupported_parameter", EXTRAS[i].name,
                "Unsupported parameter: '%s' is not supported by this server (%s).", EXTRAS[i].name,
                EXTRAS[i].why);
    }
    const json_t *mod = kind == IFD_OAI_CHAT ? ifd__oai_json_get(o, "modalities") : NULL;
    for (size_t i = 0; mod && i < (json_is_array(mod) ? json_array_size(mod) : 1); i++) {
        if (!ifd__oai_json_is(json_is_array(mod) ? json_array_get(mod, i) : mod, "text"))
            return ifd__oai_json_fail(
                c, "unsupported_parameter", "modalities",
                "Unsupported parameter: 'modalities' other than [\"text\"] is "
                "not supported by this server.");
    }
    return 0;
}

/* Template variables that would replace what the server sets itself. */
static const char *const k_reserved_vars[] = {"messages",  "tools",     "documents",
                                              "add_generation_prompt", "bos_token",
                                              "eos_token"};

/* Chat: vLLM's chat_template_kwargs, documents, continue_final_message, echo. */
static int p_chat_template(ifd__oai_json_ctx_t *c, const json_t *o, ifd_oai_request_t *r)
{
    const json_t *v = ifd__oai_json_get(o, "chat_template_kwargs");
    int rc;
    if (v && !json_is_object(v))
        return ifd__oai_json_bad_type(c, "chat_template_kwargs", "an object", v);
    for (size_t i = 0; v && i < sizeof k_reserved_vars / sizeof k_reserved_vars[0]; i++) {
        if (json_object_get(v, k_reserved_vars[i])) {
            char param[IFD__OAI_JSON_PARAM_MAX];
            snprintf(param, sizeof param, "chat_template_kwargs.%s", k_reserved_vars[i]);
            return ifd__oai_json_fail(c, "invalid_value", param,
                                      "Invalid 'chat_template_kwargs': '%s' is set by the server "
                                      "from the request.",
                                      k_reserved_vars[i]);
        }
    }
    if (v && json_object_size(v) && !(r->template_kwargs = ifd__oai_json_dump(c->a, v)))
        return ifd__oai_json_oom(c);
    if ((v = ifd__oai_json_get(o, "documents"))) {
        if (!json_is_array(v))
            return ifd__oai_json_bad_type(c, "documents", "an array of objects", v);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (!json_is_object(json_array_get(v, i))) {
                char param[IFD__OAI_JSON_PARAM_MAX];
                snprintf(param, sizeof param, "documents[%zu]", i);
                return ifd__oai_json_bad_type(c, param, "an object", json_array_get(v, i));
            }
        }
        if (json_array_size(v) && !(r->documents = ifd__oai_json_dump(c->a, v)))
            return ifd__oai_json_oom(c);
    }
    if ((v = ifd__oai_json_get(o, "echo")) && (rc = ifd__oai_json_bool(c, v, "echo", &r->echo)) < 0)
        return rc;
    /* vLLM's mm_processor_kwargs: the image processor's do_pan_and_scan
     * (other keys are the processor's and ignored here) */
    if ((v = ifd__oai_json_get(o, "mm_processor_kwargs"))) {
        if (!json_is_object(v))
            return ifd__oai_json_bad_type(c, "mm_processor_kwargs", "an object", v);
        const char *key;
        json_t *kv;
        json_object_foreach((json_t *)v, key, kv)
        {
            if (strcmp(key, "do_pan_and_scan") != 0) {
                char param[IFD__OAI_JSON_PARAM_MAX];
                snprintf(param, sizeof param, "mm_processor_kwargs.%.60s", key);
                return ifd__oai_json_fail(c, "unsupported_parameter", param,
                                          "Unsupported parameter: '%s' (of mm_processor_kwargs, "
                                          "only do_pan_and_scan is supported).",
                                          param);
            }
        }
        const json_t *ps = ifd__oai_json_get(v, "do_pan_and_scan");
        bool b;
        if (ps && (rc = ifd__oai_json_bool(c, ps, "mm_processor_kwargs.do_pan_and_scan", &b)) < 0)
            return rc;
        if (ps)
            r->do_pan_and_scan = b;
    }
    const ifd_oai_message_t *last = r->n_messages ? &r->messages[r->n_messages - 1] : NULL;
    if (r->continue_final_message) {
        if (r->add_generation_prompt)
            return ifd__oai_json_fail(c, "invalid_value", "continue_final_message",
                                      "Cannot set both 'continue_final_message' and "
                                      "'add_generation_prompt' to true.");
        if (!last || strcmp(last->role, "assistant") || last->tool_calls)
            return ifd__oai_json_fail(c, "invalid_value", "continue_final_message",
                                      "'continue_final_message' needs the last message to be an "
                                      "assistant message with content.");
    }
    return 0;
}

/* vLLM's min_tokens and stream_options.continuous_usage_stats. */
static int p_min_tokens_usage(ifd__oai_json_ctx_t *c, const json_t *o, ifd_oai_request_t *r)
{
    const json_t *v = ifd__oai_json_get(o, "min_tokens");
    int64_t iv;
    int rc;
    if (v) {
        if ((rc = ifd__oai_json_int(c, v, "min_tokens", 0, INT32_MAX, &iv)) < 0)
            return rc;
        if (r->max_tokens >= 0 && iv > r->max_tokens)
            return ifd__oai_json_fail(
                c, "invalid_value", "min_tokens",
                "Invalid value for 'min_tokens': %lld is more than max_tokens "
                "(%lld).",
                (long long)iv, (long long)r->max_tokens);
        r->min_tokens = (uint32_t)iv;
    }
    const json_t *so = ifd__oai_json_get(o, "stream_options");
    const json_t *cu = json_is_object(so) ? ifd__oai_json_get(so, "continuous_usage_stats") : NULL;
    if (cu && (rc = ifd__oai_json_bool(c, cu, "stream_options.continuous_usage_stats",
                                       &r->continuous_usage)) < 0)
        return rc;
    return 0;
}

/* ---- structured outputs ---------------------------------------------------------------- */

typedef ifd_oai_so_kind_t so_kind_t;
#define SO_JSON        IFD_OAI_SO_JSON
#define SO_JSON_OBJECT IFD_OAI_SO_JSON_OBJECT
#define SO_REGEX       IFD_OAI_SO_REGEX
#define SO_CHOICE      IFD_OAI_SO_CHOICE
#define SO_GRAMMAR     IFD_OAI_SO_GRAMMAR

/* Records a constraint's source in r (its conversion and compilation are
 * ifd_oai_build_grammar's, off the loop); checks only its shape here. param
 * names it in errors. */
static int set_grammar(ifd__oai_json_ctx_t *c, ifd_oai_request_t *r, so_kind_t k, const json_t *v,
                       const char *param)
{
    char *src = NULL;
    size_t len = 0;
    switch (k) {
    case SO_JSON:
        if (json_is_string(v)) { /* vLLM accepts the schema as a JSON string */
            json_error_t je;
            json_t *owned = ifd_schema_json_loadb(json_string_value(v), json_string_length(v),
                                       JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
            if (!owned)
                return ifd__oai_json_fail(c, "invalid_value", param,
                                          "Invalid '%s': not valid JSON (%s).", param, je.text);
            bool ok = json_is_object(owned) || json_is_boolean(owned);
            /* a NUL (\u0000) is read by the converter where it can be (pattern, enum,
             * const) and refused by it elsewhere (ifd_oai_build_grammar) */
            if (ok)
                src = ifd__oai_json_dump(c->a, owned);
            json_decref(owned);
            if (!ok)
                return ifd__oai_json_bad_type(c, param, "an object (a JSON Schema)", v);
        } else if (json_is_object(v) || json_is_boolean(v)) {
            src = ifd__oai_json_dump(c->a, v);
        } else {
            return ifd__oai_json_bad_type(c, param, "an object (a JSON Schema)", v);
        }
        break;
    case SO_JSON_OBJECT:
        src = ifd_arena_strndup(c->a, "", 0);
        break;
    case SO_REGEX:
    case SO_GRAMMAR:
        if (!json_is_string(v))
            return ifd__oai_json_bad_type(c, param, "a string", v);
        if (ifd__oai_json_has_nul(v)) /* the grammar text carries no NUL to the worker */
            return ifd__oai_json_nul(c, param);
        src = ifd_arena_strndup(c->a, json_string_value(v), json_string_length(v));
        len = json_string_length(v);
        break;
    case SO_CHOICE:
        if (!json_is_array(v) || json_array_size(v) == 0)
            return ifd__oai_json_bad_type(c, param, "a non-empty array of strings", v);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (!json_is_string(json_array_get(v, i)))
                return ifd__oai_json_bad_type(c, param, "an array of strings", v);
            if (ifd__oai_json_has_nul(json_array_get(v, i)))
                return ifd__oai_json_nul(c, param);
        }
        src = ifd__oai_json_dump(c->a, v);
        break;
    default:
        return ifd__oai_json_oom(c);
    }
    if (!src || !(r->so_param = ifd_arena_strndup(c->a, param, strlen(param))))
        return ifd__oai_json_oom(c);
    r->so_kind = k;
    r->so_source = src;
    r->so_source_len = len ? len : strlen(src);
    return 0;
}

static int p_response_format(ifd__oai_json_ctx_t *c, const json_t *v, ifd_oai_request_t *r)
{
    if (!json_is_object(v))
        return ifd__oai_json_bad_type(c, "response_format", "an object", v);
    const json_t *t = ifd__oai_json_get(v, "type");
    if (!t)
        return ifd__oai_json_missing(c, "response_format.type");
    if (!json_is_string(t))
        return ifd__oai_json_bad_type(c, "response_format.type", "a string", t);
    const char *ts = json_string_value(t);
    if (ifd__oai_json_is(t, "text"))
        return 0;
    if (ifd__oai_json_is(t, "json_object"))
        return set_grammar(c, r, SO_JSON_OBJECT, NULL, "response_format");
    if (ifd__oai_json_is(t, "json_schema")) {
        const json_t *js = ifd__oai_json_get(v, "json_schema");
        if (!js)
            return ifd__oai_json_missing(c, "response_format.json_schema");
        if (!json_is_object(js))
            return ifd__oai_json_bad_type(c, "response_format.json_schema", "an object", js);
        const json_t *st = ifd__oai_json_get(js, "strict");
        if (st && !json_is_boolean(st))
            return ifd__oai_json_bad_type(c, "response_format.json_schema.strict", "a boolean", st);
        const json_t *schema = ifd__oai_json_get(js, "schema");
        if (!schema) /* no schema: any JSON object */
            return set_grammar(c, r, SO_JSON_OBJECT, NULL, "response_format.json_schema");
        return set_grammar(c, r, SO_JSON, schema, "response_format.json_schema.schema");
    }
    return ifd__oai_json_fail(c, "invalid_value", "response_format.type",
                              "Invalid value: '%.40s'. Supported values are: 'text', 'json_object' "
                              "and 'json_schema'.",
                              ts);
}

static const struct {
    const char *key;
    so_kind_t kind;
} SO_KEYS[] = {
    {"json", SO_JSON}, {"regex", SO_REGEX}, {"choice", SO_CHOICE}, {"grammar", SO_GRAMMAR}};

/* vLLM's structured_outputs object. */
static int p_structured_outputs(ifd__oai_json_ctx_t *c, const json_t *v, ifd_oai_request_t *r)
{
    if (!json_is_object(v))
        return ifd__oai_json_bad_type(c, "structured_outputs", "an object", v);
    char param[64];
    const char *key;
    const json_t *val;
    int found = 0;
    so_kind_t kind = SO_JSON;
    const json_t *src = NULL;
    json_object_foreach((json_t *)v, key, val)
    {
        if (json_is_null(val))
            continue;
        size_t i = 0;
        for (; i < sizeof SO_KEYS / sizeof SO_KEYS[0]; i++)
            if (strcmp(key, SO_KEYS[i].key) == 0)
                break;
        snprintf(param, sizeof param, "structured_outputs.%.40s", key);
        if (i < sizeof SO_KEYS / sizeof SO_KEYS[0]) {
            kind = SO_KEYS[i].kind;
            src = val;
            found++;
        } else if (strcmp(key, "json_object") == 0) {
            if (!json_is_boolean(val))
                return ifd__oai_json_bad_type(c, param, "a boolean", val);
            if (json_is_true(val)) {
                kind = SO_JSON_OBJECT;
                src = val;
                found++;
            }
        } else if ((strcmp(key, "disable_fallback") == 0 ||
                    strcmp(key, "disable_any_whitespace") == 0 ||
                    strcmp(key, "disable_additional_properties") == 0) &&
                   json_is_false(val)) {
            continue;
        } else if (strcmp(key, "backend") == 0 && json_is_string(val)) {
            continue; /* which engine vLLM would use: there is one here */
        } else {
            return ifd__oai_json_fail(
                c, "unsupported_parameter", param,
                "Unsupported parameter: '%s' is not supported by this server; "
                "supported are json, regex, choice, grammar and json_object.",
                param);
        }
    }
    if (found > 1)
        return ifd__oai_json_fail(c, "invalid_value", "structured_outputs",
                                  "Invalid 'structured_outputs': give only one of json, regex, "
                                  "choice, grammar and json_object.");
    if (!found)
        return 0;
    for (size_t i = 0; i < sizeof SO_KEYS / sizeof SO_KEYS[0]; i++)
        if (SO_KEYS[i].kind == kind)
            snprintf(param, sizeof param, "structured_outputs.%s", SO_KEYS[i].key);
    if (kind == SO_JSON_OBJECT)
        snprintf(param, sizeof param, "structured_outputs.json_object");
    return set_grammar(c, r, kind, src, param);
}

static int p_structured(ifd__oai_json_ctx_t *c, const json_t *o, ifd_oai_request_t *r)
{
    static const struct {
        const char *key;
        so_kind_t kind;
    } guided[] = {{"guided_json", SO_JSON},
                  {"guided_regex", SO_REGEX},
                  {"guided_choice", SO_CHOICE},
                  {"guided_grammar", SO_GRAMMAR}};
    const char *first = NULL;
    int rc;
    const json_t *v;
    if ((v = ifd__oai_json_get(o, "response_format"))) {
        if ((rc = p_response_format(c, v, r)) < 0)
            return rc;
        if (r->so_kind)
            first = "response_format";
    }
    if ((v = ifd__oai_json_get(o, "structured_outputs"))) {
        so_kind_t before = r->so_kind;
        if ((rc = p_structured_outputs(c, v, r)) < 0)
            return rc;
        if (r->so_kind != before) {
            if (first)
                return ifd__oai_json_fail(
                    c, "invalid_value", "structured_outputs",
                    "Invalid 'structured_outputs': '%s' already constrains the "
                    "output; give only one.",
                    first);
            first = "structured_outputs";
        }
    }
    for (size_t i = 0; i < sizeof guided / sizeof guided[0]; i++) {
        if (!(v = ifd__oai_json_get(o, guided[i].key)))
            continue;
        if (first)
            return ifd__oai_json_fail(c, "invalid_value", guided[i].key,
                                      "Invalid '%s': '%s' already constrains the output; give only "
                                      "one.",
                                      guided[i].key, first);
        if ((rc = set_grammar(c, r, guided[i].kind, v, guided[i].key)) < 0)
            return rc;
        first = guided[i].key;
    }
    if ((v = ifd__oai_json_get(o, "guided_decoding_backend")) && !json_is_string(v))
        return ifd__oai_json_bad_type(c, "guided_decoding_backend", "a string", v);
    return 0;
}

/* ---- tools ------------------------------------------------------------------------------ */

static bool tool_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '.'))
            return false;
    }
    return true;
}

static int p_tools(ifd__oai_json_ctx_t *c, const json_t *o, ifd_oai_request_t *r)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    const json_t *tools = ifd__oai_json_get(o, "tools");
    const json_t *tc = ifd__oai_json_get(o, "tool_choice");
    const json_t *ptc = ifd__oai_json_get(o, "parallel_tool_calls");
    int rc;
    if (ptc &&
        (rc = ifd__oai_json_bool(c, ptc, "parallel_tool_calls", &r->parallel_tool_calls)) < 0)
        return rc;
    if (tools) {
        if (!json_is_array(tools))
            return ifd__oai_json_bad_type(c, "tools", "an array", tools);
        size_t n = json_array_size(tools);
        if (n > 128)
            return ifd__oai_json_fail(
                c, "array_above_max_length", "tools",
                "Invalid 'tools': array too long. Expected an array with "
                "maximum length 128, but got an array with length %zu instead.",
                n);
        r->tools = n ? ifd_arena_calloc(c->a, n, sizeof *r->tools) : NULL;
        if (n && !r->tools)
            return ifd__oai_json_oom(c);
        for (size_t i = 0; i < n; i++) {
            const json_t *t = json_array_get(tools, i);
            snprintf(param, sizeof param, "tools[%zu]", i);
            if (!json_is_object(t))
                return ifd__oai_json_bad_type(c, param, "an object", t);
            const json_t *ty = ifd__oai_json_get(t, "type");
            snprintf(param, sizeof param, "tools[%zu].type", i);
            if (!ty)
                return ifd__oai_json_missing(c, param);
            if (!ifd__oai_json_is(ty, "function"))
                return ifd__oai_json_fail(c, "invalid_value", param,
                                          "Invalid value for '%s': only 'function' tools are "
                                          "supported.",
                                          param);
            const json_t *f = ifd__oai_json_get(t, "function");
            snprintf(param, sizeof param, "tools[%zu].function", i);
            if (!f)
                return ifd__oai_json_missing(c, param);
            if (!json_is_object(f))
                return ifd__oai_json_bad_type(c, param, "an object", f);
            snprintf(param, sizeof param, "tools[%zu].function.name", i);
            const json_t *nm = ifd__oai_json_get(f, "name");
            if (!nm)
                return ifd__oai_json_missing(c, param);
            if ((rc = ifd__oai_json_string(c, nm, param, &r->tools[i].name, NULL)) < 0)
                return rc;
            if (!tool_name_ok(r->tools[i].name))
                return ifd__oai_json_fail(
                    c, "invalid_value", param,
                    "Invalid '%s': a function name is 1 to 64 of a-z, A-Z, 0-9, "
                    "'_', '-' and '.'.",
                    param);
            for (size_t k = 0; k < i; k++)
                if (strcmp(r->tools[k].name, r->tools[i].name) == 0)
                    return ifd__oai_json_fail(c, "invalid_value", param,
                                              "Invalid '%s': '%s' is defined twice.", param,
                                              r->tools[i].name);
            const json_t *d = ifd__oai_json_get(f, "description");
            snprintf(param, sizeof param, "tools[%zu].function.description", i);
            size_t dl; /* tools_json renders the description whole */
            if (d && (rc = ifd__oai_json_string(c, d, param, &r->tools[i].description, &dl)) < 0)
                return rc;
            const json_t *st = ifd__oai_json_get(f, "strict");
            snprintf(param, sizeof param, "tools[%zu].function.strict", i);
            if (st && !json_is_boolean(st) && !json_is_null(st))
                return ifd__oai_json_bad_type(c, param, "a boolean", st);
            r->tools[i].strict = json_is_true(st);
            const json_t *pa = ifd__oai_json_get(f, "parameters");
            snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
            if (pa) {
                /* the schema is converted by ifd_oai_build_grammar, off the loop: an
                 * unsupported keyword is a 400 then when a grammar would enforce it
                 * (a forced call, or strict) */
                if (!json_is_object(pa))
                    return ifd__oai_json_bad_type(c, param, "an object", pa);
                if (!(r->tools[i].parameters = ifd__oai_json_dump(c->a, pa)))
                    return ifd__oai_json_oom(c);
            }
        }
        r->n_tools = n;
        if (n && !(r->tools_json = ifd__oai_json_dump(c->a, tools)))
            return ifd__oai_json_oom(c);
    }
    r->tool_choice = r->n_tools ? IFD_OAI_TOOL_CHOICE_AUTO : IFD_OAI_TOOL_CHOICE_NONE;
    if (!tc)
        return 0;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (ifd__oai_json_is(tc, "none")) {
            r->tool_choice = IFD_OAI_TOOL_CHOICE_NONE;
            return 0;
        }
        if (!ifd__oai_json_is(tc, "auto") && !ifd__oai_json_is(tc, "required"))
            return ifd__oai_json_fail(
                c, "invalid_value", "tool_choice",
                "Invalid value: '%.40s'. Supported values are: 'none', 'auto' "
                "and 'required', or a function.",
                s);
        if (!r->n_tools)
            return ifd__oai_json_fail(c, "invalid_value", "tool_choice",
                                      "Invalid value for 'tool_choice': '%s' requires 'tools'.", s);
        r->tool_choice = s[0] == 'a' ? IFD_OAI_TOOL_CHOICE_AUTO : IFD_OAI_TOOL_CHOICE_REQUIRED;
        return 0;
    }
    if (!json_is_object(tc))
        return ifd__oai_json_bad_type(c, "tool_choice", "a string or an object", tc);
    const json_t *f = ifd__oai_json_get(tc, "function");
    if (f && !json_is_object(f))
        return ifd__oai_json_bad_type(c, "tool_choice.function", "an object", f);
    const json_t *nm = f ? ifd__oai_json_get(f, "name") : NULL;
    if (!nm)
        return ifd__oai_json_missing(c, "tool_choice.function.name");
    if (!json_is_string(nm))
        return ifd__oai_json_bad_type(c, "tool_choice.function.name", "a string", nm);
    for (size_t i = 0; i < r->n_tools; i++) {
        if (ifd__oai_json_is(nm, r->tools[i].name)) {
            r->tool_choice = IFD_OAI_TOOL_CHOICE_NAMED;
            r->tool_index = (uint32_t)i;
            return 0;
        }
    }
    return ifd__oai_json_fail(c, "invalid_value", "tool_choice.function.name",
                              "Invalid value for 'tool_choice': no function named '%.64s' in "
                              "'tools'.",
                              json_string_value(nm));
}

/* ---- building the grammar (off the loop) ---------------------------------------------- */

/* A conversion or compilation error as the 400 parsing used to give. */
static int build_fail(ifd__oai_json_ctx_t *c, int rc, const char *param, const char *fmt,
                      const char *msg)
{
    if (rc == IFD_ENOMEM)
        return ifd__oai_json_oom(c);
    if (rc == IFD_ECANCELED) {
        ifd__oai_json_fail(c, NULL, param, "Canceled.");
        return IFD_ECANCELED;
    }
    return ifd__oai_json_fail(c, rc == IFD_ENOTSUP ? "unsupported_value" : "invalid_value", param,
                              fmt, param, msg);
}

bool ifd_oai_tool_enforced(const ifd_oai_request_t *r, size_t i)
{
    bool forced = r->tool_choice == IFD_OAI_TOOL_CHOICE_REQUIRED ||
                  (r->tool_choice == IFD_OAI_TOOL_CHOICE_NAMED && r->tool_index == i);
    /* strict binds only where the model may call the tool freely (auto): with "none"
     * nothing is called, with a named choice only that one */
    bool strict = r->tools[i < r->n_tools ? i : 0].strict &&
                  r->tool_choice == IFD_OAI_TOOL_CHOICE_AUTO;
    return i < r->n_tools && r->tools[i].parameters && (forced || strict);
}

/* The parameters of every tool a grammar may enforce must convert (an
 * unsupported keyword is a 400): all with tool_choice required, the named
 * one, and the strict ones — loosely, as response_format: their calls'
 * arguments are checked after generation (ifd_oai_tool_enforced). A tool
 * that is only shown to the model (auto, not strict) is never refused for
 * its schema: vLLM accepts those too. */
static int check_tool_schemas(ifd__oai_json_ctx_t *c, const ifd_oai_request_t *r,
                              const ifd_grammar_budget_t *b)
{
    for (size_t i = 0; i < r->n_tools; i++) {
        if (!ifd_oai_tool_enforced(r, i))
            continue;
        char param[IFD__OAI_JSON_PARAM_MAX], err[300] = "";
        snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
        json_error_t je;
        json_t *pa = json_loads(r->tools[i].parameters, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!pa)
            return ifd__oai_json_oom(c);
        ifd_buf_t g = IFD_BUF_INIT;
        bool approx;
        int rc = ifd_gconv_json_schema_loose(pa, &g, b, &approx, err, sizeof err);
        ifd_buf_free(&g);
        json_decref(pa);
        if (rc)
            return build_fail(c, rc, param, "Invalid '%s': %s.", err);
    }
    return 0;
}

/* The grammar text that forces tool_choice required / named, converted
 * loosely (the calls' arguments are checked after generation). */
static int tools_grammar(const ifd_oai_request_t *r, const ifd_grammar_budget_t *b, ifd_buf_t *g,
                         char *err, size_t errlen)
{
    size_t n = r->tool_choice == IFD_OAI_TOOL_CHOICE_NAMED ? 1 : r->n_tools;
    ifd_gconv_tool_t *t = calloc(n, sizeof *t);
    json_t **params = calloc(n, sizeof *params);
    int rc = !t || !params ? IFD_ENOMEM : 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const ifd_oai_tool_t *tool =
            &r->tools[r->tool_choice == IFD_OAI_TOOL_CHOICE_NAMED ? r->tool_index : i];
        t[i].name = tool->name;
        if (tool->parameters) {
            json_error_t je;
            params[i] = json_loads(tool->parameters, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        }
        t[i].parameters = params[i];
    }
    bool approx;
    if (!rc && r->tool_choice == IFD_OAI_TOOL_CHOICE_NAMED)
        rc = t[0].parameters
                 ? ifd_gconv_json_schema_loose(t[0].parameters, g, b, &approx, err, errlen)
                 : ifd_gconv_json_object(g);
    else if (!rc)
        rc = ifd_gconv_tool_calls(t, n, 1, r->parallel_tool_calls ? 0 : 1, g, b, &approx, err,
                                  errlen);
    for (size_t i = 0; params && i < n; i++)
        json_decref(params[i]);
    free(params);
    free(t);
    return rc;
}

/* The constraint's grammar text from its source, into g. A JSON Schema is
 * converted loosely (what no grammar enforces over-approximated) and
 * r->so_check says whether its output must be checked at the end. */
static int so_convert(ifd_oai_request_t *r, const ifd_grammar_budget_t *b, ifd_buf_t *g,
                      char *err, size_t errlen)
{
    json_error_t je;
    json_t *v = NULL;
    int rc = 0;
    switch (r->so_kind) {
    case IFD_OAI_SO_JSON:
    case IFD_OAI_SO_CHOICE:
        if (!(v = json_loadb(r->so_source, r->so_source_len, JSON_DECODE_ANY | JSON_ALLOW_NUL,
                          &je)))
            return IFD_ENOMEM; /* the parser wrote it */
        if (r->so_kind == IFD_OAI_SO_JSON) {
            rc = ifd_gconv_json_schema_loose(v, g, b, &r->so_check, err, errlen);
        } else {
            size_t n = json_array_size(v);
            const char **ch = calloc(n, sizeof *ch);
            for (size_t i = 0; ch && i < n; i++)
                ch[i] = json_string_value(json_array_get(v, i));
            rc = ch ? ifd_gconv_choice(ch, n, g, b, err, errlen) : IFD_ENOMEM;
            free(ch);
        }
        json_decref(v);
        return rc;
    case IFD_OAI_SO_JSON_OBJECT:
        return ifd_gconv_json_object(g);
    case IFD_OAI_SO_REGEX:
        return ifd_gconv_regex(r->so_source, r->so_source_len, g, b, err, errlen);
    case IFD_OAI_SO_GRAMMAR:
        return ifd_buf_append(g, r->so_source, r->so_source_len) ? IFD_ENOMEM : 0;
    case IFD_OAI_SO_TOOLS:
        return tools_grammar(r, b, g, err, errlen);
    default:
        return 0;
    }
}

int ifd_oai_build_grammar(ifd_arena_t *a, ifd_oai_request_t *r, const ifd_grammar_budget_t *budget,
                          ifd_grammar_t **compiled, ifd_oai_error_t *err)
{
    ifd__oai_json_ctx_t c = {.a = a, .err = err};
    if (compiled)
        *compiled = NULL;
    int rc = check_tool_schemas(&c, r, budget);
    if (rc || !r->so_kind)
        return rc;
    const char *param = r->so_param ? r->so_param : "response_format";
    ifd_buf_t g = IFD_BUF_INIT;
    char msg[300] = "";
    rc = so_convert(r, budget, &g, msg, sizeof msg);
    if (rc) {
        ifd_buf_free(&g);
        if (r->so_kind == IFD_OAI_SO_TOOLS && rc != IFD_ENOMEM && rc != IFD_ECANCELED)
            return ifd__oai_json_fail(&c, "invalid_value", "tools", "Invalid 'tools': %s.", msg);
        return build_fail(&c, rc, param, "Invalid '%s': %s.", msg);
    }
    ifd_grammar_t *cg = NULL;
    rc = ifd_grammar_compile_budget(g.data ? g.data : "", g.len, budget, &cg, msg, sizeof msg);
    if (rc) {
        ifd_buf_free(&g);
        return build_fail(&c, rc, param, "Invalid grammar in '%s': %s.", msg);
    }
    r->grammar = ifd_arena_strndup(a, g.data ? g.data : "", g.len);
    r->grammar_len = g.len;
    ifd_buf_free(&g);
    if (!r->grammar) {
        ifd_grammar_destroy(cg);
        return ifd__oai_json_oom(&c);
    }
    if (compiled)
        *compiled = cg;
    else
        ifd_grammar_destroy(cg);
    return 0;
}

int ifd__oai_ext_message_tools(ifd__oai_json_ctx_t *c, const json_t *m, size_t i,
                               ifd_oai_message_t *dst)
{
    char param[IFD__OAI_JSON_PARAM_MAX];
    int rc;
    const json_t *tc = ifd__oai_json_get(m, "tool_calls");
    if (tc) {
        snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
        if (strcmp(dst->role, "assistant") != 0)
            return ifd__oai_json_fail(c, "invalid_value", param,
                                      "Invalid '%s': only assistant messages carry tool calls.",
                                      param);
        if (!json_is_array(tc))
            return ifd__oai_json_bad_type(c, param, "an array", tc);
        for (size_t k = 0; k < json_array_size(tc); k++) {
            const json_t *call = json_array_get(tc, k);
            snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", i, k);
            if (!json_is_object(call))
                return ifd__oai_json_bad_type(c, param, "an object", call);
            const json_t *f = ifd__oai_json_get(call, "function");
            snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu].function", i, k);
            if (!f)
                return ifd__oai_json_missing(c, param);
            if (!json_is_object(f))
                return ifd__oai_json_bad_type(c, param, "an object", f);
            snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu].function.name", i, k);
            const json_t *nm = ifd__oai_json_get(f, "name");
            if (!nm)
                return ifd__oai_json_missing(c, param);
            if (!json_is_string(nm))
                return ifd__oai_json_bad_type(c, param, "a string", nm);
            const json_t *args = ifd__oai_json_get(f, "arguments");
            snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu].function.arguments", i, k);
            if (args && !json_is_string(args) && !json_is_object(args))
                return ifd__oai_json_bad_type(c, param, "a string", args);
        }
        if (json_array_size(tc) && !(dst->tool_calls = ifd__oai_json_dump(c->a, tc)))
            return ifd__oai_json_oom(c);
    }
    const json_t *id = ifd__oai_json_get(m, "tool_call_id");
    if (id) {
        snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
        size_t unused; /* messages_json renders the id whole */
        if ((rc = ifd__oai_json_string(c, id, param, &dst->tool_call_id, &unused)) < 0)
            return rc;
    }
    return 0;
}

/* vLLM's prompt_logprobs: an int, -1 the whole vocabulary (the router caps
 * it by its max_logprobs, as vLLM does); nonzero with stream is refused. */
static int p_prompt_logprobs(ifd__oai_json_ctx_t *c, const json_t *o, ifd_oai_request_t *r)
{
    const json_t *v = ifd__oai_json_get(o, "prompt_logprobs");
    int64_t iv;
    int rc;
    if (!v)
        return 0;
    if ((rc = ifd__oai_json_logprobs(c, v, "prompt_logprobs", &iv)) < 0)
        return rc;
    if (r->stream && iv != 0)
        return ifd__oai_json_fail(c, "invalid_value", "prompt_logprobs",
                                  "'prompt_logprobs' are not available when 'stream' is true.");
    r->prompt_logprobs = !r->stream; /* a stream carries none (vLLM) */
    r->prompt_top_logprobs = iv < 0 ? IFD_OAI_LOGPROBS_VOCAB : (uint32_t)iv;
    return 0;
}

/* vLLM's token-level extras: return_token_ids, return_tokens_as_token_ids,
 * allowed_token_ids (a non-empty list, as vLLM wants it), logprob_token_ids
 * (1..20 ids, with logprobs; not for completions' echo with max_tokens 0,
 * as vLLM). */
static int p_token_extras(ifd__oai_json_ctx_t *c, const json_t *o, ifd_oai_request_t *r)
{
    const json_t *v;
    int rc;
    if ((v = ifd__oai_json_get(o, "return_token_ids")) &&
        (rc = ifd__oai_json_bool(c, v, "return_token_ids", &r->return_token_ids)) < 0)
        return rc;
    if ((v = ifd__oai_json_get(o, "return_tokens_as_token_ids")) &&
        (rc = ifd__oai_json_bool(c, v, "return_tokens_as_token_ids", &r->tokens_as_ids)) < 0)
        return rc;
    if ((v = ifd__oai_json_get(o, "allowed_token_ids")) &&
        (rc = ifd__oai_json_token_array(c, v, "allowed_token_ids", IFD_OAI_MAX_ALLOWED_IDS, false,
                                        &r->allowed_token_ids, &r->n_allowed_token_ids)) < 0)
        return rc;
    if (!(v = ifd__oai_json_get(o, "logprob_token_ids")))
        return 0;
    if ((rc = ifd__oai_json_token_array(c, v, "logprob_token_ids", IFD_OAI_MAX_LOGPROB_TOKEN_IDS,
                                        false, &r->logprob_token_ids, &r->n_logprob_token_ids)) < 0)
        return rc;
    if (!r->logprobs)
        return ifd__oai_json_fail(c, "invalid_value", "logprob_token_ids",
                                  "When using 'logprob_token_ids', 'logprobs' must be set%s.",
                                  r->kind == IFD_OAI_COMPLETION ? "" : " to true");
    if (r->kind == IFD_OAI_COMPLETION && r->echo && r->max_tokens == 0)
        return ifd__oai_json_fail(c, "invalid_value", "logprob_token_ids",
                                  "'logprob_token_ids' is not supported when 'echo' is true and "
                                  "'max_tokens' is 0: no output tokens are generated.");
    return 0;
}

/* "speculative" (openai.h, ifd_oai_request_t.spec). */
static const struct {
    const char *key;
    size_t off;
} SPEC_INTS[] = {
    {"num_speculative_tokens", offsetof(ifd_wire_spec_t, num_tokens)},
    {"prompt_lookup_min", offsetof(ifd_wire_spec_t, ngram_min)},
    {"prompt_lookup_max", offsetof(ifd_wire_spec_t, ngram_max)},
};

static int p_speculative(ifd__oai_json_ctx_t *c, const json_t *o, ifd_oai_request_t *r)
{
    const json_t *v = ifd__oai_json_get(o, "speculative");
    if (!v || json_is_null(v))
        return 0;
    if (json_is_boolean(v)) {
        r->spec.method = json_is_true(v) ? 2 : 1;
        return 0;
    }
    if (!json_is_object(v))
        return ifd__oai_json_bad_type(c, "speculative", "a boolean or an object", v);
    r->spec.method = 2;
    char param[64];
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)v, key, val)
    {
        snprintf(param, sizeof param, "speculative.%.40s", key);
        size_t i = 0;
        while (i < sizeof SPEC_INTS / sizeof *SPEC_INTS && strcmp(key, SPEC_INTS[i].key) != 0)
            i++;
        int64_t iv;
        int rc;
        if (i < sizeof SPEC_INTS / sizeof *SPEC_INTS) {
            if ((rc = ifd__oai_json_int(c, val, param, 1, IFD_WIRE_MAX_SPEC_TOKENS, &iv)) < 0)
                return rc;
            *(uint32_t *)((char *)&r->spec + SPEC_INTS[i].off) = (uint32_t)iv;
        } else if (strcmp(key, "method") == 0) {
            const char *m = json_is_string(val) ? json_string_value(val) : NULL;
            /* vLLM's SpeculativeMethod names ("draft_model"), and "draft" as --spec */
            static const char *const names[] = {"off", "ngram", "draft_model", "draft"};
            uint32_t k = 0;
            while (m && k < 4 && strcmp(m, names[k]) != 0)
                k++;
            if (!m || k == 4)
                return ifd__oai_json_fail(c, "invalid_value", param,
                                          "Invalid value for 'speculative.method': expected "
                                          "\"ngram\", \"draft_model\" or \"off\".");
            r->spec.method = k < 3 ? k + 1 : 3;
        } else {
            return ifd__oai_json_fail(c, "invalid_value", param,
                                      "Unknown field '%s' in 'speculative' (method, "
                                      "num_speculative_tokens, prompt_lookup_min, "
                                      "prompt_lookup_max).",
                                      param);
        }
    }
    if (r->spec.ngram_min && r->spec.ngram_max && r->spec.ngram_min > r->spec.ngram_max)
        return ifd__oai_json_fail(c, "invalid_value", "speculative.prompt_lookup_min",
                                  "Invalid value for 'speculative.prompt_lookup_min': %u is more "
                                  "than prompt_lookup_max (%u).",
                                  r->spec.ngram_min, r->spec.ngram_max);
    return 0;
}

int ifd__oai_ext_parse(ifd__oai_json_ctx_t *c, const json_t *o, ifd_oai_request_t *r)
{
    int rc;
    const json_t *v;
    int64_t iv;
    if ((rc = p_extras(c, o, r->kind)) < 0)
        return rc;
    if ((rc = p_min_tokens_usage(c, o, r)) < 0)
        return rc;
    if ((v = ifd__oai_json_get(o, "priority"))) {
        if ((rc = ifd__oai_json_int(c, v, "priority", INT32_MIN, INT32_MAX, &iv)) < 0)
            return rc;
        r->priority = (int32_t)iv;
    }
    if ((v = ifd__oai_json_get(o, "include_stop_str_in_output")) &&
        (rc = ifd__oai_json_bool(c, v, "include_stop_str_in_output", &r->include_stop_str)) < 0)
        return rc;
    if ((v = ifd__oai_json_get(o, "truncate_prompt_tokens"))) {
        if ((rc = ifd__oai_json_int(c, v, "truncate_prompt_tokens", -1, INT32_MAX, &iv)) < 0)
            return rc;
        if (iv == 0)
            return ifd__oai_json_fail(c, "integer_below_min_value", "truncate_prompt_tokens",
                                      "Invalid 'truncate_prompt_tokens': expected -1 or a value >= "
                                      "1, but got 0 instead.");
        r->truncate_prompt_tokens = iv;
    }
    if ((rc = p_prompt_logprobs(c, o, r)) < 0)
        return rc;
    if ((rc = p_token_extras(c, o, r)) < 0)
        return rc;
    if ((rc = p_speculative(c, o, r)) < 0)
        return rc;
    if ((rc = p_structured(c, o, r)) < 0)
        return rc;
    if (r->kind != IFD_OAI_CHAT)
        return 0;
    if ((rc = p_chat_template(c, o, r)) < 0)
        return rc;
    if ((rc = p_tools(c, o, r)) < 0)
        return rc;
    if (r->tool_choice == IFD_OAI_TOOL_CHOICE_REQUIRED ||
        r->tool_choice == IFD_OAI_TOOL_CHOICE_NAMED) {
        if (r->so_kind)
            return ifd__oai_json_fail(
                c, "invalid_value", "tool_choice",
                "Invalid 'tool_choice': a forced tool call cannot be combined "
                "with response_format or structured outputs.");
        r->so_kind = IFD_OAI_SO_TOOLS;
        r->so_param = "tools";
    }
    return 0;
}
