/*
 * jinja_render.c — renders one Jinja template file over a list of contexts
 * with common/chat/jinja (the C side of test_chat_template_conformance.py).
 *
 *   jinja_render TEMPLATE CASES.json
 *   jinja_render --model MODEL CASES.json
 *
 * CASES.json is a JSON array of context objects. Prints one JSON array, one
 * entry per case: {"ok": true, "out": "..."} or {"ok": false, "err": "..."};
 * a template that does not parse gives {"parse_error": "..."} instead.
 * With --model, each case goes through the whole chat_template path of that
 * model (GGUF or Hugging Face directory): its tokenizer, the template choice
 * (own Jinja template or built-in fallback), ifd_chat_render_request with the
 * case's messages, tools and add_generation_prompt and its other keys as
 * variables — except bos_token/eos_token/unk_token/pad_token/documents,
 * which inferd supplies itself — and placeholder restoration; the entry also
 * says "rc" (the error name) and "source" ("jinja" or the built-in family).
 * strftime_now uses the fixed time of $INFERD_JINJA_NOW (Unix seconds) when set.
 * Exit 0, or 2 on a usage or I/O error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_template.h"
#include "chat/jinja/jinja.h"
#include "error.h"
#include "tokenizer/tokenizer.h"

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

static int run_model(const char *model, json_t *cases)
{
    char err[1024];
    ifd_tokenizer_t *tok;
    if (ifd_tokenizer_create_path(&tok, model, err, sizeof err)) {
        fprintf(stderr, "jinja_render: %s: %s\n", model, err);
        return 2;
    }
    ifd_chat_template_t *tpl;
    if (ifd_chat_template_create(&tpl, tok, NULL, err, sizeof err)) {
        fprintf(stderr, "jinja_render: %s: %s\n", model, err);
        ifd_tokenizer_destroy(tok);
        return 2;
    }
    const char *source = ifd_chat_template_source(tpl)
                             ? "jinja"
                             : ifd_chat_family_name(ifd_chat_template_family(tpl));
    json_t *res = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c)
    {
        json_t *vars = json_deep_copy(c);
        static const char *const drop[] = {"messages", "tools", "add_generation_prompt",
                                           "bos_token", "eos_token", "unk_token",
                                           "pad_token", "documents", NULL};
        for (int k = 0; drop[k]; k++)
            json_object_del(vars, drop[k]);
        /* the case's date_string reaches the template, as in transformers */
        ifd_chat_request_t req = {
            .messages = json_object_get(c, "messages"),
            .tools = json_object_get(c, "tools"),
            .vars = vars,
            .add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
            .vars_may_override = true};
        ifd_chat_prompt_t pr;
        int rc = ifd_chat_render_request(tpl, &req, &pr, err, sizeof err);
        if (rc)
            json_array_append_new(res, json_pack("{s:b,s:s,s:s,s:s}", "ok", 0, "err", err, "rc",
                                                 ifd_err_name(rc), "source", source));
        else
            json_array_append_new(res, json_pack("{s:b,s:s%,s:s}", "ok", 1, "out", pr.text,
                                                 pr.len, "source", source));
        ifd_chat_prompt_free(&pr);
        json_decref(vars);
    }
    char *dump = json_dumps(res, JSON_COMPACT | JSON_ENSURE_ASCII);
    puts(dump ? dump : "null");
    free(dump);
    json_decref(res);
    ifd_chat_template_destroy(tpl);
    ifd_tokenizer_destroy(tok);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--model") == 0) {
        json_error_t je;
        json_t *cases = json_load_file(argv[3], 0, &je);
        if (!json_is_array(cases)) {
            fprintf(stderr, "jinja_render: %s: %s\n", argv[3], je.text);
            return 2;
        }
        int rc = run_model(argv[2], cases);
        json_decref(cases);
        return rc;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: jinja_render TEMPLATE CASES.json\n"
                        "       jinja_render --model MODEL CASES.json\n");
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
