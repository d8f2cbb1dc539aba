/*
 * chat_template.c — built-in renderers for the chat-template families of
 * chat_template.h, each a transcription of its official Jinja template's
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

struct ifd_chat_template {
    ifd_chat_family_t family;
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

int ifd_chat_template_create(ifd_chat_template_t **out, const ifd_tokenizer_t *tok,
                             const ifd_chat_params_t *params, char *errbuf, size_t errlen)
{
    ifd_chat_params_t dp = ifd_chat_default_params();
    if (!params)
        params = &dp;
    const char *jinja = params->jinja ? params->jinja
                        : tok         ? ifd_tokenizer_chat_template(tok)
                                      : NULL;
    ifd_chat_family_t fam;
    if (params->name) {
        if (ifd_chat_family_from_name(params->name, &fam)) {
            if (errbuf && errlen)
                snprintf(errbuf, errlen, "unknown chat template '%s' (known: %s)", params->name,
                         ifd_chat_family_names());
            else
                IFD_ERROR("unknown chat template '%s' (known: %s)", params->name,
                          ifd_chat_family_names());
            return IFD_ENOTFOUND;
        }
    } else if (jinja ? ifd_chat_detect(jinja, &fam) : (!tok || ifd__detect_vocab(tok, &fam))) {
        const char *why = jinja ? "the model's chat template is not one inferd knows"
                                : "the model has no chat template";
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "%s; choose one with --chat-template NAME (known: %s)", why,
                     ifd_chat_family_names());
        else
            IFD_ERROR("%s; choose one with --chat-template NAME (known: %s)", why,
                      ifd_chat_family_names());
        return IFD_ENOTFOUND;
    }
    ifd_chat_template_t *t = calloc(1, sizeof *t);
    if (!t)
        return IFD_ENOMEM;
    t->family = fam;
    snprintf(t->date, sizeof t->date, "%s", params->date ? params->date : "26 Jul 2024");
    t->llama31 = fam == IFD_CHAT_LLAMA3 && (!jinja || strstr(jinja, "Cutting Knowledge Date"));
    static const char *const bos_dflt[IFD_CHAT_FAMILY_COUNT] = {
        "", "<|begin_of_text|>", "<bos>", "<s>", "<s>", "<s>"};
    static const char *const eos_dflt[IFD_CHAT_FAMILY_COUNT] = {
        "<|im_end|>", "<|eot_id|>", "<eos>", "</s>", "</s>", "<|endoftext|>"};
    t->bos_text = ifd__token_text_dup(tok, tok ? ifd_tokenizer_bos(tok) : -1, bos_dflt[fam]);
    t->eos_text = ifd__token_text_dup(tok, tok ? ifd_tokenizer_eos(tok) : -1, eos_dflt[fam]);
    if (!t->bos_text || !t->eos_text)
        goto nomem;
    if (fam == IFD_CHAT_CHATML && jinja) {
        t->default_system = ifd__chatml_default_system(jinja);
    }
    if (tok) {
        const ifd_token_t *eog;
        size_t n_eog = ifd_tokenizer_eog_ids(tok, &eog);
        t->stops = malloc((n_eog + 5) * sizeof *t->stops);
        if (!t->stops)
            goto nomem;
        for (size_t i = 0; i < n_eog; i++)
            t->stops[t->n_stops++] = eog[i];
        for (size_t i = 0; ifd__family_stops[fam][i]; i++) {
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
    free(t->default_system);
    free(t->bos_text);
    free(t->eos_text);
    free(t->stops);
    free(t);
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

typedef struct {
    char *s;
    size_t n, cap;
    ifd_span_t *sp;
    size_t nsp, spcap;
    int err;
} ifd__rb_t;

static void ifd__rb_put(ifd__rb_t *b, const char *s, size_t n)
{
    if (b->err)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->err = IFD_ENOMEM;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

/* Template text. */
static void ifd__lit(ifd__rb_t *b, const char *s)
{
    ifd__rb_put(b, s, strlen(s));
}

/* Message text: recorded as a plain span (merged with an adjacent one). */
static void ifd__msg(ifd__rb_t *b, const char *s)
{
    size_t n = strlen(s), off = b->n;
    ifd__rb_put(b, s, n);
    if (b->err || n == 0)
        return;
    if (b->nsp && b->sp[b->nsp - 1].off + b->sp[b->nsp - 1].len == off) {
        b->sp[b->nsp - 1].len += n;
        return;
    }
    if (b->nsp == b->spcap) {
        size_t cap = b->spcap ? b->spcap * 2 : 16;
        ifd_span_t *p = realloc(b->sp, cap * sizeof *p);
        if (!p) {
            b->err = IFD_ENOMEM;
            return;
        }
        b->sp = p;
        b->spcap = cap;
    }
    b->sp[b->nsp++] = (ifd_span_t){off, n};
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

/* Strips Python whitespace from both ends of b->s[mark..n), moving spans. */
static void ifd__trim_from(ifd__rb_t *b, size_t mark)
{
    if (b->err)
        return;
    const unsigned char *s = (const unsigned char *)b->s;
    size_t a = mark, e = b->n, l;
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
    memmove(b->s + mark, b->s + a, e - a);
    b->n = mark + (e - a);
    b->s[b->n] = '\0';
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

static void ifd__msg_trim(ifd__rb_t *b, const char *s)
{
    size_t mark = b->n;
    ifd__msg(b, s);
    ifd__trim_from(b, mark);
}

static bool ifd__is(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

static int ifd__alternation_error(size_t k, const char *role)
{
    IFD_WARN("chat template: message %zu has role '%s': roles must alternate "
             "user/assistant/user/…",
             k, role);
    return IFD_EINVAL;
}

static int ifd__render_chatml(const ifd_chat_template_t *t, ifd__rb_t *b, const ifd_chat_msg_t *m,
                              size_t n, bool gen)
{
    for (size_t i = 0; i < n; i++) {
        if (i == 0 && t->default_system && !ifd__is(m[0].role, "system")) {
            ifd__lit(b, "<|im_start|>system\n");
            ifd__lit(b, t->default_system);
            ifd__lit(b, "<|im_end|>\n");
        }
        ifd__lit(b, "<|im_start|>");
        ifd__msg(b, m[i].role);
        ifd__lit(b, "\n");
        ifd__msg(b, m[i].content);
        ifd__lit(b, "<|im_end|>\n");
    }
    if (gen)
        ifd__lit(b, "<|im_start|>assistant\n");
    return 0;
}

static int ifd__render_llama3(const ifd_chat_template_t *t, ifd__rb_t *b, const ifd_chat_msg_t *m,
                              size_t n, bool gen)
{
    size_t i = 0;
    if (t->llama31) {
        ifd__lit(b, t->bos_text);
        ifd__lit(b, "<|start_header_id|>system<|end_header_id|>\n\n"
                    "Cutting Knowledge Date: December 2023\nToday Date: ");
        ifd__lit(b, t->date);
        ifd__lit(b, "\n\n");
        if (n > 0 && ifd__is(m[0].role, "system")) {
            ifd__msg_trim(b, m[0].content);
            i = 1;
        }
        ifd__lit(b, "<|eot_id|>");
    }
    for (; i < n; i++) {
        if (!t->llama31 && i == 0)
            ifd__lit(b, t->bos_text);
        if (t->llama31 && (ifd__is(m[i].role, "tool") || ifd__is(m[i].role, "ipython"))) {
            ifd__lit(b, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            ifd__msg(b, m[i].content);
        } else {
            ifd__lit(b, "<|start_header_id|>");
            ifd__msg(b, m[i].role);
            ifd__lit(b, "<|end_header_id|>\n\n");
            ifd__msg_trim(b, m[i].content);
        }
        ifd__lit(b, "<|eot_id|>");
    }
    if (gen)
        ifd__lit(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

static int ifd__render_gemma(const ifd_chat_template_t *t, ifd__rb_t *b, const ifd_chat_msg_t *m,
                             size_t n, bool gen)
{
    ifd__lit(b, t->bos_text);
    size_t start = 0;
    const char *sys = NULL;
    if (n > 0 && ifd__is(m[0].role, "system")) {
        sys = m[0].content;
        start = 1;
    }
    for (size_t i = start; i < n; i++) {
        size_t k = i - start;
        if (ifd__is(m[i].role, "user") != (k % 2 == 0))
            return ifd__alternation_error(i, m[i].role);
        ifd__lit(b, "<start_of_turn>");
        if (ifd__is(m[i].role, "assistant"))
            ifd__lit(b, "model");
        else
            ifd__msg(b, m[i].role);
        ifd__lit(b, "\n");
        if (k == 0 && sys) {
            ifd__msg(b, sys);
            ifd__lit(b, "\n\n");
        }
        ifd__msg_trim(b, m[i].content);
        ifd__lit(b, "<end_of_turn>\n");
    }
    if (gen)
        ifd__lit(b, "<start_of_turn>model\n");
    return 0;
}

static int ifd__render_llama2(const ifd_chat_template_t *t, ifd__rb_t *b, const ifd_chat_msg_t *m,
                              size_t n, bool gen)
{
    (void)gen; /* the official template always ends with " [/INST]" */
    size_t start = 0;
    const char *sys = NULL;
    if (n > 0 && ifd__is(m[0].role, "system")) {
        sys = m[0].content;
        start = 1;
    }
    for (size_t i = start; i < n; i++) {
        size_t k = i - start;
        bool user = ifd__is(m[i].role, "user");
        if (user != (k % 2 == 0))
            return ifd__alternation_error(i, m[i].role);
        if (!user && !ifd__is(m[i].role, "assistant"))
            continue; /* the template renders nothing for other roles */
        if (user) {
            ifd__lit(b, t->bos_text);
            ifd__lit(b, "[INST] ");
        } else {
            ifd__lit(b, " ");
        }
        /* content.strip() applies to the whole "<<SYS>>…" + message text */
        size_t mark = b->n;
        if (k == 0 && sys) {
            ifd__lit(b, "<<SYS>>\n");
            ifd__msg(b, sys);
            ifd__lit(b, "\n<</SYS>>\n\n");
        }
        ifd__msg(b, m[i].content);
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

static int ifd__render_mistral(const ifd_chat_template_t *t, ifd__rb_t *b, const ifd_chat_msg_t *m,
                               size_t n, bool gen)
{
    (void)gen;
    ifd__lit(b, t->bos_text);
    size_t start = 0;
    const char *sys = NULL;
    if (n > 0 && ifd__is(m[0].role, "system")) {
        sys = m[0].content;
        start = 1;
    }
    for (size_t i = start; i < n; i++) {
        size_t k = i - start;
        bool user = ifd__is(m[i].role, "user");
        if (user != (k % 2 == 0))
            return ifd__alternation_error(i, m[i].role);
        if (user) {
            ifd__lit(b, "[INST] ");
            if (k == 0 && sys) {
                ifd__msg(b, sys);
                ifd__lit(b, "\n\n");
            }
            ifd__msg(b, m[i].content);
            ifd__lit(b, " [/INST]");
        } else if (ifd__is(m[i].role, "assistant")) {
            ifd__msg(b, m[i].content);
            ifd__lit(b, t->eos_text);
        } else {
            IFD_WARN("chat template mistral: role '%s' is not supported", m[i].role);
            return IFD_EINVAL;
        }
    }
    return 0;
}

static int ifd__render_phi3(const ifd_chat_template_t *t, ifd__rb_t *b, const ifd_chat_msg_t *m,
                            size_t n, bool gen)
{
    for (size_t i = 0; i < n; i++) {
        const char *tag;
        if (ifd__is(m[i].role, "system") && m[i].content[0])
            tag = "<|system|>\n";
        else if (ifd__is(m[i].role, "user"))
            tag = "<|user|>\n";
        else if (ifd__is(m[i].role, "assistant"))
            tag = "<|assistant|>\n";
        else
            continue;
        ifd__lit(b, tag);
        ifd__msg(b, m[i].content);
        ifd__lit(b, "<|end|>\n");
    }
    if (gen)
        ifd__lit(b, "<|assistant|>\n");
    else
        ifd__lit(b, t->eos_text);
    return 0;
}

void ifd_chat_prompt_free(ifd_chat_prompt_t *p)
{
    if (!p)
        return;
    free(p->text);
    free(p->content);
    memset(p, 0, sizeof *p);
}

int ifd_chat_render(const ifd_chat_template_t *t, const ifd_chat_msg_t *msgs, size_t n,
                    bool add_generation_prompt, ifd_chat_prompt_t *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return IFD_EINVAL;
    ifd__rb_t b = {0};
    ifd__rb_put(&b, "", 0); /* always a NUL-terminated string, even when empty */
    int rc;
    switch (t->family) {
    case IFD_CHAT_CHATML:
        rc = ifd__render_chatml(t, &b, msgs, n, add_generation_prompt);
        break;
    case IFD_CHAT_LLAMA3:
        rc = ifd__render_llama3(t, &b, msgs, n, add_generation_prompt);
        break;
    case IFD_CHAT_GEMMA:
        rc = ifd__render_gemma(t, &b, msgs, n, add_generation_prompt);
        break;
    case IFD_CHAT_LLAMA2:
        rc = ifd__render_llama2(t, &b, msgs, n, add_generation_prompt);
        break;
    case IFD_CHAT_MISTRAL:
        rc = ifd__render_mistral(t, &b, msgs, n, add_generation_prompt);
        break;
    case IFD_CHAT_PHI3:
        rc = ifd__render_phi3(t, &b, msgs, n, add_generation_prompt);
        break;
    default:
        rc = IFD_EINVAL;
    }
    if (!rc)
        rc = b.err;
    if (rc) {
        free(b.s);
        free(b.sp);
        return rc;
    }
    out->text = b.s;
    out->len = b.n;
    out->content = b.sp;
    out->n_content = b.nsp;
    return 0;
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
