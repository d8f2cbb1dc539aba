/*
 * chat_template.c — chat_template.h: choosing the template, rendering the
 * model's own Jinja template through common/chat/jinja (with special-token
 * placeholders, see the header), and the built-in renderers for the
 * families, each a transcription of its official Jinja template's
 * behaviour (golden-tested against Jinja renderings of those templates):
 *
 *   chatml   SmolLM2 / Qwen: <|im_start|>{role}\n{content}<|im_end|>\n; a default
 *            system prompt found in the template is emitted before the first
 *            message when that is not a system message. Content not trimmed.
 *   llama3   Llama 3.1+: BOS, system header with "Cutting Knowledge Date" and
 *            "Today Date" (+ trimmed system text), trimmed turns; Llama 3.0
 *            (no "Cutting Knowledge" in the template): BOS + trimmed turns.
 *   gemma    BOS; a leading system message becomes "{system}\n\n" in front of
 *            the first user turn; roles alternate; assistant → "model".
 *   llama2   <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {reply} </s>
 *   mistral  <s>[INST] {user} [/INST]{reply}</s> (v0.2); a leading system
 *            message is put in front of the first user message + "\n\n".
 *   phi3     Phi-3.5: <|{role}|>\n{content}<|end|>\n …, then <|assistant|>\n
 *            (or EOS without a generation prompt).
 *
 * Invariant: every byte of a rendered prompt that came from a message role or
 * content lies inside one of the prompt's plain spans; template text lies
 * outside. Trimming adjusts spans with the text.
 */
#include "chat_template.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "chat/jinja/jinja.h"
#include "error.h"
#include "log.h"

static const char *const ifd__family_names[IFD_CHAT_FAMILY_COUNT] = {
    "chatml", "llama3", "gemma", "llama2", "mistral", "phi3",
};

/* Stop-token texts per family (looked up in the vocabulary). */
static const char *const ifd__family_stops[IFD_CHAT_FAMILY_COUNT][4] = {
    {"<|im_end|>", "<|endoftext|>", NULL},
    {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", NULL},
    {"<end_of_turn>", "<eos>", NULL},
    {"</s>", NULL},
    {"</s>", NULL},
    {"<|end|>", "<|endoftext|>", NULL},
};

/* A control token's text, protected in request strings. */
typedef struct {
    const char *s;
    size_t n;
} ifd__special_t;

struct ifd_chat_template {
    ifd_chat_family_t family;
    ifd_jinja_t *jinja;     /* the model's/user's template, or NULL: a built-in family renders */
    char *source;           /* its text */
    bool has_date;          /* params->date given: passed as date_string */
    ifd__special_t *specials; /* CONTROL/UNKNOWN texts, longest first */
    size_t n_specials;
    uint8_t special_first[256]; /* 1 for bytes that start a special text */
    bool llama31;         /* llama3: the 3.1+ form with the system preamble */
    char *default_system; /* chatml: the template's default system prompt, or NULL */
    char *bos_text;
    char *eos_text;
    char date[64];
    ifd_token_t *stops;
    size_t n_stops;
};

const char *ifd_chat_family_name(ifd_chat_family_t f)
{
    if (f == IFD_CHAT_JINJA)
        return "jinja";
    return (unsigned)f < IFD_CHAT_FAMILY_COUNT ? ifd__family_names[f] : "?";
}

int ifd_chat_family_from_name(const char *name, ifd_chat_family_t *out)
{
    for (int i = 0; i < IFD_CHAT_FAMILY_COUNT; i++) {
        if (strcmp(name, ifd__family_names[i]) == 0) {
            *out = (ifd_chat_family_t)i;
            return 0;
        }
    }
    return IFD_ENOTFOUND;
}

const char *ifd_chat_family_names(void)
{
    return "chatml, llama3, gemma, llama2, mistral, phi3";
}

int ifd_chat_detect(const char *j, ifd_chat_family_t *out)
{
    if (!j)
        return IFD_ENOTFOUND;
    if (strstr(j, "<|im_start|>"))
        *out = IFD_CHAT_CHATML;
    else if (strstr(j, "<|start_header_id|>"))
        *out = IFD_CHAT_LLAMA3;
    else if (strstr(j, "<start_of_turn>"))
        *out = IFD_CHAT_GEMMA;
    else if (strstr(j, "<|end|>") && (strstr(j, "<|user|>") || strstr(j, "<|assistant|>")))
        *out = IFD_CHAT_PHI3;
    else if (strstr(j, "[INST]") && strstr(j, "<<SYS>>"))
        *out = IFD_CHAT_LLAMA2;
    else if (strstr(j, "[INST]"))
        *out = IFD_CHAT_MISTRAL;
    else
        return IFD_ENOTFOUND;
    return 0;
}

/* No template: guess from the vocabulary's control tokens. */
static int ifd__detect_vocab(const ifd_tokenizer_t *tok, ifd_chat_family_t *out)
{
#define IFD__HAS(s) (ifd_tokenizer_find(tok, s, strlen(s)) >= 0)
    if (IFD__HAS("<|im_start|>") && IFD__HAS("<|im_end|>"))
        *out = IFD_CHAT_CHATML;
    else if (IFD__HAS("<|start_header_id|>") && IFD__HAS("<|eot_id|>"))
        *out = IFD_CHAT_LLAMA3;
    else if (IFD__HAS("<start_of_turn>") && IFD__HAS("<end_of_turn>"))
        *out = IFD_CHAT_GEMMA;
    else if (IFD__HAS("<|user|>") && IFD__HAS("<|end|>"))
        *out = IFD_CHAT_PHI3;
    else if (IFD__HAS("[INST]"))
        *out = IFD_CHAT_MISTRAL;
    else
        return IFD_ENOTFOUND;
    return 0;
#undef IFD__HAS
}

/* The literal default system prompt of a ChatML template: the text between
 * "<|im_start|>system" + newline (or the escape \n) and "<|im_end|>", when it
 * is plain text (no quotes, '+' or braces, i.e. not an expression). */
static char *ifd__chatml_default_system(const char *j)
{
    static const char head[] = "<|im_start|>system";
    for (const char *p = j ? strstr(j, head) : NULL; p; p = strstr(p + 1, head)) {
        const char *s = p + sizeof head - 1;
        if (*s == '\n')
            s++;
        else if (s[0] == '\\' && s[1] == 'n')
            s += 2;
        else
            continue;
        const char *e = strstr(s, "<|im_end|>");
        if (!e || e == s || strcspn(s, "'\"+{}") < (size_t)(e - s))
            continue;
        char *out = malloc((size_t)(e - s) + 1);
        if (!out)
            return NULL;
        size_t o = 0;
        for (const char *q = s; q < e; q++) {
            if (q[0] == '\\' && q + 1 < e) {
                q++;
                out[o++] = *q == 'n' ? '\n' : *q == 't' ? '\t' : *q;
            } else {
                out[o++] = *q;
            }
        }
        out[o] = '\0';
        return out;
    }
    return NULL;
}

ifd_chat_params_t ifd_chat_default_params(void)
{
    ifd_chat_params_t p = {NULL, NULL, NULL};
    return p;
}

static char *ifd__token_text_dup(const ifd_tokenizer_t *tok, ifd_token_t id, const char *dflt)
{
    size_t n = 0;
    const char *s = tok && id >= 0 ? ifd_tokenizer_token_text(tok, id, &n) : NULL;
    if (!s) {
        s = dflt;
        n = strlen(dflt);
    }
    char *r = malloc(n + 1);
    if (r) {
        memcpy(r, s, n);
        r[n] = '\0';
    }
    return r;
}

static int ifd__cmp_id(const void *a, const void *b)
{
    ifd_token_t x = *(const ifd_token_t *)a, y = *(const ifd_token_t *)b;
    return (x > y) - (x < y);
}

/* Reads a template file (at most 4 MiB). 0, or -errno / IFD_ETOOBIG / IFD_ENOMEM. */
static int ifd__read_file(const char *path, char **out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    size_t cap = 1 << 14, n = 0, k;
    char *b = malloc(cap + 1);
    int rc = b ? 0 : IFD_ENOMEM;
    while (!rc && (k = fread(b + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n < cap)
            continue;
        if (cap >= (4u << 20)) {
            rc = IFD_ETOOBIG;
            break;
        }
        char *nb = realloc(b, cap * 2 + 1);
        if (!nb) {
            rc = IFD_ENOMEM;
            break;
        }
        b = nb;
        cap *= 2;
    }
    if (!rc && ferror(f))
        rc = -EIO;
    fclose(f);
    if (rc) {
        free(b);
        return rc;
    }
    b[n] = '\0';
    *out = b;
    return 0;
}

static int ifd__cmp_special(const void *a, const void *b)
{
    const ifd__special_t *x = a, *y = b;
    return (x->n < y->n) - (x->n > y->n); /* longest first */
}

/* The vocabulary's CONTROL/UNKNOWN texts: what special parsing matches. */
static int ifd__collect_specials(ifd_chat_template_t *t, const ifd_tokenizer_t *tok)
{
    int32_t nv = ifd_tokenizer_n_vocab(tok);
    size_t cap = 0;
    for (int32_t id = 0; id < nv; id++) {
        ifd_toktype_t ty = ifd_tokenizer_token_type(tok, id);
        if (ty != IFD_TOKTYPE_CONTROL && ty != IFD_TOKTYPE_UNKNOWN)
            continue;
        size_t n;
        const char *s = ifd_tokenizer_token_text(tok, id, &n);
        if (!s || n == 0)
            continue;
        ifd__special_t *ns = ifd_grow(t->specials, t->n_specials, &cap, sizeof *ns, 64);
        if (!ns)
            return IFD_ENOMEM;
        t->specials = ns;
        t->specials[t->n_specials++] = (ifd__special_t){s, n};
        t->special_first[(unsigned char)s[0]] = 1;
    }
    if (t->n_specials)
        qsort(t->specials, t->n_specials, sizeof *t->specials, ifd__cmp_special);
    return 0;
}

/* Renders [{user: "Hello"}] with a generation prompt: the rc (errbuf set). */
static int ifd__trial_render(const ifd_jinja_t *j, char *errbuf, size_t errlen)
{
    json_t *ctx = json_pack("{s:[{s:s,s:s}],s:b,s:n,s:n,s:s,s:s}", "messages", "role", "user",
                            "content", "Hello", "add_generation_prompt", 1, "tools", "documents",
                            "bos_token", "", "eos_token", "");
    if (!ctx)
        return IFD_ENOMEM;
    char *out = NULL;
    int rc = ifd_jinja_render(j, ctx, NULL, &out, NULL, errbuf, errlen);
    free(out);
    json_decref(ctx);
    return rc;
}

int ifd_chat_template_create(ifd_chat_template_t **out, const ifd_tokenizer_t *tok,
                             const ifd_chat_params_t *params, char *errbuf, size_t errlen)
{
    *out = NULL;
    ifd_chat_params_t dp = ifd_chat_default_params();
    if (!params)
        params = &dp;
    const char *jinja = params->jinja ? params->jinja
                        : tok         ? ifd_tokenizer_chat_template(tok)
                                      : NULL;
    char *file_text = NULL;
    bool from_file = false, by_name = false;
    ifd_chat_family_t fam = IFD_CHAT_JINJA;
    int rc;
    if (params->name && ifd_chat_family_from_name(params->name, &fam) == 0) {
        by_name = true; /* a built-in family; the template text only supplies details */
    } else if (params->name) {
        rc = ifd__read_file(params->name, &file_text);
        if (rc == -ENOENT && !strchr(params->name, '/') && !strstr(params->name, ".jinja")) {
            ifd_fail_msg(errbuf, errlen, 0,
                         "unknown chat template '%s' (known: %s, or the path of a Jinja file)",
                         params->name, ifd_chat_family_names());
            return IFD_ENOTFOUND;
        }
        if (rc) {
            ifd_fail_msg(errbuf, errlen, 0, "chat template file '%s': %s", params->name,
                         rc < 0 && rc > -4096 ? strerror(-rc) : ifd_strerror(rc));
            return rc == IFD_ENOMEM || rc == IFD_ETOOBIG ? rc : IFD_ENOTFOUND;
        }
        jinja = file_text;
        from_file = true;
    }
    ifd_jinja_t *parsed = NULL;
    if (jinja && !by_name) {
        char perr[512];
        rc = ifd_jinja_parse(&parsed, jinja, strlen(jinja), perr, sizeof perr);
        if (rc == IFD_ENOMEM) {
            free(file_text);
            return rc;
        }
        if (rc && from_file) {
            ifd_fail_msg(errbuf, errlen, 0, "chat template file '%s': %s", params->name, perr);
            free(file_text);
            return rc;
        }
        if (!rc && !from_file && ifd__trial_render(parsed, perr, sizeof perr) == IFD_ENOTSUP) {
            /* it parses but a plain chat reaches something inferd lacks: the
             * family it looks like if there is one, else the template (other
             * conversations may render) */
            if (ifd_chat_detect(jinja, &fam) == 0) {
                ifd_jinja_destroy(parsed);
                parsed = NULL;
                rc = IFD_ENOTSUP;
            } else {
                IFD_WARN("the model's chat template fails on a plain chat (%s); keeping it",
                         perr);
                fam = IFD_CHAT_JINJA;
            }
        }
        if (rc) {
            /* the model's template uses something inferd's Jinja lacks: fall
             * back to the family it looks like */
            if (ifd_chat_detect(jinja, &fam)) {
                ifd_fail_msg(errbuf, errlen, 0,
                             "the model's chat template cannot be used (%s) and is not one inferd "
                             "knows; choose one with --chat-template NAME|FILE (known: %s)",
                             perr, ifd_chat_family_names());
                return IFD_ENOTFOUND;
            }
            IFD_WARN("the model's chat template cannot be used (%s); rendering with the "
                     "built-in '%s' template instead",
                     perr, ifd_chat_family_name(fam));
        } else if (ifd_chat_detect(jinja, &fam)) {
            fam = IFD_CHAT_JINJA;
        }
    } else if (!by_name && (!tok || ifd__detect_vocab(tok, &fam))) {
        ifd_fail_msg(errbuf, errlen, 0,
                     "the model has no chat template; choose one with --chat-template NAME|FILE "
                     "(known: %s)",
                     ifd_chat_family_names());
        return IFD_ENOTFOUND;
    }
    ifd_chat_template_t *t = calloc(1, sizeof *t);
    if (!t) {
        ifd_jinja_destroy(parsed);
        free(file_text);
        return IFD_ENOMEM;
    }
    t->family = fam;
    t->jinja = parsed;
    if (parsed) {
        t->source = file_text ? file_text : strdup(jinja);
        file_text = NULL;
        if (!t->source)
            goto nomem;
    }
    free(file_text);
    t->has_date = params->date != NULL;
    snprintf(t->date, sizeof t->date, "%s", params->date ? params->date : "26 Jul 2024");
    int bi = fam == IFD_CHAT_JINJA ? IFD_CHAT_CHATML : (int)fam; /* defaults table row */
    t->llama31 = fam == IFD_CHAT_LLAMA3 && (!jinja || strstr(jinja, "Cutting Knowledge Date"));
    static const char *const bos_dflt[IFD_CHAT_FAMILY_COUNT] = {
        "", "<|begin_of_text|>", "<bos>", "<s>", "<s>", "<s>"};
    static const char *const eos_dflt[IFD_CHAT_FAMILY_COUNT] = {
        "<|im_end|>", "<|eot_id|>", "<eos>", "</s>", "</s>", "<|endoftext|>"};
    t->bos_text = ifd__token_text_dup(tok, tok ? ifd_tokenizer_bos(tok) : -1, bos_dflt[bi]);
    t->eos_text = ifd__token_text_dup(tok, tok ? ifd_tokenizer_eos(tok) : -1, eos_dflt[bi]);
    if (!t->bos_text || !t->eos_text)
        goto nomem;
    if (fam == IFD_CHAT_CHATML && jinja && !parsed)
        t->default_system = ifd__chatml_default_system(jinja);
    if (tok && parsed && ifd__collect_specials(t, tok))
        goto nomem;
    if (tok) {
        const ifd_token_t *eog;
        size_t n_eog = ifd_tokenizer_eog_ids(tok, &eog);
        t->stops = malloc((n_eog + 5) * sizeof *t->stops);
        if (!t->stops)
            goto nomem;
        for (size_t i = 0; i < n_eog; i++)
            t->stops[t->n_stops++] = eog[i];
        for (size_t i = 0; fam != IFD_CHAT_JINJA && ifd__family_stops[fam][i]; i++) {
            const char *s = ifd__family_stops[fam][i];
            ifd_token_t id = ifd_tokenizer_find(tok, s, strlen(s));
            if (id >= 0)
                t->stops[t->n_stops++] = id;
        }
        if (ifd_tokenizer_eos(tok) >= 0)
            t->stops[t->n_stops++] = ifd_tokenizer_eos(tok);
        qsort(t->stops, t->n_stops, sizeof *t->stops, ifd__cmp_id);
        size_t u = 0;
        for (size_t i = 0; i < t->n_stops; i++)
            if (u == 0 || t->stops[u - 1] != t->stops[i])
                t->stops[u++] = t->stops[i];
        t->n_stops = u;
    }
    *out = t;
    return 0;
nomem:
    ifd_chat_template_destroy(t);
    return IFD_ENOMEM;
}

void ifd_chat_template_destroy(ifd_chat_template_t *t)
{
    if (!t)
        return;
    ifd_jinja_destroy(t->jinja);
    free(t->source);
    free(t->specials);
    free(t->default_system);
    free(t->bos_text);
    free(t->eos_text);
    free(t->stops);
    free(t);
}

const char *ifd_chat_template_source(const ifd_chat_template_t *t)
{
    return t->jinja ? t->source : NULL;
}

ifd_chat_family_t ifd_chat_template_family(const ifd_chat_template_t *t)
{
    return t->family;
}

size_t ifd_chat_template_stop_ids(const ifd_chat_template_t *t, const ifd_token_t **ids)
{
    *ids = t->stops;
    return t->n_stops;
}

/* ---- rendering ----------------------------------------------------------------------- */

/* A prompt being rendered: its text, the spans of message text in it, and
 * the first error (later writes do nothing). */
typedef struct {
    ifd_buf_t t;
    ifd_span_t *sp;
    size_t nsp, spcap;
    int err;
} ifd__rb_t;

static void ifd__rb_put(ifd__rb_t *b, const char *s, size_t n)
{
    if (!b->err)
        b->err = ifd_buf_append(&b->t, s, n);
}

/* Ends a rendering: with rc and b's error 0, out gets b's text and spans;
 * else they are freed. Returns the error. */
static int ifd__rb_finish(ifd__rb_t *b, int rc, ifd_chat_prompt_t *out)
{
    if (!rc)
        rc = b->err;
    if (rc) {
        ifd_buf_free(&b->t);
        free(b->sp);
        return rc;
    }
    out->text = b->t.data;
    out->len = b->t.len;
    out->content = b->sp;
    out->n_content = b->nsp;
    return 0;
}

/* Template text. */
static void ifd__lit(ifd__rb_t *b, const char *s)
{
    ifd__rb_put(b, s, strlen(s));
}

/* Message text: recorded as a plain span (merged with an adjacent one). */
static void ifd__msgn(ifd__rb_t *b, const char *s, size_t n)
{
    size_t off = b->t.len;
    ifd__rb_put(b, s, n);
    if (b->err || n == 0)
        return;
    if (b->nsp && b->sp[b->nsp - 1].off + b->sp[b->nsp - 1].len == off) {
        b->sp[b->nsp - 1].len += n;
        return;
    }
    ifd_span_t *p = ifd_grow(b->sp, b->nsp, &b->spcap, sizeof *p, 16);
    if (!p) {
        b->err = IFD_ENOMEM;
        return;
    }
    b->sp = p;
    b->sp[b->nsp++] = (ifd_span_t){off, n};
}

static void ifd__msg(ifd__rb_t *b, const char *s)
{
    ifd__msgn(b, s, strlen(s));
}

/* A message as the built-in families render it: ifd_chat_msg_t with its
 * content's length, for a content from JSON may hold NULs ("\u0000");
 * parts: a content with images, as ifd__norm_message keeps it (Gemma only). */
typedef struct {
    const char *role;
    const char *content;
    size_t content_len;
    const json_t *parts;
} ifd__cmsg_t;

/* The text of an image placeholder in a built-in family's prompt: Gemma 3's
 * template renders {"type": "image"} as this (outside message text, so the
 * prompt's image expansion sees it: common/chat/image_prompt.h). */
#define IFD__GEMMA_IMAGE "<start_of_image>"

static void ifd__trim_from(ifd__rb_t *b, size_t mark);

/* A message's content: message text, NULs and all. With parts (images),
 * Gemma 3's template's loop: each text part (trimmed when trim is set, as
 * `item['text'] | trim`), each image its placeholder. */
static void ifd__content_parts(ifd__rb_t *b, const ifd__cmsg_t *m, bool trim)
{
    if (!m->parts) {
        ifd__msgn(b, m->content, m->content_len);
        return;
    }
    size_t i;
    const json_t *part;
    json_array_foreach(m->parts, i, part)
    {
        const json_t *tx = json_object_get(part, "text");
        if (!json_is_string(tx)) {
            ifd__lit(b, IFD__GEMMA_IMAGE);
            continue;
        }
        size_t mark = b->t.len;
        ifd__msgn(b, json_string_value(tx), json_string_length(tx));
        if (trim)
            ifd__trim_from(b, mark);
    }
}

static void ifd__content(ifd__rb_t *b, const ifd__cmsg_t *m)
{
    ifd__content_parts(b, m, false);
}

/* Python str.isspace() for the code point at p (UTF-8); *len gets its size. */
static bool ifd__py_space(const unsigned char *p, size_t n, size_t *len)
{
    unsigned c = p[0];
    *len = 1;
    if (c < 0x80)
        return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
    uint32_t cp;
    if ((c & 0xE0) == 0xC0 && n >= 2) {
        cp = ((c & 0x1Fu) << 6) | (p[1] & 0x3Fu);
        *len = 2;
    } else if ((c & 0xF0) == 0xE0 && n >= 3) {
        cp = ((c & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
        *len = 3;
    } else {
        return false;
    }
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Strips Python whitespace from both ends of the text from mark on, moving spans. */
static void ifd__trim_from(ifd__rb_t *b, size_t mark)
{
    if (b->err)
        return;
    const unsigned char *s = (const unsigned char *)b->t.data;
    size_t a = mark, e = b->t.len, l;
    while (a < e && ifd__py_space(s + a, e - a, &l))
        a += l;
    /* from the right: step back over whole UTF-8 characters */
    for (;;) {
        if (e <= a)
            break;
        size_t k = e - 1;
        while (k > a && (s[k] & 0xC0) == 0x80)
            k--;
        if (!ifd__py_space(s + k, e - k, &l) || k + l != e)
            break;
        e = k;
    }
    size_t cut = a - mark;
    memmove(b->t.data + mark, b->t.data + a, e - a);
    b->t.len = mark + (e - a);
    b->t.data[b->t.len] = '\0';
    /* spans inside the region: clip to [a, e) and shift left by cut */
    size_t w = 0;
    for (size_t i = 0; i < b->nsp; i++) {
        ifd_span_t sp = b->sp[i];
        if (sp.off + sp.len > mark) {
            size_t s0 = sp.off < a ? a : sp.off, s1 = sp.off + sp.len > e ? e : sp.off + sp.len;
            if (s1 <= s0)
                continue;
            sp.off = s0 - cut;
            sp.len = s1 - s0;
        }
        b->sp[w++] = sp;
    }
    b->nsp = w;
}

static void ifd__content_trim(ifd__rb_t *b, const ifd__cmsg_t *m)
{
    size_t mark = b->t.len;
    ifd__content_parts(b, m, true);
    if (!m->parts)
        ifd__trim_from(b, mark);
}

static bool ifd__is(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

/* Roles must alternate user/assistant/… from the k-th message after the
 * system one (message i): 0, or IFD_EINVAL with a warning naming it. */
static int ifd__check_alternation(const ifd__cmsg_t *m, size_t i, size_t k)
{
    if (ifd__is(m[i].role, "user") == (k % 2 == 0))
        return 0;
    IFD_WARN("chat template: message %zu has role '%s': roles must alternate "
             "user/assistant/user/…",
             i, m[i].role);
    return IFD_EINVAL;
}

/* An optional leading system message: *sys points to it (else NULL);
 * returns the index of the first message after it. */
static size_t ifd__split_system(const ifd__cmsg_t *m, size_t n, const ifd__cmsg_t **sys)
{
    *sys = NULL;
    if (n == 0 || !ifd__is(m[0].role, "system"))
        return 0;
    *sys = &m[0];
    return 1;
}

/* How a family writes a turn: open, the role, sep, the content, close. Roles
 * are message text as the request gave them, unless the family spells every
 * role itself (`spelled`); `assistant` is how it spells the assistant's role
 * (the generation prompt is that turn opened); `trim`: content.strip().
 * llama2 and mistral write [INST] pairs instead: no row. */
typedef struct {
    const char *open, *sep, *close, *assistant;
    bool spelled, trim;
} ifd__turn_t;

static const ifd__turn_t ifd__turns[IFD_CHAT_FAMILY_COUNT] = {
    [IFD_CHAT_CHATML] = {"<|im_start|>", "\n", "<|im_end|>\n", "assistant", false, false},
    [IFD_CHAT_LLAMA3] = {"<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>", "assistant",
                         false, true},
    [IFD_CHAT_GEMMA] = {"<start_of_turn>", "\n", "<end_of_turn>\n", "model", false, true},
    [IFD_CHAT_PHI3] = {"<|", "|>\n", "<|end|>\n", "assistant", true, false},
};

/* open, role, sep; the role is template text when `spelled`. */
static void ifd__turn_open(ifd__rb_t *b, const ifd__turn_t *f, const char *role, bool spelled)
{
    ifd__lit(b, f->open);
    if (spelled)
        ifd__lit(b, role);
    else
        ifd__msg(b, role);
    ifd__lit(b, f->sep);
}

static void ifd__turn(ifd__rb_t *b, const ifd__turn_t *f, const ifd__cmsg_t *m)
{
    ifd__turn_open(b, f, m->role, f->spelled);
    if (f->trim)
        ifd__content_trim(b, m);
    else
        ifd__content(b, m);
    ifd__lit(b, f->close);
}

static int ifd__render_chatml(const ifd_chat_template_t *t, ifd__rb_t *b, const ifd__cmsg_t *m,
                              size_t n, bool gen)
{
    const ifd__turn_t *f = &ifd__turns[IFD_CHAT_CHATML];
    if (n > 0 && t->default_system && !ifd__is(m[0].role, "system")) {
        ifd__turn_open(b, f, "system", true);
        ifd__lit(b, t->default_system);
        ifd__lit(b, f->close);
    }
    for (size_t i = 0; i < n; i++)
        ifd__turn(b, f, &m[i]);
    if (gen)
        ifd__turn_open(b, f, f->assistant, true);
    return 0;
}

static int ifd__render_llama3(const ifd_chat_template_t *t, ifd__rb_t *b, const ifd__cmsg_t *m,
                              size_t n, bool gen)
{
    const ifd__turn_t *f = &ifd__turns[IFD_CHAT_LLAMA3];
    size_t i = 0;
    if (t->llama31) {
        ifd__lit(b, t->bos_text);
        ifd__turn_open(b, f, "system", true);
        ifd__lit(b, "Cutting Knowledge Date: December 2023\nToday Date: ");
        ifd__lit(b, t->date);
        ifd__lit(b, "\n\n");
        if (n > 0 && ifd__is(m[0].role, "system")) {
            ifd__content_trim(b, &m[0]);
            i = 1;
        }
        ifd__lit(b, f->close);
    }
    for (; i < n; i++) {
        if (!t->llama31 && i == 0)
            ifd__lit(b, t->bos_text);
        if (t->llama31 && (ifd__is(m[i].role, "tool") || ifd__is(m[i].role, "ipython"))) {
            ifd__turn_open(b, f, "ipython", true);
            ifd__content(b, &m[i]); /* not stripped */
            ifd__lit(b, f->close);
        } else {
            ifd__turn(b, f, &m[i]);
        }
    }
    if (gen)
        ifd__turn_open(b, f, f->assistant, true);
    return 0;
}

static int ifd__render_gemma(const ifd_chat_template_t *t, ifd__rb_t *b, const ifd__cmsg_t *m,
                             size_t n, bool gen)
{
    const ifd__turn_t *f = &ifd__turns[IFD_CHAT_GEMMA];
    ifd__lit(b, t->bos_text);
    const ifd__cmsg_t *sys;
    size_t start = ifd__split_system(m, n, &sys);
    for (size_t i = start; i < n; i++) {
        size_t k = i - start;
        if (ifd__check_alternation(m, i, k))
            return IFD_EINVAL;
        bool model = ifd__is(m[i].role, "assistant");
        ifd__turn_open(b, f, model ? f->assistant : m[i].role, model);
        if (k == 0 && sys) {
            ifd__content(b, sys);
            ifd__lit(b, "\n\n");
        }
        ifd__content_trim(b, &m[i]);
        ifd__lit(b, f->close);
    }
    if (gen)
        ifd__turn_open(b, f, f->assistant, true);
    return 0;
}

static int ifd__render_llama2(const ifd_chat_template_t *t, ifd__rb_t *b, const ifd__cmsg_t *m,
                              size_t n, bool gen)
{
    (void)gen; /* the official template always ends with " [/INST]" */
    const ifd__cmsg_t *sys;
    size_t start = ifd__split_system(m, n, &sys);
    for (size_t i = start; i < n; i++) {
        size_t k = i - start;
        if (ifd__check_alternation(m, i, k))
            return IFD_EINVAL;
        bool user = ifd__is(m[i].role, "user");
        if (!user && !ifd__is(m[i].role, "assistant"))
            continue; /* the template renders nothing for other roles */
        if (user) {
            ifd__lit(b, t->bos_text);
            ifd__lit(b, "[INST] ");
        } else {
            ifd__lit(b, " ");
        }
        /* content.strip() applies to the whole "<<SYS>>…" + message text */
        size_t mark = b->t.len;
        if (k == 0 && sys) {
            ifd__lit(b, "<<SYS>>\n");
            ifd__content(b, sys);
            ifd__lit(b, "\n<</SYS>>\n\n");
        }
        ifd__content(b, &m[i]);
        ifd__trim_from(b, mark);
        if (user) {
            ifd__lit(b, " [/INST]");
        } else {
            ifd__lit(b, " ");
            ifd__lit(b, t->eos_text);
        }
    }
    return 0;
}

static int ifd__render_mistral(const ifd_chat_template_t *t, ifd__rb_t *b, const ifd__cmsg_t *m,
                               size_t n, bool gen)
{
    (void)gen;
    ifd__lit(b, t->bos_text);
    const ifd__cmsg_t *sys;
    size_t start = ifd__split_system(m, n, &sys);
    for (size_t i = start; i < n; i++) {
        size_t k = i - start;
        if (ifd__check_alternation(m, i, k))
            return IFD_EINVAL;
        if (ifd__is(m[i].role, "user")) {
            ifd__lit(b, "[INST] ");
            if (k == 0 && sys) {
                ifd__content(b, sys);
                ifd__lit(b, "\n\n");
            }
            ifd__content(b, &m[i]);
            ifd__lit(b, " [/INST]");
        } else if (ifd__is(m[i].role, "assistant")) {
            ifd__content(b, &m[i]);
            ifd__lit(b, t->eos_text);
        } else {
            IFD_WARN("chat template mistral: role '%s' is not supported", m[i].role);
            return IFD_EINVAL;
        }
    }
    return 0;
}

static int ifd__render_phi3(const ifd_chat_template_t *t, ifd__rb_t *b, const ifd__cmsg_t *m,
                            size_t n, bool gen)
{
    const ifd__turn_t *f = &ifd__turns[IFD_CHAT_PHI3];
    for (size_t i = 0; i < n; i++) {
        const char *r = m[i].role;
        if ((ifd__is(r, "system") && m[i].content_len) || ifd__is(r, "user") ||
            ifd__is(r, "assistant"))
            ifd__turn(b, f, &m[i]);
    }
    if (gen)
        ifd__turn_open(b, f, f->assistant, true);
    else
        ifd__lit(b, t->eos_text);
    return 0;
}

/* The built-in renderers, one per family: the prompt for n messages into b
 * (plus the generation prompt when gen); 0 or IFD_EINVAL (warned). */
typedef int (*ifd__render_fn)(const ifd_chat_template_t *t, ifd__rb_t *b, const ifd__cmsg_t *m,
                              size_t n, bool gen);

static const ifd__render_fn ifd__renderers[IFD_CHAT_FAMILY_COUNT] = {
    [IFD_CHAT_CHATML] = ifd__render_chatml,   [IFD_CHAT_LLAMA3] = ifd__render_llama3,
    [IFD_CHAT_GEMMA] = ifd__render_gemma,     [IFD_CHAT_LLAMA2] = ifd__render_llama2,
    [IFD_CHAT_MISTRAL] = ifd__render_mistral, [IFD_CHAT_PHI3] = ifd__render_phi3,
};

/* ---- Jinja rendering ------------------------------------------------------------------ */

/* Placeholders: a 12-digit prefix found nowhere in the template or the
 * request, then an 8-digit index into the protected texts. Digits survive
 * every filter a template applies to message text (tojson, trim, upper, …). */
#define IFD__PH_PREFIX 12
#define IFD__PH_LEN    20

typedef struct {
    char prefix[IFD__PH_PREFIX + 1];
    const char **orig; /* into the request copy's strings, which outlive rendering */
    size_t *olen;
    size_t n, cap;
} ifd__ph_t;

/* The protected (CONTROL/UNKNOWN) token text at s[0..n) (longest), or NULL. */
static const ifd__special_t *ifd__special_at(const ifd_chat_template_t *t, const char *s,
                                             size_t n)
{
    if (!t->special_first[(unsigned char)s[0]])
        return NULL;
    for (size_t i = 0; i < t->n_specials; i++)
        if (t->specials[i].n <= n && memcmp(t->specials[i].s, s, t->specials[i].n) == 0)
            return &t->specials[i];
    return NULL;
}

/* Appends s[0..n) to b with every protected text replaced by a placeholder
 * (recorded in ph); *changed tells whether there was one. 0 or IFD_ENOMEM. */
static int ifd__protect_text(const ifd_chat_template_t *t, ifd__ph_t *ph, const char *s, size_t n,
                             ifd_buf_t *b, bool *changed)
{
    *changed = false;
    for (size_t i = 0; i < n;) {
        const ifd__special_t *sp = ifd__special_at(t, s + i, n - i);
        if (!sp) {
            if (ifd_buf_append(b, s + i, 1))
                return IFD_ENOMEM;
            i++;
            continue;
        }
        if (ph->n == ph->cap) {
            size_t cap = ph->cap ? ph->cap * 2 : 16;
            const char **no = realloc(ph->orig, cap * sizeof *no);
            if (!no)
                return IFD_ENOMEM;
            ph->orig = no;
            size_t *nl = realloc(ph->olen, cap * sizeof *nl);
            if (!nl)
                return IFD_ENOMEM;
            ph->olen = nl;
            ph->cap = cap;
        }
        /* the tokenizer's own text: it outlives rendering */
        ph->orig[ph->n] = sp->s;
        ph->olen[ph->n] = sp->n;
        if (ifd_buf_printf(b, "%s%08zu", ph->prefix, ph->n))
            return IFD_ENOMEM;
        ph->n++;
        *changed = true;
        i += sp->n;
    }
    return 0;
}

/* Rewrites one JSON string in place when it holds protected texts. */
static int ifd__protect_string(const ifd_chat_template_t *t, ifd__ph_t *ph, json_t *j)
{
    ifd_buf_t b = IFD_BUF_INIT;
    bool changed;
    int rc = ifd__protect_text(t, ph, json_string_value(j), json_string_length(j), &b, &changed);
    if (!rc && changed && json_string_setn(j, b.data, b.len))
        rc = IFD_ENOMEM;
    ifd_buf_free(&b);
    return rc;
}

/* An object's keys, protected: when one holds a protected text the object's
 * members move to new keys (order kept). Keys reach the output when a
 * template prints a dict (chat_template_kwargs, documents' metadata). */
static int ifd__protect_keys(const ifd_chat_template_t *t, ifd__ph_t *ph, json_t *o)
{
    const char *k;
    json_t *v;
    bool any = false;
    json_object_foreach(o, k, v)
    {
        for (size_t i = 0, n = strlen(k); i < n && !any; i++)
            any = ifd__special_at(t, k + i, n - i) != NULL;
    }
    if (!any)
        return 0;
    json_t *copy = json_copy(o);
    if (!copy || json_object_clear(o)) {
        json_decref(copy);
        return IFD_ENOMEM;
    }
    int rc = 0;
    ifd_buf_t b = IFD_BUF_INIT;
    json_object_foreach(copy, k, v)
    {
        bool changed;
        ifd_buf_clear(&b);
        if ((rc = ifd__protect_text(t, ph, k, strlen(k), &b, &changed)) ||
            ifd_buf_append(&b, "", 1) || json_object_set(o, b.data, v)) {
            rc = rc ? rc : IFD_ENOMEM;
            break;
        }
    }
    ifd_buf_free(&b);
    json_decref(copy);
    return rc;
}

/* Protects every string of a client value (messages, tools, template
 * variables, documents): values and object keys. Recursion is bounded by
 * the JSON parser's depth limit. */
static int ifd__protect(const ifd_chat_template_t *t, ifd__ph_t *ph, json_t *j)
{
    const char *k;
    json_t *v;
    size_t i;
    int rc = 0;
    switch (json_typeof(j)) {
    case JSON_STRING: return ifd__protect_string(t, ph, j);
    case JSON_ARRAY:
        json_array_foreach(j, i, v)
        {
            if ((rc = ifd__protect(t, ph, v)))
                return rc;
        }
        return 0;
    case JSON_OBJECT:
        if ((rc = ifd__protect_keys(t, ph, j)))
            return rc;
        json_object_foreach(j, k, v)
        {
            if ((rc = ifd__protect(t, ph, v)))
                return rc;
        }
        return 0;
    default: return 0;
    }
}

/* Picks a prefix that occurs in neither the template nor the request. */
static void ifd__pick_prefix(const ifd_chat_template_t *t, const char *req, size_t req_len,
                             ifd__ph_t *ph)
{
    for (uint64_t k = 0; k < 1000; k++) {
        snprintf(ph->prefix, sizeof ph->prefix, "%012llu",
                 (unsigned long long)(739148205617ull + k * 1048573ull));
        if (!strstr(t->source, ph->prefix) && !memmem(req, req_len, ph->prefix, IFD__PH_PREFIX))
            return;
    }
}

/* Whether a content array has an {"type": "image"} part. */
static bool ifd__has_image_part(const json_t *c)
{
    size_t i;
    const json_t *part;
    json_array_foreach(c, i, part)
    {
        const char *ty = json_string_value(json_object_get(part, "type"));
        if (ty && !strcmp(ty, "image"))
            return true;
    }
    return false;
}

/* A content with images is kept as its parts (transformers passes them to
 * the template as they are): each {"type": "text", "text": string} or
 * {"type": "image"}. 0 or IFD_EINVAL (errbuf). */
static int ifd__check_image_parts(const json_t *c, size_t idx, char *errbuf, size_t errlen)
{
    size_t i;
    const json_t *part;
    json_array_foreach(c, i, part)
    {
        const char *ty = json_string_value(json_object_get(part, "type"));
        bool ok = ty && (!strcmp(ty, "image") ||
                         (!strcmp(ty, "text") && json_is_string(json_object_get(part, "text"))));
        if (!ok) {
            ifd_fail_msg(errbuf, errlen, 0,
                         "message %zu: content part %zu: only {\"type\": \"text\", \"text\": "
                         "…} and {\"type\": \"image\"} parts are supported",
                         idx, i);
            return IFD_EINVAL;
        }
    }
    return 0;
}

/* Normalises one OpenAI message (a deep copy, modified in place) the way
 * vLLM prepares messages for a template. */
static int ifd__norm_message(json_t *m, size_t idx, char *errbuf, size_t errlen)
{
    if (!json_is_object(m) || !json_is_string(json_object_get(m, "role"))) {
        ifd_fail_msg(errbuf, errlen, 0, "message %zu: expected an object with a string 'role'",
                     idx);
        return IFD_EINVAL;
    }
    json_t *c = json_object_get(m, "content");
    if (!c || json_is_null(c)) {
        if (json_object_set_new(m, "content", json_string("")))
            return IFD_ENOMEM;
    } else if (json_is_array(c) && ifd__has_image_part(c)) {
        if (ifd__check_image_parts(c, idx, errbuf, errlen))
            return IFD_EINVAL;
    } else if (json_is_array(c)) {
        ifd_buf_t b = IFD_BUF_INIT;
        size_t i, k = 0;
        json_t *part;
        json_array_foreach(c, i, part)
        {
            const char *ty = json_string_value(json_object_get(part, "type"));
            json_t *tx = json_object_get(part, "text");
            if (!ty || strcmp(ty, "text") != 0 || !json_is_string(tx)) {
                ifd_buf_free(&b);
                ifd_fail_msg(errbuf, errlen, 0,
                             "message %zu: content part %zu: only {\"type\": \"text\", \"text\": "
                             "…} parts are supported",
                             idx, i);
                return IFD_EINVAL;
            }
            if ((k++ && ifd_buf_append(&b, "\n", 1)) ||
                ifd_buf_append(&b, json_string_value(tx), json_string_length(tx))) {
                ifd_buf_free(&b);
                return IFD_ENOMEM;
            }
        }
        int rc = json_object_set_new(m, "content", json_stringn(b.data ? b.data : "", b.len));
        ifd_buf_free(&b);
        if (rc)
            return IFD_ENOMEM;
    } else if (!json_is_string(c)) {
        ifd_fail_msg(errbuf, errlen, 0, "message %zu: 'content' must be a string, null or an array",
                     idx);
        return IFD_EINVAL;
    }
    json_t *calls = json_object_get(m, "tool_calls");
    if (json_is_null(calls)) {
        json_object_del(m, "tool_calls");
    } else if (calls) {
        size_t i;
        json_t *tc;
        if (!json_is_array(calls)) {
            ifd_fail_msg(errbuf, errlen, 0, "message %zu: 'tool_calls' must be an array", idx);
            return IFD_EINVAL;
        }
        json_array_foreach(calls, i, tc)
        {
            json_t *fn = json_object_get(tc, "function");
            if (!json_is_object(fn)) {
                ifd_fail_msg(errbuf, errlen, 0,
                             "message %zu: tool call %zu has no 'function' object", idx, i);
                return IFD_EINVAL;
            }
            json_t *args = json_object_get(fn, "arguments");
            json_t *parsed = NULL;
            if (!args || json_is_null(args) ||
                (json_is_string(args) && json_string_length(args) == 0))
                parsed = json_object();
            else if (json_is_string(args))
                parsed = json_loadb(json_string_value(args), json_string_length(args),
                                    JSON_DECODE_ANY, NULL);
            if (parsed && json_object_set_new(fn, "arguments", parsed))
                return IFD_ENOMEM;
        }
    }
    return 0;
}

/* Restores placeholders in text[0..n) into p, recording their spans. */
static int ifd__restore(const ifd__ph_t *ph, const char *text, size_t n, ifd__rb_t *b)
{
    size_t i = 0;
    while (i < n) {
        const char *m = ph->n ? memmem(text + i, n - i, ph->prefix, IFD__PH_PREFIX) : NULL;
        size_t at = m ? (size_t)(m - text) : n;
        ifd__rb_put(b, text + i, at - i);
        if (!m)
            break;
        size_t idx = 0;
        bool ok = at + IFD__PH_LEN <= n;
        for (size_t k = at + IFD__PH_PREFIX; ok && k < at + IFD__PH_LEN; k++) {
            ok = text[k] >= '0' && text[k] <= '9';
            idx = idx * 10 + (size_t)(text[k] - '0');
        }
        if (!ok || idx >= ph->n) {
            ifd__rb_put(b, text + at, IFD__PH_PREFIX);
            i = at + IFD__PH_PREFIX;
            continue;
        }
        ifd__msgn(b, ph->orig[idx], ph->olen[idx]);
        i = at + IFD__PH_LEN;
    }
    return b->err;
}

/* Variables the server supplies: a client's chat_template_kwargs cannot set
 * them unless ifd_chat_request_t.vars_may_override says so. */
static const char *const ifd__server_vars[] = {"bos_token", "eos_token", "unk_token", "pad_token",
                                               "date_string"};

/* The rendering context: the client's variables (protected, server-owned
 * ones dropped), then what the server supplies, then messages, tools and
 * add_generation_prompt, which nothing overrides. Takes ownership of vars. */
static int ifd__jinja_ctx(const ifd_chat_template_t *t, const ifd_chat_request_t *req,
                          json_t *msgs, json_t *tools, json_t *vars, json_t *ctx)
{
    int rc = 0;
    if (!req->vars_may_override)
        for (size_t i = 0; i < sizeof ifd__server_vars / sizeof ifd__server_vars[0]; i++)
            json_object_del(vars, ifd__server_vars[i]);
    if (json_object_update(ctx, vars))
        rc = IFD_ENOMEM;
    json_decref(vars);
    if (t->has_date && !json_object_get(ctx, "date_string"))
        rc = rc ? rc : json_object_set_new(ctx, "date_string", json_string(t->date));
    if (!json_object_get(ctx, "bos_token"))
        rc = rc ? rc : json_object_set_new(ctx, "bos_token", json_string(t->bos_text));
    if (!json_object_get(ctx, "eos_token"))
        rc = rc ? rc : json_object_set_new(ctx, "eos_token", json_string(t->eos_text));
    if (!json_object_get(ctx, "documents")) /* vars may carry the request's documents */
        rc = rc ? rc : json_object_set_new(ctx, "documents", json_null());
    if (rc || json_object_set(ctx, "messages", msgs) || json_object_set(ctx, "tools", tools) ||
        json_object_set_new(ctx, "add_generation_prompt", json_boolean(req->add_generation_prompt)))
        return IFD_ENOMEM;
    return 0;
}

/* Replaces the special-token texts of every client string (messages, tools,
 * variables and documents, keys included) by placeholders (ph). */
static int ifd__protect_request(const ifd_chat_template_t *t, json_t *msgs, json_t *tools,
                                json_t *vars, ifd__ph_t *ph)
{
    if (!t->n_specials)
        return 0;
    json_t *all = json_pack("[OOO]", msgs, tools, vars);
    char *dump = all ? json_dumps(all, JSON_COMPACT) : NULL;
    json_decref(all);
    if (!dump)
        return IFD_ENOMEM;
    ifd__pick_prefix(t, dump, strlen(dump), ph);
    free(dump);
    int rc;
    if ((rc = ifd__protect(t, ph, msgs)) || (rc = ifd__protect(t, ph, tools)) ||
        (rc = ifd__protect(t, ph, vars)))
        return rc;
    return 0;
}

static int ifd__render_jinja(const ifd_chat_template_t *t, const ifd_chat_request_t *req,
                             ifd_chat_prompt_t *out, char *errbuf, size_t errlen)
{
    int rc = 0;
    ifd__ph_t ph = {0};
    char *text = NULL;
    size_t tlen = 0;
    json_t *ctx = json_object();
    json_t *msgs = json_deep_copy(req->messages);
    json_t *tools = req->tools && !json_is_null(req->tools) ? json_deep_copy(req->tools) : json_null();
    json_t *vars = req->vars && json_is_object(req->vars) ? json_deep_copy(req->vars) : json_object();
    if (!ctx || !msgs || !tools || !vars) {
        json_decref(vars);
        rc = IFD_ENOMEM;
        goto done;
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        if ((rc = ifd__norm_message(m, i, errbuf, errlen))) {
            json_decref(vars);
            goto done;
        }
    }
    if ((rc = ifd__protect_request(t, msgs, tools, vars, &ph))) {
        json_decref(vars);
        goto done;
    }
    if ((rc = ifd__jinja_ctx(t, req, msgs, tools, vars, ctx)))
        goto done;
    ifd_jinja_limits_t lim = ifd_jinja_default_limits();
    if (req->max_time_ms)
        lim.max_time_ms = req->max_time_ms;
    lim.cancel = req->cancel;
    rc = ifd_jinja_render(t->jinja, ctx, &lim, &text, &tlen, errbuf, errlen);
    if (rc)
        goto done;
    ifd__rb_t b = {0};
    ifd__rb_put(&b, "", 0);
    rc = ifd__restore(&ph, text, tlen, &b);
    rc = ifd__rb_finish(&b, rc, out);
done:
    free(text);
    free(ph.orig);
    free(ph.olen);
    json_decref(ctx);
    json_decref(msgs);
    json_decref(tools);
    return rc;
}

static int ifd__render_builtin(const ifd_chat_template_t *t, const ifd__cmsg_t *msgs, size_t n,
                               bool add_generation_prompt, ifd_chat_prompt_t *out);

int ifd_chat_render_request(const ifd_chat_template_t *t, const ifd_chat_request_t *req,
                            ifd_chat_prompt_t *out, char *errbuf, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (errbuf && errlen)
        errbuf[0] = '\0';
    if (!json_is_array(req->messages)) {
        ifd_fail_msg(errbuf, errlen, 0, "messages must be an array");
        return IFD_EINVAL;
    }
    if (t->jinja)
        return ifd__render_jinja(t, req, out, errbuf, errlen);
    /* a built-in family: role and text content only */
    if (json_array_size(req->tools) > 0) {
        ifd_fail_msg(errbuf, errlen, 0,
                     "the built-in '%s' chat template cannot render tools; give the model's "
                     "template with --chat-template FILE",
                     ifd_chat_family_name(t->family));
        return IFD_ENOTSUP;
    }
    json_t *msgs = json_deep_copy(req->messages);
    size_t n = json_array_size(msgs);
    ifd__cmsg_t *m = calloc(n ? n : 1, sizeof *m);
    int rc = msgs && m ? 0 : IFD_ENOMEM;
    for (size_t i = 0; !rc && i < n; i++) {
        json_t *jm = json_array_get(msgs, i);
        if ((rc = ifd__norm_message(jm, i, errbuf, errlen)))
            break;
        if (json_array_size(json_object_get(jm, "tool_calls")) > 0) {
            ifd_fail_msg(errbuf, errlen, 0,
                         "message %zu: the built-in '%s' chat template cannot render tool calls; "
                         "give the model's template with --chat-template FILE",
                         i, ifd_chat_family_name(t->family));
            rc = IFD_ENOTSUP;
            break;
        }
        json_t *content = json_object_get(jm, "content");
        if (json_is_array(content) && t->family != IFD_CHAT_GEMMA) {
            ifd_fail_msg(errbuf, errlen, 0,
                         "message %zu: the built-in '%s' chat template cannot render images; "
                         "give the model's template with --chat-template FILE",
                         i, ifd_chat_family_name(t->family));
            rc = IFD_ENOTSUP;
            break;
        }
        m[i].role = json_string_value(json_object_get(jm, "role"));
        m[i].parts = json_is_array(content) ? content : NULL;
        m[i].content = m[i].parts ? "" : json_string_value(content);
        m[i].content_len = m[i].parts ? 0 : json_string_length(content);
    }
    if (!rc) {
        rc = ifd__render_builtin(t, m, n, req->add_generation_prompt, out);
        size_t odd = 0; /* a role beyond system/user/assistant: the likelier cause */
        while (rc == IFD_EINVAL && odd < n &&
               (ifd__is(m[odd].role, "system") || ifd__is(m[odd].role, "user") ||
                ifd__is(m[odd].role, "assistant")))
            odd++;
        if (rc == IFD_EINVAL && odd < n)
            ifd_fail_msg(errbuf, errlen, 0,
                         "the built-in '%s' chat template cannot render role '%.40s' (message "
                         "%zu) here; give the model's template with --chat-template FILE",
                         ifd_chat_family_name(t->family), m[odd].role, odd);
        else if (rc == IFD_EINVAL)
            ifd_fail_msg(errbuf, errlen, 0,
                         "the '%s' chat template cannot render these messages "
                         "(roles must alternate user/assistant)",
                         ifd_chat_family_name(t->family));
    }
    free(m);
    json_decref(msgs);
    return rc;
}

int ifd_chat_render_msgs(const ifd_chat_template_t *t, const ifd_chat_msg_t *msgs, size_t n,
                         const ifd_chat_request_t *opts, ifd_chat_prompt_t *out, char *errbuf,
                         size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (errbuf && errlen)
        errbuf[0] = '\0';
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content) {
            ifd_fail_msg(errbuf, errlen, 0, "message %zu has no role or content", i);
            return IFD_EINVAL;
        }
    json_t *arr = json_array();
    int rc = arr ? 0 : IFD_ENOMEM;
    for (size_t i = 0; !rc && i < n; i++) {
        /* json_pack refuses invalid UTF-8 (found by tests/fuzz/fuzz_chat.c):
         * that is the caller's bad input, not a lack of memory */
        json_t *o = json_pack("{s:s,s:s}", "role", msgs[i].role, "content", msgs[i].content);
        if (!o) {
            ifd_fail_msg(errbuf, errlen, 0, "message %zu is not valid UTF-8", i);
            rc = IFD_EINVAL;
        } else if (json_array_append_new(arr, o)) {
            rc = IFD_ENOMEM;
        }
    }
    if (!rc) {
        ifd_chat_request_t req = *opts;
        req.messages = arr;
        req.tools = NULL;
        rc = ifd_chat_render_request(t, &req, out, errbuf, errlen);
    }
    json_decref(arr);
    return rc;
}

int ifd_chat_render(const ifd_chat_template_t *t, const ifd_chat_msg_t *msgs, size_t n,
                    bool add_generation_prompt, ifd_chat_prompt_t *out)
{
    char err[512];
    ifd_chat_request_t opts = {.add_generation_prompt = add_generation_prompt};
    int rc = ifd_chat_render_msgs(t, msgs, n, &opts, out, err, sizeof err);
    if (rc && rc != IFD_ENOMEM)
        IFD_WARN("chat template: %s", err);
    return rc;
}

void ifd_chat_prompt_free(ifd_chat_prompt_t *p)
{
    if (!p)
        return;
    free(p->text);
    free(p->content);
    memset(p, 0, sizeof *p);
}

static int ifd__render_builtin(const ifd_chat_template_t *t, const ifd__cmsg_t *msgs, size_t n,
                               bool add_generation_prompt, ifd_chat_prompt_t *out)
{
    memset(out, 0, sizeof *out);
    ifd__rb_t b = {0};
    ifd__rb_put(&b, "", 0); /* always a NUL-terminated string, even when empty */
    int rc = IFD_EINVAL;
    if ((unsigned)t->family < IFD_CHAT_FAMILY_COUNT)
        rc = ifd__renderers[t->family](t, &b, msgs, n, add_generation_prompt);
    return ifd__rb_finish(&b, rc, out);
}

int ifd_chat_tokenize(const ifd_chat_template_t *t, const ifd_tokenizer_t *tok,
                      const ifd_chat_prompt_t *p, ifd_tokens_t *ids)
{
    (void)t;
    size_t n0 = ids->n;
    int rc = ifd_tokenizer_encode_spans(tok, p->text, p->len, IFD_TOK_PARSE_SPECIAL, p->content,
                                        p->n_content, ids);
    if (rc)
        return rc;
    ifd_token_t bos = ifd_tokenizer_bos(tok);
    if (ifd_tokenizer_add_bos(tok) && (ids->n == n0 || ids->ids[n0] != bos)) {
        if ((rc = ifd_tokens_push(ids, bos))) {
            ids->n = n0;
            return rc;
        }
        memmove(ids->ids + n0 + 1, ids->ids + n0, (ids->n - n0 - 1) * sizeof *ids->ids);
        ids->ids[n0] = bos;
    }
    return 0;
}
