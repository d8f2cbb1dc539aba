/*
 * tokenizer_load.c — the two vocabulary loaders behind tokenizer.h: GGUF
 * metadata (tokenizer.ggml.*) and Hugging Face tokenizer.json +
 * tokenizer_config.json (jansson). Both fill the same ifd_tokenizer_t through
 * the builder in tokenizer_impl.h, so everything after loading is shared.
 *
 * GGUF defaults follow llama.cpp (MODEL-FORMATS.md §1.7): SPM → bos 1, eos 2,
 * unk 0, add_bos, add_space_prefix; BPE → bos = eos = 11, add_bos only for the
 * Llama-3 pre types; then the file's keys override. The HF loader maps the
 * pre-tokenizer onto the same regex passes (Split/ByteLevel/Digits) and picks
 * the model flavour from the pieces present: any ByteLevel component →
 * byte-level BPE; otherwise SentencePiece-like BPE over characters with the
 * normaliser's "▁" replacement and byte fallback (Llama 2, Gemma json files).
 */
#include "tokenizer_impl.h"

#include <errno.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "error.h"
#include "log.h"

static char *ifd__strndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* ---- GGUF ------------------------------------------------------------------------------ */

static void ifd__gguf_id(const ifd_gguf_t *g, const char *key, ifd_token_t *id)
{
    uint32_t v;
    if (ifd_gguf_get_u32(g, key, &v) == 0)
        *id = v > INT32_MAX ? IFD_TOKEN_NONE : (ifd_token_t)v;
}

/* tokenizer.ggml.model → the tokenizer kind and encoding algorithm. */
static int ifd__gguf_model(const ifd_gguf_t *g, ifd_tokmodel_t *kind, ifd__algo_t *algo,
                           char *errbuf, size_t errlen)
{
    const char *path = ifd_gguf_path(g);
    ifd_str_t model;
    int rc = ifd_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (rc) {
        ifd_fail_msg(errbuf, errlen, 0, "%s: no tokenizer (tokenizer.ggml.model missing)", path);
        return IFD_ENOTFOUND;
    }
    if (model.len == 4 && memcmp(model.ptr, "gpt2", 4) == 0) {
        *kind = IFD_TOKMODEL_BPE;
        *algo = IFD__ALGO_BPE_BYTES;
    } else if (model.len == 5 && memcmp(model.ptr, "llama", 5) == 0) {
        *kind = IFD_TOKMODEL_SPM;
        *algo = IFD__ALGO_SPM_SCORES;
    } else {
        ifd_fail_msg(errbuf, errlen, 0,
                     "%s: tokenizer model '%.*s' is not supported (only gpt2 = byte-level BPE "
                     "and llama = SentencePiece)",
                     path, (int)model.len, model.ptr);
        return IFD_ENOTSUP;
    }
    return 0;
}

/* The per-token arrays: tokens (required), scores and types (optional, NULL
 * when absent; one entry per token when present). */
static int ifd__gguf_vocab_arrays(const ifd_gguf_t *g, const ifd_gguf_value_t **tokens,
                                  const ifd_gguf_value_t **scores, const ifd_gguf_value_t **types,
                                  char *errbuf, size_t errlen)
{
    const char *path = ifd_gguf_path(g);
    if (ifd_gguf_get_arr(g, "tokenizer.ggml.tokens", tokens) ||
        (*tokens)->v.arr.elem != IFD_GGUF_STRING || (*tokens)->v.arr.count == 0 ||
        (*tokens)->v.arr.count > INT32_MAX) {
        ifd_fail_msg(errbuf, errlen, 0, "%s: tokenizer.ggml.tokens missing or not a string array",
                     path);
        return IFD_EFORMAT;
    }
    uint64_t n = (*tokens)->v.arr.count;
    if (ifd_gguf_get_arr(g, "tokenizer.ggml.scores", scores) == 0 &&
        ((*scores)->v.arr.count != n || ((*scores)->v.arr.elem != IFD_GGUF_FLOAT32 &&
                                         (*scores)->v.arr.elem != IFD_GGUF_FLOAT64))) {
        ifd_fail_msg(errbuf, errlen, 0, "%s: tokenizer.ggml.scores: %llu entries for %llu tokens",
                     path, (unsigned long long)(*scores)->v.arr.count, (unsigned long long)n);
        return IFD_EFORMAT;
    }
    if (ifd_gguf_get_arr(g, "tokenizer.ggml.token_type", types) == 0 &&
        (*types)->v.arr.count != n) {
        ifd_fail_msg(errbuf, errlen, 0,
                     "%s: tokenizer.ggml.token_type: %llu entries for %llu tokens", path,
                     (unsigned long long)(*types)->v.arr.count, (unsigned long long)n);
        return IFD_EFORMAT;
    }
    return 0;
}

/* Every token's text, score and type, then the text index. */
static int ifd__gguf_tokens(ifd_tokenizer_t *t, const ifd_gguf_t *g, const ifd_gguf_value_t *tokens,
                            const ifd_gguf_value_t *scores, const ifd_gguf_value_t *types)
{
    uint64_t n = tokens->v.arr.count;
    int rc;
    if ((rc = ifd__tok_set_vocab_size(t, (int32_t)n)))
        return rc;
    for (uint64_t i = 0; i < n; i++) {
        ifd_str_t s;
        ifd_gguf_value_t v;
        float score = 0.0f;
        int type = IFD_TOKTYPE_NORMAL;
        if ((rc = ifd_gguf_arr_str(g, tokens, i, &s)))
            return rc;
        if (scores && (rc = ifd_gguf_arr_get(g, scores, i, &v)) == 0)
            score = (float)v.v.f;
        if (types && (rc = ifd_gguf_arr_get(g, types, i, &v)) == 0) {
            int64_t x = v.type == IFD_GGUF_INT32 || v.type == IFD_GGUF_INT64 ||
                                v.type == IFD_GGUF_INT8 || v.type == IFD_GGUF_INT16
                            ? v.v.i
                            : (int64_t)v.v.u;
            type = x >= 0 && x <= 6 ? (int)x : IFD_TOKTYPE_NORMAL;
        }
        if (rc)
            return rc;
        if ((rc = ifd__tok_set_token(t, (int32_t)i, s.ptr, s.len, score, (ifd_toktype_t)type)))
            return rc;
    }
    return ifd__tok_index(t);
}

/* Byte-level BPE: the pre-tokenizer named by tokenizer.ggml.pre, llama.cpp's
 * BPE defaults, the merges ("a b", rank = index). */
static int ifd__gguf_bpe(ifd_tokenizer_t *t, const ifd_gguf_t *g, char *errbuf, size_t errlen)
{
    const char *path = ifd_gguf_path(g);
    const ifd_gguf_value_t *merges = NULL;
    ifd_str_t pre;
    char name[64] = "default";
    int rc;
    if (ifd_gguf_get_str(g, "tokenizer.ggml.pre", &pre) == 0) {
        if (pre.len >= sizeof name) {
            ifd_fail_msg(errbuf, errlen, 0, "%s: tokenizer.ggml.pre too long", path);
            return IFD_ENOTSUP;
        }
        memcpy(name, pre.ptr, pre.len);
        name[pre.len] = '\0';
    } else {
        IFD_WARN("%s: tokenizer.ggml.pre missing: using the default pre-tokenizer "
                 "(generation quality may be degraded)",
                 path);
    }
    if ((rc = ifd__tok_set_pre_type(t, name, errbuf, errlen)))
        return rc;
    t->bos = t->eos = 11; /* llama.cpp's BPE defaults (Falcon legacy) */
    if (ifd_gguf_get_arr(g, "tokenizer.ggml.merges", &merges) ||
        merges->v.arr.elem != IFD_GGUF_STRING) {
        ifd_fail_msg(errbuf, errlen, 0, "%s: tokenizer.ggml.merges missing for a BPE vocabulary",
                     path);
        return IFD_EFORMAT;
    }
    uint64_t skipped = 0;
    for (uint64_t i = 0; i < merges->v.arr.count; i++) {
        ifd_str_t m;
        if ((rc = ifd_gguf_arr_str(g, merges, i, &m)))
            return rc;
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp) {
            ifd_fail_msg(errbuf, errlen, 0, "%s: merge %llu ('%.*s') has no separating space", path,
                         (unsigned long long)i, (int)m.len, m.ptr);
            return IFD_EFORMAT;
        }
        size_t al = (size_t)(sp - m.ptr);
        rc = ifd__tok_add_merge(t, m.ptr, al, sp + 1, m.len - al - 1);
        if (rc < 0)
            return rc;
        skipped += (uint64_t)rc;
    }
    if (skipped)
        IFD_WARN("%s: %llu merges name a text that is not a token (or repeat); ignored", path,
                 (unsigned long long)skipped);
    return 0;
}

/* The special ids and flags the file sets (over the defaults) and its chat
 * template. */
static int ifd__gguf_specials(ifd_tokenizer_t *t, const ifd_gguf_t *g)
{
    ifd__gguf_id(g, "tokenizer.ggml.bos_token_id", &t->bos);
    ifd__gguf_id(g, "tokenizer.ggml.eos_token_id", &t->eos);
    ifd__gguf_id(g, "tokenizer.ggml.unknown_token_id", &t->unk);
    ifd__gguf_id(g, "tokenizer.ggml.padding_token_id", &t->pad);
    ifd__gguf_id(g, "tokenizer.ggml.eot_token_id", &t->eot);
    ifd__gguf_id(g, "tokenizer.ggml.eom_token_id", &t->eom);
    (void)ifd_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos);
    (void)ifd_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos);
    (void)ifd_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
    ifd_str_t ct;
    if (ifd_gguf_get_str(g, "tokenizer.chat_template", &ct) == 0) {
        if (!(t->chat_template = ifd__strndup(ct.ptr, ct.len)))
            return IFD_ENOMEM;
    }
    return 0;
}

int ifd_tokenizer_create_gguf(ifd_tokenizer_t **out, const ifd_gguf_t *g, char *errbuf,
                              size_t errlen)
{
    const char *path = ifd_gguf_path(g);
    ifd_tokmodel_t kind;
    ifd__algo_t algo;
    const ifd_gguf_value_t *tokens = NULL, *scores = NULL, *types = NULL;
    int rc;
    if ((rc = ifd__gguf_model(g, &kind, &algo, errbuf, errlen)) ||
        (rc = ifd__gguf_vocab_arrays(g, &tokens, &scores, &types, errbuf, errlen)))
        return rc;
    ifd_tokenizer_t *t = ifd__tok_alloc(kind, algo);
    if (!t)
        return IFD_ENOMEM;
    if ((rc = ifd__gguf_tokens(t, g, tokens, scores, types)))
        goto fail;
    if (kind == IFD_TOKMODEL_BPE) {
        if ((rc = ifd__gguf_bpe(t, g, errbuf, errlen)))
            goto fail;
    } else { /* llama.cpp's SPM defaults */
        t->bos = 1;
        t->eos = 2;
        t->unk = 0;
        t->add_bos = t->add_space_prefix = t->clean_spaces = true;
    }
    if ((rc = ifd__gguf_specials(t, g)))
        goto fail;
    char gname[128] = "";
    ifd_str_t gn;
    if (ifd_gguf_get_str(g, "general.name", &gn) == 0)
        snprintf(gname, sizeof gname, "%.*s", (int)(gn.len < 127 ? gn.len : 127), gn.ptr);
    if ((rc = ifd__tok_finish(t, gname)))
        goto fail;
    *out = t;
    return 0;
fail:
    if (rc == IFD_ENOMEM && errbuf && errlen && !errbuf[0])
        ifd_fail_msg(errbuf, errlen, 0, "%s: out of memory loading the tokenizer", path);
    ifd_tokenizer_destroy(t);
    return rc;
}

int ifd_tokenizer_create_gguf_file(ifd_tokenizer_t **out, const char *path, char *errbuf,
                                   size_t errlen)
{
    ifd_gguf_t *g;
    int rc = ifd_gguf_open(&g, path, errbuf, errlen);
    if (rc)
        return rc;
    rc = ifd_tokenizer_create_gguf(out, g, errbuf, errlen);
    ifd_gguf_close(g);
    return rc;
}

/* ---- Hugging Face ---------------------------------------------------------------------------- */

/* A token given as "text" or {"content": "text"}; NULL otherwise. */
static const char *ifd__json_token_text(const json_t *v)
{
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_object(v) && json_is_string(json_object_get(v, "content")))
        return json_string_value(json_object_get(v, "content"));
    return NULL;
}

static bool ifd__json_type_is(const json_t *o, const char *type)
{
    const json_t *t = json_object_get(o, "type");
    return json_is_string(t) && strcmp(json_string_value(t), type) == 0;
}

/* Does any node of the tree (objects/arrays) have "type": type? */
static bool ifd__json_has_type(const json_t *o, const char *type)
{
    if (json_is_object(o)) {
        if (ifd__json_type_is(o, type))
            return true;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)o, k, v)
        {
            if (ifd__json_has_type(v, type))
                return true;
        }
    } else if (json_is_array(o)) {
        size_t i;
        json_t *v;
        json_array_foreach(o, i, v)
        {
            if (ifd__json_has_type(v, type))
                return true;
        }
    }
    return false;
}

typedef struct {
    char *re[IFD__MAX_RE];
    int n;
} ifd__relist_t;

static int ifd__relist_add(ifd__relist_t *l, const char *re, size_t len)
{
    if (l->n == IFD__MAX_RE)
        return IFD_ENOTSUP;
    if (!(l->re[l->n] = ifd__strndup(re, len)))
        return IFD_ENOMEM;
    l->n++;
    return 0;
}

static void ifd__relist_free(ifd__relist_t *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->re[i]);
    l->n = 0;
}

/* Maps one HF pre_tokenizer node onto regex passes. */
static int ifd__hf_pretok(ifd_tokenizer_t *t, const json_t *pt, ifd__relist_t *l, char *errbuf,
                          size_t errlen)
{
    if (!pt || json_is_null(pt))
        return 0;
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (!type)
        goto unsupported;
    if (strcmp(type, "Sequence") == 0) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(pt, "pretokenizers"), i, v)
        {
            int rc = ifd__hf_pretok(t, v, l, errbuf, errlen);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        if (json_is_true(json_object_get(pt, "add_prefix_space"))) {
            ifd_fail_msg(errbuf, errlen, 0,
                         "tokenizer.json: ByteLevel add_prefix_space is not "
                         "supported");
            return IFD_ENOTSUP;
        }
        const json_t *ur = json_object_get(pt, "use_regex");
        if (!ur || json_is_true(ur)) {
            static const char gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
                                       "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
            return ifd__relist_add(l, gpt2, strlen(gpt2));
        }
        return 0;
    }
    if (strcmp(type, "Digits") == 0) {
        const char *re =
            json_is_true(json_object_get(pt, "individual_digits")) ? "\\p{N}" : "\\p{N}+";
        return ifd__relist_add(l, re, strlen(re));
    }
    if (strcmp(type, "Split") == 0) {
        const json_t *pat = json_object_get(pt, "pattern");
        const char *behavior = json_string_value(json_object_get(pt, "behavior"));
        const char *rx = json_string_value(json_object_get(pat, "Regex"));
        const char *str = json_string_value(json_object_get(pat, "String"));
        /* Gemma: Split(" ", merged_with_previous) after the ' ' → ▁ normaliser
         * never sees a space: a no-op. */
        if (str && strcmp(str, " ") == 0 && t->space_to_meta)
            return 0;
        if (!behavior || strcmp(behavior, "Isolated") != 0 ||
            json_is_true(json_object_get(pt, "invert")))
            goto unsupported;
        if (rx)
            return ifd__relist_add(l, rx, strlen(rx));
        if (str) {
            char buf[512];
            int k = snprintf(buf, sizeof buf, "\\Q%s\\E", str);
            if (k < 0 || (size_t)k >= sizeof buf || strstr(str, "\\E"))
                goto unsupported;
            return ifd__relist_add(l, buf, (size_t)k);
        }
        goto unsupported;
    }
    if (strcmp(type, "Metaspace") == 0) {
        t->space_to_meta = true;
        const char *scheme = json_string_value(json_object_get(pt, "prepend_scheme"));
        const json_t *aps = json_object_get(pt, "add_prefix_space");
        t->add_space_prefix = scheme ? strcmp(scheme, "never") != 0 : !aps || json_is_true(aps);
        const json_t *split = json_object_get(pt, "split");
        if (!split || json_is_true(split)) {
            static const char ms[] = "\\x{2581}?[^\\x{2581}]+|\\x{2581}";
            return ifd__relist_add(l, ms, strlen(ms));
        }
        return 0;
    }
unsupported:;
    char *dump = json_dumps(pt, JSON_COMPACT);
    ifd_fail_msg(errbuf, errlen, 0, "tokenizer.json: pre_tokenizer %s is not supported",
                 dump ? dump : "?");
    free(dump);
    return IFD_ENOTSUP;
}

/* SentencePiece-like normalisers: Replace(" " → "▁"), Prepend("▁"),
 * Sequence of those; NFC/NFKC accepted with a warning (llama.cpp ignores
 * them too). */
static int ifd__hf_normalizer(ifd_tokenizer_t *t, const json_t *nz, char *errbuf, size_t errlen)
{
    if (!nz || json_is_null(nz))
        return 0;
    const char *type = json_string_value(json_object_get(nz, "type"));
    if (type && strcmp(type, "Sequence") == 0) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(nz, "normalizers"), i, v)
        {
            int rc = ifd__hf_normalizer(t, v, errbuf, errlen);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (type && strcmp(type, "Replace") == 0) {
        const char *from =
            json_string_value(json_object_get(json_object_get(nz, "pattern"), "String"));
        const char *to = json_string_value(json_object_get(nz, "content"));
        if (from && to && strcmp(from, " ") == 0 && strcmp(to, "\xE2\x96\x81") == 0) {
            t->space_to_meta = true;
            return 0;
        }
    }
    if (type && strcmp(type, "Prepend") == 0) {
        const char *p = json_string_value(json_object_get(nz, "prepend"));
        if (p && strcmp(p, "\xE2\x96\x81") == 0) {
            t->add_space_prefix = true;
            return 0;
        }
    }
    if (type && (strcmp(type, "NFC") == 0 || strcmp(type, "NFKC") == 0)) {
        IFD_WARN("tokenizer.json: %s normalizer ignored (as llama.cpp does)", type);
        return 0;
    }
    char *dump = json_dumps(nz, JSON_COMPACT);
    ifd_fail_msg(errbuf, errlen, 0, "tokenizer.json: normalizer %s is not supported",
                 dump ? dump : "?");
    free(dump);
    return IFD_ENOTSUP;
}

/* From a TemplateProcessing post-processor: does "single" start/end with a
 * special token, and which. */
static void ifd__hf_post(const json_t *pp, const char **first, const char **last)
{
    if (!pp || json_is_null(pp))
        return;
    if (ifd__json_type_is(pp, "Sequence")) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(pp, "processors"), i, v) ifd__hf_post(v, first, last);
        return;
    }
    if (!ifd__json_type_is(pp, "TemplateProcessing"))
        return;
    const json_t *single = json_object_get(pp, "single");
    size_t n = json_array_size(single);
    if (n == 0)
        return;
    const json_t *a = json_object_get(json_array_get(single, 0), "SpecialToken");
    const json_t *b = json_object_get(json_array_get(single, n - 1), "SpecialToken");
    if (a)
        *first = json_string_value(json_object_get(a, "id"));
    if (b)
        *last = json_string_value(json_object_get(b, "id"));
}

static ifd_token_t ifd__hf_id(const ifd_tokenizer_t *t, const char *s)
{
    return s ? ifd__tok_lookup(t, s, strlen(s)) : IFD_TOKEN_NONE;
}

/* The directory of `file` into buf. */
static void ifd__dir_of(const char *file, char *buf, size_t len)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", file);
    snprintf(buf, len, "%s", dirname(tmp));
}

/* Newer checkpoints keep the template in chat_template.jinja next to
 * tokenizer.json instead of tokenizer_config.json; absent is fine. */
static int ifd__hf_template_file(ifd_tokenizer_t *t, const char *tj, char *errbuf, size_t errlen)
{
    char dir[4096], path[4200];
    ifd__dir_of(tj, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            char *p = realloc(buf, cap = cap ? cap * 2 : 8192);
            if (!p) {
                rc = IFD_ENOMEM;
                break;
            }
            buf = p;
        }
        size_t r = fread(buf + n, 1, 4096, f);
        n += r;
        if (r < 4096)
            break;
    }
    if (rc == 0 && ferror(f)) {
        ifd_fail_msg(errbuf, errlen, 0, "%s: read error", path);
        rc = IFD_EFORMAT;
    }
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    t->chat_template = buf;
    return 0;
}

/* generation_config.json's eos_token_id (an id or a list) next to tokenizer.json: HF stops
 * generation on each of them (Llama 3: <|end_of_text|>, <|eom_id|>, <|eot_id|>). */
static void ifd__hf_gen_eos(ifd_tokenizer_t *t, const char *tj)
{
    char dir[4096], path[4200];
    ifd__dir_of(tj, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    json_t *g = json_load_file(path, 0, NULL);
    if (!g)
        return;
    const json_t *e = json_object_get(g, "eos_token_id");
    size_t n = json_is_array(e) ? json_array_size(e) : 1;
    for (size_t i = 0; i < n && t->n_gen_eos < sizeof t->gen_eos / sizeof t->gen_eos[0]; i++) {
        const json_t *x = json_is_array(e) ? json_array_get(e, i) : e;
        if (json_is_integer(x) && json_integer_value(x) >= 0 &&
            json_integer_value(x) <= INT32_MAX)
            t->gen_eos[t->n_gen_eos++] = (ifd_token_t)json_integer_value(x);
    }
    json_decref(g);
}

/* The model section must be plain BPE: no other model type, no subword
 * prefix or suffix. */
static int ifd__hf_check_model(const json_t *model, const char *tj, char *errbuf, size_t errlen)
{
    const json_t *vocab = json_object_get(model, "vocab");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (!json_is_object(vocab) || (mtype && strcmp(mtype, "BPE") != 0)) {
        ifd_fail_msg(errbuf, errlen, 0, "%s: model type %s is not supported (only BPE)", tj,
                     mtype ? mtype : "(missing)");
        return IFD_ENOTSUP;
    }
    const char *cwp = json_string_value(json_object_get(model, "continuing_subword_prefix"));
    const char *eows = json_string_value(json_object_get(model, "end_of_word_suffix"));
    if ((cwp && *cwp) || (eows && *eows)) {
        ifd_fail_msg(errbuf, errlen, 0, "%s: BPE subword prefix/suffix is not supported", tj);
        return IFD_ENOTSUP;
    }
    return 0;
}

/* The vocabulary size: the largest id of vocab and added_tokens, plus one;
 * -1 when there is none. */
static int64_t ifd__hf_max_id(const json_t *vocab, const json_t *added)
{
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)vocab, key, val)
    {
        if (json_integer_value(val) > max_id)
            max_id = json_integer_value(val);
    }
    size_t ai;
    json_array_foreach(added, ai, val)
    {
        if (json_integer_value(json_object_get(val, "id")) > max_id)
            max_id = json_integer_value(json_object_get(val, "id"));
    }
    return max_id;
}

/* Every token: gaps as empty UNUSED ones, then vocab (score -id; <0xNN> as
 * BYTE with byte fallback), then added_tokens (special → CONTROL, else
 * USER_DEFINED; lstrip/rstrip); then the text index and unk_token. */
static int ifd__hf_tokens(ifd_tokenizer_t *t, const json_t *model, const json_t *added,
                          int64_t max_id, bool bytelevel)
{
    const json_t *vocab = json_object_get(model, "vocab");
    const char *key;
    json_t *val;
    size_t ai;
    int rc;
    if ((rc = ifd__tok_set_vocab_size(t, (int32_t)max_id + 1)))
        return rc;
    /* gaps (ids nobody names) stay empty UNUSED tokens */
    for (int32_t i = 0; i <= (int32_t)max_id; i++)
        if ((rc = ifd__tok_set_token(t, i, "", 0, 0.0f, IFD_TOKTYPE_UNUSED)))
            return rc;
    t->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    t->fuse_unk = json_is_true(json_object_get(model, "fuse_unk"));
    json_object_foreach((json_t *)vocab, key, val)
    {
        int64_t id = json_integer_value(val);
        if (id < 0)
            continue;
        ifd_toktype_t ty = IFD_TOKTYPE_NORMAL;
        size_t kl = strlen(key);
        if (!bytelevel && t->byte_fallback && kl == 6 && strncmp(key, "<0x", 3) == 0 &&
            key[5] == '>')
            ty = IFD_TOKTYPE_BYTE;
        if ((rc = ifd__tok_set_token(t, (int32_t)id, key, kl, -(float)id, ty)))
            return rc;
    }
    json_array_foreach(added, ai, val)
    {
        int64_t id = json_integer_value(json_object_get(val, "id"));
        const char *content = json_string_value(json_object_get(val, "content"));
        if (id < 0 || !content)
            continue;
        bool special = json_is_true(json_object_get(val, "special"));
        if ((rc = ifd__tok_set_token(t, (int32_t)id, content, strlen(content), -1000.0f,
                                     special ? IFD_TOKTYPE_CONTROL : IFD_TOKTYPE_USER_DEFINED)))
            return rc;
        if (json_is_true(json_object_get(val, "lstrip")))
            t->toks[id].attr |= IFD__ATTR_LSTRIP;
        if (json_is_true(json_object_get(val, "rstrip")))
            t->toks[id].attr |= IFD__ATTR_RSTRIP;
    }
    if ((rc = ifd__tok_index(t)))
        return rc;
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    if (unk && (t->unk = ifd__hf_id(t, unk)) >= 0 && t->toks[t->unk].type == IFD_TOKTYPE_NORMAL)
        t->toks[t->unk].type = IFD_TOKTYPE_UNKNOWN;
    t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    return 0;
}

/* merges: "a b" strings or ["a", "b"] pairs; rank = index. */
static int ifd__hf_merges(ifd_tokenizer_t *t, const json_t *merges, const char *tj, char *errbuf,
                          size_t errlen)
{
    size_t mi;
    json_t *val;
    json_array_foreach(merges, mi, val)
    {
        const char *a, *b;
        size_t al, bl;
        if (json_is_string(val)) {
            const char *s = json_string_value(val);
            size_t n = strlen(s);
            const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
            if (!sp) {
                ifd_fail_msg(errbuf, errlen, 0, "%s: merge %zu ('%s') has no space", tj, mi, s);
                return IFD_EFORMAT;
            }
            a = s;
            al = (size_t)(sp - s);
            b = sp + 1;
            bl = n - al - 1;
        } else if (json_is_array(val) && json_array_size(val) == 2 &&
                   json_is_string(json_array_get(val, 0)) &&
                   json_is_string(json_array_get(val, 1))) {
            a = json_string_value(json_array_get(val, 0));
            b = json_string_value(json_array_get(val, 1));
            al = strlen(a);
            bl = strlen(b);
        } else {
            ifd_fail_msg(errbuf, errlen, 0, "%s: merge %zu is neither \"a b\" nor [a, b]", tj, mi);
            return IFD_EFORMAT;
        }
        int rc = ifd__tok_add_merge(t, a, al, b, bl);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Special ids and flags: tokenizer_config.json (cfg, may be NULL), else the
 * post-processor; the chat template (config, else chat_template.jinja) and
 * generation_config.json's eos ids. */
static int ifd__hf_specials(ifd_tokenizer_t *t, const json_t *root, const json_t *cfg,
                            const char *tj, char *errbuf, size_t errlen)
{
    const char *pfirst = NULL, *plast = NULL;
    ifd__hf_post(json_object_get(root, "post_processor"), &pfirst, &plast);
    const char *bos = cfg ? ifd__json_token_text(json_object_get(cfg, "bos_token")) : NULL;
    const char *eos = cfg ? ifd__json_token_text(json_object_get(cfg, "eos_token")) : NULL;
    const char *pad = cfg ? ifd__json_token_text(json_object_get(cfg, "pad_token")) : NULL;
    const char *cunk = cfg ? ifd__json_token_text(json_object_get(cfg, "unk_token")) : NULL;
    t->bos = ifd__hf_id(t, bos ? bos : pfirst);
    t->eos = ifd__hf_id(t, eos ? eos : plast);
    t->pad = ifd__hf_id(t, pad);
    if (cunk && ifd__hf_id(t, cunk) >= 0)
        t->unk = ifd__hf_id(t, cunk);
    const json_t *ab = cfg ? json_object_get(cfg, "add_bos_token") : NULL;
    const json_t *ae = cfg ? json_object_get(cfg, "add_eos_token") : NULL;
    t->add_bos = json_is_boolean(ab) ? json_is_true(ab) : pfirst != NULL;
    t->add_eos = json_is_boolean(ae) ? json_is_true(ae) : false;
    const json_t *ct = cfg ? json_object_get(cfg, "chat_template") : NULL;
    const char *cts = json_string_value(ct);
    if (!cts && json_is_array(ct)) { /* [{name, template}]: "default", else the first */
        size_t i;
        json_t *val;
        json_array_foreach(ct, i, val)
        {
            const char *nm = json_string_value(json_object_get(val, "name"));
            if (!cts || (nm && strcmp(nm, "default") == 0))
                cts = json_string_value(json_object_get(val, "template"));
        }
    }
    if (cts && !(t->chat_template = strdup(cts)))
        return IFD_ENOMEM;
    int rc;
    if (!cts && (rc = ifd__hf_template_file(t, tj, errbuf, errlen)))
        return rc;
    ifd__hf_gen_eos(t, tj);
    return 0;
}

int ifd_tokenizer_create_hf(ifd_tokenizer_t **out, const char *path, char *errbuf, size_t errlen)
{
    char tj[4096], tc[4096];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(tj, sizeof tj, "%s/tokenizer.json", path);
        snprintf(tc, sizeof tc, "%s/tokenizer_config.json", path);
    } else {
        snprintf(tj, sizeof tj, "%s", path);
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s", path);
        snprintf(tc, sizeof tc, "%s/tokenizer_config.json", dirname(tmp));
    }
    json_error_t jerr;
    json_t *root = json_load_file(tj, 0, &jerr);
    if (!root) {
        ifd_fail_msg(errbuf, errlen, 0, "%s:%d: %s", tj, jerr.line, jerr.text);
        return stat(tj, &st) != 0 ? IFD_ENOTFOUND : IFD_EFORMAT;
    }
    /* optional; transformers writes model_max_length as 1e30 in an integer
     * (Gemma 3's file has it), which jansson refuses unless as a real */
    json_t *cfg = json_load_file(tc, JSON_DECODE_INT_AS_REAL, &jerr);
    if (!cfg && stat(tc, &st) == 0)
        IFD_WARN("%s:%d: %s (ignored)", tc, jerr.line, jerr.text);
    ifd_tokenizer_t *t = NULL;
    ifd__relist_t res = {0};
    int rc;

    const json_t *model = json_object_get(root, "model");
    const json_t *added = json_object_get(root, "added_tokens");
    if ((rc = ifd__hf_check_model(model, tj, errbuf, errlen)))
        goto done;
    bool bytelevel = ifd__json_has_type(json_object_get(root, "pre_tokenizer"), "ByteLevel") ||
                     ifd__json_has_type(json_object_get(root, "decoder"), "ByteLevel");
    int64_t max_id = ifd__hf_max_id(json_object_get(model, "vocab"), added);
    if (max_id < 0 || max_id >= INT32_MAX) {
        ifd_fail_msg(errbuf, errlen, 0, "%s: empty or oversized vocabulary", tj);
        rc = IFD_EFORMAT;
        goto done;
    }
    t = ifd__tok_alloc(bytelevel ? IFD_TOKMODEL_BPE : IFD_TOKMODEL_SPM,
                       bytelevel ? IFD__ALGO_BPE_BYTES : IFD__ALGO_BPE_CHARS);
    if (!t) {
        rc = IFD_ENOMEM;
        goto done;
    }
    snprintf(t->pre, sizeof t->pre, "hf");
    if ((rc = ifd__hf_tokens(t, model, added, max_id, bytelevel)) ||
        (rc = ifd__hf_merges(t, json_object_get(model, "merges"), tj, errbuf, errlen)))
        goto done;
    if (!bytelevel &&
        (rc = ifd__hf_normalizer(t, json_object_get(root, "normalizer"), errbuf, errlen)))
        goto done;
    if (bytelevel && json_object_get(root, "normalizer") &&
        !json_is_null(json_object_get(root, "normalizer")))
        IFD_WARN("%s: normalizer ignored for a byte-level vocabulary", tj);
    if ((rc = ifd__hf_pretok(t, json_object_get(root, "pre_tokenizer"), &res, errbuf, errlen)))
        goto done;
    if ((rc = ifd__tok_set_pretok(t, (const char *const *)res.re, res.n, errbuf, errlen)))
        goto done;
    t->clean_spaces = false;
    if ((rc = ifd__hf_specials(t, root, cfg, tj, errbuf, errlen)) ||
        (rc = ifd__tok_finish(t, NULL)))
        goto done;
    *out = t;
    t = NULL;
done:
    ifd__relist_free(&res);
    ifd_tokenizer_destroy(t);
    json_decref(root);
    json_decref(cfg);
    return rc;
}
