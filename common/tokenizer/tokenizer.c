/*
 * tokenizer.c — the tokenizer's tables and its decoders: the builder the
 * loaders (tokenizer_load.c) fill, the pre-tokenizer regex table (llama.cpp's
 * mapping of tokenizer.ggml.pre), end-of-generation ids, the special-token
 * trie, decoding and the streaming detokenizer. Encoding is in
 * tokenizer_encode.c.
 *
 * Invariants: after ifd__tok_finish nothing changes (every public function
 * takes a const tokenizer and may run on any thread); each token's decoded
 * bytes ("piece") are computed once at load; the streaming detokenizer never
 * returns an incomplete or invalid UTF-8 sequence.
 */
#include "tokenizer_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "error.h"
#include "log.h"
#include "utf8.h"

/* ---- small helpers ------------------------------------------------------------ */

uint32_t ifd__byte_to_cp(uint8_t b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
        return b;
    /* the 68 remaining bytes, in increasing order, from U+0100 */
    uint32_t n = 0;
    for (uint32_t x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE))
            n++;
    return 0x100 + n;
}

/* ---- token lists ------------------------------------------------------------------ */

int ifd_tokens_push(ifd_tokens_t *v, ifd_token_t id)
{
    ifd_token_t *p = ifd_grow(v->ids, v->n, &v->cap, sizeof *p, 64);
    if (!p)
        return IFD_ENOMEM;
    v->ids = p;
    v->ids[v->n++] = id;
    return 0;
}

void ifd_tokens_free(ifd_tokens_t *v)
{
    if (!v)
        return;
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

/* ---- builder ---------------------------------------------------------------------- */

ifd_tokenizer_t *ifd__tok_alloc(ifd_tokmodel_t model, ifd__algo_t algo)
{
    ifd_tokenizer_t *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->model = model;
    t->algo = algo;
    snprintf(t->pre, sizeof t->pre, "default");
    t->bos = t->eos = t->eot = t->eom = t->unk = t->pad = IFD_TOKEN_NONE;
    for (int i = 0; i < 256; i++)
        t->byte_tok[i] = IFD_TOKEN_NONE;
    return t;
}

int ifd__tok_set_vocab_size(ifd_tokenizer_t *t, int32_t n)
{
    if (n <= 0 || t->toks)
        return IFD_EINVAL;
    t->toks = calloc((size_t)n, sizeof *t->toks);
    if (!t->toks)
        return IFD_ENOMEM;
    t->n_vocab = n;
    return 0;
}

int ifd__tok_set_token(ifd_tokenizer_t *t, int32_t id, const char *text, size_t len, float score,
                       ifd_toktype_t type)
{
    if (id < 0 || id >= t->n_vocab || len > UINT32_MAX / 2)
        return IFD_ERANGE;
    if (t->pool_len + len + 1 > t->pool_cap) {
        size_t cap = t->pool_cap ? t->pool_cap : 1 << 16;
        while (cap < t->pool_len + len + 1)
            cap *= 2;
        if (cap > UINT32_MAX)
            return IFD_ETOOBIG;
        char *p = realloc(t->pool, cap);
        if (!p)
            return IFD_ENOMEM;
        t->pool = p;
        t->pool_cap = cap;
    }
    memcpy(t->pool + t->pool_len, text, len);
    t->pool[t->pool_len + len] = '\0';
    ifd__tok_t *k = &t->toks[id];
    k->off = (uint32_t)t->pool_len;
    k->len = (uint32_t)len;
    k->score = score;
    k->type = (uint8_t)type;
    t->pool_len += len + 1;
    return 0;
}

/* ---- the text index (see text_slots) ---- */

int ifd__tok_index(ifd_tokenizer_t *t)
{
    size_t cap = 16;
    while (cap < (size_t)t->n_vocab * 2 + 1)
        cap <<= 1;
    t->text_slots = malloc(cap * sizeof *t->text_slots);
    if (!t->text_slots)
        return IFD_ENOMEM;
    memset(t->text_slots, 0xFF, cap * sizeof *t->text_slots); /* -1: empty */
    t->text_mask = (uint32_t)(cap - 1);
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const ifd__tok_t *k = &t->toks[id];
        const char *s = t->pool + k->off;
        uint32_t j = (uint32_t)ifd_hash_bytes(s, k->len) & t->text_mask;
        for (;; j = (j + 1) & t->text_mask) {
            int32_t o = t->text_slots[j];
            if (o < 0 ||
                (t->toks[o].len == k->len && memcmp(t->pool + t->toks[o].off, s, k->len) == 0)) {
                t->text_slots[j] = id; /* a duplicate text: last wins, as llama.cpp's token_to_id */
                break;
            }
        }
    }
    return 0;
}

ifd_token_t ifd__tok_lookup(const ifd_tokenizer_t *t, const char *s, size_t n)
{
    for (uint32_t j = (uint32_t)ifd_hash_bytes(s, n) & t->text_mask;; j = (j + 1) & t->text_mask) {
        int32_t o = t->text_slots[j];
        if (o < 0)
            return IFD_TOKEN_NONE;
        if (t->toks[o].len == n && memcmp(t->pool + t->toks[o].off, s, n) == 0)
            return o;
    }
}

/* ---- the merge table (see ifd__merges_t) ---- */

static void ifd__merges_free(ifd__merges_t *m)
{
    free(m->pair);
    free(m->rank);
    free(m->res);
    memset(m, 0, sizeof *m);
}

/* Room for n merges without growing. 0 or IFD_ENOMEM (m then empty). */
static int ifd__merges_init(ifd__merges_t *m, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n + 1)
        cap <<= 1;
    if (cap > (size_t)1 << 31)
        return IFD_ENOMEM;
    m->pair = malloc(cap * sizeof *m->pair);
    m->rank = malloc(cap * sizeof *m->rank);
    m->res = malloc(cap * sizeof *m->res);
    if (!m->pair || !m->rank || !m->res) {
        ifd__merges_free(m);
        return IFD_ENOMEM;
    }
    memset(m->pair, 0xFF, cap * sizeof *m->pair); /* IFD__MERGE_EMPTY */
    m->mask = (uint32_t)(cap - 1);
    m->count = 0;
    return 0;
}

static void ifd__merges_place(ifd__merges_t *m, uint64_t pair, int32_t rank, int32_t res)
{
    uint32_t j = (uint32_t)ifd__merge_hash(pair) & m->mask;
    while (m->pair[j] != IFD__MERGE_EMPTY)
        j = (j + 1) & m->mask;
    m->pair[j] = pair;
    m->rank[j] = rank;
    m->res[j] = res;
}

/* Adds the merge (a, b) → r with the next rank unless the pair has one:
 * 0 when added, 1 when present (untouched), IFD_ENOMEM. */
static int ifd__merge_put(ifd_tokenizer_t *t, int32_t a, int32_t b, int32_t r)
{
    ifd__merges_t *m = &t->merges;
    int32_t rank, res;
    if (ifd__merge_get(t, a, b, &rank, &res))
        return 1;
    if ((size_t)(m->count + 1) * 2 > (size_t)m->mask + 1) { /* keep the load ≤ 1/2 */
        ifd__merges_t n = {0};
        int rc = ifd__merges_init(&n, (size_t)m->mask + 1);
        if (rc)
            return rc;
        for (uint32_t i = 0; i <= m->mask; i++)
            if (m->pair[i] != IFD__MERGE_EMPTY)
                ifd__merges_place(&n, m->pair[i], m->rank[i], m->res[i]);
        n.count = m->count;
        ifd__merges_free(m);
        *m = n;
    }
    ifd__merges_place(m, ifd__merge_pair(a, b), (int32_t)m->count, r);
    m->count++;
    return 0;
}

int ifd__tok_add_merge(ifd_tokenizer_t *t, const char *a, size_t alen, const char *b, size_t blen)
{
    if (!t->merges.pair) {
        int rc = ifd__merges_init(&t->merges, (size_t)t->n_vocab);
        if (rc)
            return rc;
    }
    ifd_token_t ia = ifd__tok_lookup(t, a, alen), ib = ifd__tok_lookup(t, b, blen);
    if (ia < 0 || ib < 0)
        return 1;
    char stack[256];
    char *buf = alen + blen <= sizeof stack ? stack : malloc(alen + blen);
    if (!buf)
        return IFD_ENOMEM;
    memcpy(buf, a, alen);
    memcpy(buf + alen, b, blen);
    ifd_token_t r = ifd__tok_lookup(t, buf, alen + blen);
    if (buf != stack)
        free(buf);
    if (r < 0)
        return 1;
    return ifd__merge_put(t, ia, ib, r);
}

/* ---- pre-tokenizer regexes ---------------------------------------------------------- */

/* Unicode White_Space, the set llama.cpp and Oniguruma (HF tokenizers) use for
 * \s; PCRE2's \s lacks U+0085. */
#define IFD__WS "\\t-\\r\\x{85}\\p{Z}"

#define R_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define R_LLAMA3_BODY(NUM)                                                                         \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" NUM \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_LLAMA3   R_LLAMA3_BODY("\\p{N}{1,3}")
#define R_QWEN2    R_LLAMA3_BODY("\\p{N}")
#define R_DIGIT    "\\p{N}"
#define R_DIGITS   "\\p{N}+"
#define R_3DIGITS  "[0-9][0-9][0-9]"
#define R_DEFAULT1 "[\\p{P}\\$\\+<=>\\^~\\|]+"
#define R_FALCON1  "[\\p{P}\\$\\+<=>\\^~\\|`]+"
#define R_BLOOM    " ?[^(\\s|.,!?…。，、।۔،)]+"

typedef struct {
    const char *names; /* space-separated pre names */
    const char *re[4];
    bool ignore_merges;
    bool add_bos;
    bool clean_spaces;
} ifd__pre_def_t;

/* llama.cpp's mapping of tokenizer.ggml.pre (MODEL-FORMATS.md §6.3). */
static const ifd__pre_def_t ifd__pre_defs[] = {
    {"default", {R_DEFAULT1, R_GPT2, R_DIGITS, R_3DIGITS}, false, false, true},
    {"gpt-2 phi-2 roberta-bpe jina-es jina-de jina-v1-en jina-v2-es jina-v2-de "
     "jina-v2-code gigachat mpt olmo jais",
     {R_GPT2},
     false,
     false,
     true},
    {"llama3 llama-v3 llama-bpe falcon3", {R_LLAMA3}, true, true, true},
    {"dbrx smaug-bpe", {R_LLAMA3}, false, false, true},
    {"chatglm-bpe", {R_LLAMA3}, false, false, true},
    {"smollm command-r", {R_DIGIT, R_GPT2}, false, false, false},
    {"starcoder refact codeshell exaone minerva-7b", {R_DIGIT, R_GPT2}, false, false, true},
    {"qwen2 deepseek-r1-qwen megrez", {R_QWEN2}, false, false, false},
    {"stablelm2", {R_QWEN2}, false, false, true},
    {"falcon", {R_FALCON1, R_GPT2, R_3DIGITS}, false, false, true},
    {"bloom gpt3-finnish", {R_BLOOM}, false, false, true},
    {"poro-chat", {R_BLOOM}, false, false, false},
    {"viking", {R_BLOOM, R_DIGIT}, false, false, false},
};

static bool ifd__name_in(const char *list, const char *name)
{
    size_t n = strlen(name);
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ' ');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && memcmp(p, name, n) == 0)
            return true;
        if (!e)
            break;
        p = e + 1;
    }
    return false;
}

/* Rewrites \s and \S (outside and inside classes) to the White_Space set. */
static char *ifd__re_rewrite(const char *re)
{
    size_t n = strlen(re);
    char *out = malloc(n * 8 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = re[i];
        if (c == '\\' && i + 1 < n) {
            char d = re[i + 1];
            if (d == 's' || d == 'S') {
                const char *rep = d == 's' ? (in_class ? IFD__WS : "[" IFD__WS "]")
                                           : (in_class ? NULL : "[^" IFD__WS "]");
                if (!rep) { /* \S inside a class: keep PCRE2's meaning */
                    out[o++] = c;
                    out[o++] = d;
                } else {
                    size_t l = strlen(rep);
                    memcpy(out + o, rep, l);
                    o += l;
                }
            } else {
                out[o++] = c;
                out[o++] = d;
            }
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            out[o++] = c;
            if (i + 1 < n && re[i + 1] == '^')
                out[o++] = re[++i];
            if (i + 1 < n && re[i + 1] == ']') /* a literal ] first in a class */
                out[o++] = re[++i];
            continue;
        }
        if (in_class && c == ']')
            in_class = false;
        out[o++] = c;
    }
    out[o] = '\0';
    return out;
}

int ifd__tok_set_pretok(ifd_tokenizer_t *t, const char *const *res, int n, char *errbuf,
                        size_t errlen)
{
    for (int i = 0; i < t->n_re; i++)
        pcre2_code_free(t->re[i]);
    t->n_re = 0;
    if (n > IFD__MAX_RE) {
        ifd_fail_msg(errbuf, errlen, 0, "tokenizer: %d pre-tokenizer regexes (at most %d)", n,
                     IFD__MAX_RE);
        return IFD_ENOTSUP;
    }
    for (int i = 0; i < n; i++) {
        char *pat = ifd__re_rewrite(res[i]);
        if (!pat)
            return IFD_ENOMEM;
        int err;
        PCRE2_SIZE off;
        pcre2_code *re =
            pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, NULL);
        free(pat);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(err, msg, sizeof msg);
            ifd_fail_msg(errbuf, errlen, 0, "tokenizer: pre-tokenizer regex '%s' at %zu: %s",
                         res[i], (size_t)off, (const char *)msg);
            return IFD_EFORMAT;
        }
        /* JIT is an optimisation: without it (e.g. no executable memory) the
         * interpreter gives the same matches. */
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        t->re[t->n_re++] = re;
    }
    return 0;
}

int ifd__tok_set_pre_type(ifd_tokenizer_t *t, const char *name, char *errbuf, size_t errlen)
{
    for (size_t i = 0; i < sizeof ifd__pre_defs / sizeof ifd__pre_defs[0]; i++) {
        const ifd__pre_def_t *d = &ifd__pre_defs[i];
        if (!ifd__name_in(d->names, name))
            continue;
        int n = 0;
        while (n < 4 && d->re[n])
            n++;
        int rc = ifd__tok_set_pretok(t, d->re, n, errbuf, errlen);
        if (rc)
            return rc;
        snprintf(t->pre, sizeof t->pre, "%s", name);
        t->ignore_merges = d->ignore_merges;
        t->add_bos = d->add_bos;
        t->clean_spaces = d->clean_spaces;
        return 0;
    }
    ifd_fail_msg(errbuf, errlen, 0,
                 "tokenizer: unknown pre-tokenizer type tokenizer.ggml.pre = '%s' (known: "
                 "default, gpt-2, mpt, olmo, llama-bpe, llama3, smollm, starcoder, refact, "
                 "qwen2, falcon, command-r, dbrx, … see common/tokenizer/tokenizer.c)",
                 name);
    return IFD_ENOTSUP;
}

/* ---- finishing ------------------------------------------------------------------------ */

static bool ifd__tok_is(const ifd_tokenizer_t *t, ifd_token_t id, const char *s)
{
    size_t n = strlen(s);
    return t->toks[id].len == n && memcmp(t->pool + t->toks[id].off, s, n) == 0;
}

static ifd_token_t ifd__find_first(const ifd_tokenizer_t *t, const char *const *list)
{
    for (size_t i = 0; list[i]; i++) {
        ifd_token_t id = ifd__tok_lookup(t, list[i], strlen(list[i]));
        if (id >= 0)
            return id;
    }
    return IFD_TOKEN_NONE;
}

static int ifd__cmp_tok(const void *a, const void *b)
{
    ifd_token_t x = *(const ifd_token_t *)a, y = *(const ifd_token_t *)b;
    return (x > y) - (x < y);
}

static int ifd__build_eog(ifd_tokenizer_t *t)
{
    static const char *const eot_texts[] = {"<|eot_id|>",
                                            "<|im_end|>",
                                            "<|end|>",
                                            "<end_of_turn>",
                                            "<|endoftext|>",
                                            "<EOT>",
                                            "_<EOT>",
                                            "<｜end▁of▁sentence｜>",
                                            NULL};
    static const char *const eog_texts[] = {"<|eot_id|>",    "<|im_end|>",    "<|end|>",
                                            "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
                                            "<EOT>",         "_<EOT>",        NULL};
    static const char *const fim_pad[] = {"<|fim_pad|>", "<fim-pad>", "<PAD>", NULL};
    static const char *const fim_rep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                          "<REPO>",       "<reponame>",    NULL};
    static const char *const fim_sep[] = {"<|file_sep|>", NULL};
    if (t->eot < 0) {
        /* llama.cpp: the first token (by id) whose text is in the list */
        for (int32_t id = 0; id < t->n_vocab && t->eot < 0; id++)
            for (size_t k = 0; eot_texts[k]; k++)
                if (ifd__tok_is(t, id, eot_texts[k])) {
                    t->eot = id;
                    break;
                }
    }
    if (t->eom < 0)
        t->eom = ifd__tok_lookup(t, "<|eom_id|>", 10);
    size_t cap = 16, n = 0;
    ifd_token_t *v = malloc(cap * sizeof *v);
    if (!v)
        return IFD_ENOMEM;
#define IFD__EOG_ADD(x)                                                                            \
    do {                                                                                           \
        ifd_token_t x_ = (x);                                                                      \
        if (x_ < 0)                                                                                \
            break;                                                                                 \
        if (n == cap) {                                                                            \
            ifd_token_t *p_ = realloc(v, (cap *= 2) * sizeof *v);                                  \
            if (!p_) {                                                                             \
                free(v);                                                                           \
                return IFD_ENOMEM;                                                                 \
            }                                                                                      \
            v = p_;                                                                                \
        }                                                                                          \
        v[n++] = x_;                                                                               \
    } while (0)
    IFD__EOG_ADD(ifd__find_first(t, fim_pad));
    IFD__EOG_ADD(ifd__find_first(t, fim_rep));
    IFD__EOG_ADD(ifd__find_first(t, fim_sep));
    for (int32_t id = 0; id < t->n_vocab; id++) {
        for (size_t k = 0; eog_texts[k]; k++) {
            if (ifd__tok_is(t, id, eog_texts[k])) {
                IFD__EOG_ADD(id);
                t->toks[id].type = IFD_TOKTYPE_CONTROL; /* as llama.cpp forces */
                break;
            }
        }
    }
    IFD__EOG_ADD(t->eos);
    IFD__EOG_ADD(t->eot);
    IFD__EOG_ADD(t->eom);
    for (size_t i = 0; i < t->n_gen_eos; i++)
        if (t->gen_eos[i] < t->n_vocab)
            IFD__EOG_ADD(t->gen_eos[i]);
#undef IFD__EOG_ADD
    if (t->eot >= 0)
        t->toks[t->eot].type = IFD_TOKTYPE_CONTROL;
    qsort(v, n, sizeof *v, ifd__cmp_tok);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (u == 0 || v[u - 1] != v[i])
            v[u++] = v[i];
    t->eog = v;
    t->n_eog = u;
    return 0;
}

static bool ifd__is_special_type(uint8_t type)
{
    return type == IFD_TOKTYPE_CONTROL || type == IFD_TOKTYPE_USER_DEFINED ||
           type == IFD_TOKTYPE_UNKNOWN;
}

/* A new trie node one byte below parent (not there yet); its id, or
 * IFD_ENOMEM. */
static int32_t ifd__trie_add(ifd_tokenizer_t *t, size_t *cap, int32_t parent, uint8_t byte)
{
    if (t->n_nodes == *cap) { /* the two node arrays grow together */
        size_t c = *cap * 2;
        int32_t *nt = realloc(t->node_tok, c * sizeof *nt);
        if (nt)
            t->node_tok = nt;
        uint64_t *nk = nt ? realloc(t->node_key, c * sizeof *nk) : NULL;
        if (!nk)
            return IFD_ENOMEM;
        t->node_key = nk;
        *cap = c;
    }
    int32_t child = (int32_t)t->n_nodes;
    uint64_t key = ((uint64_t)(uint32_t)parent << 8) | byte;
    int rc = ifd_hash_insert(&t->trie_index, ifd_hash_u64(key), child);
    if (rc)
        return rc;
    t->node_key[child] = key;
    t->node_tok[child] = -1;
    t->n_nodes++;
    return child;
}

static int ifd__build_trie(ifd_tokenizer_t *t)
{
    size_t cap = 64;
    t->node_tok = malloc(cap * sizeof *t->node_tok);
    t->node_key = malloc(cap * sizeof *t->node_key);
    if (!t->node_tok || !t->node_key)
        return IFD_ENOMEM;
    t->node_tok[0] = -1;
    t->node_key[0] = UINT64_MAX; /* the root is nobody's child */
    t->n_nodes = 1;
    int rc = ifd_hash_init(&t->trie_index, 64);
    if (rc)
        return rc;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const ifd__tok_t *k = &t->toks[id];
        if (!ifd__is_special_type(k->type) || k->len == 0)
            continue;
        const uint8_t *s = (const uint8_t *)t->pool + k->off;
        if (k->type == IFD_TOKTYPE_USER_DEFINED) {
            t->first_byte[s[0]] |= 1;
            t->n_user_defined++;
        } else {
            t->first_byte[s[0]] |= 2;
        }
        int32_t node = 0;
        for (uint32_t i = 0; i < k->len; i++) {
            int32_t child = ifd__trie_child(t, node, s[i]);
            if (child < 0 && (child = ifd__trie_add(t, &cap, node, s[i])) < 0)
                return child;
            node = child;
        }
        /* duplicates: the last id wins, like the text index */
        t->node_tok[node] = id;
    }
    return 0;
}

static int ifd__hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* <0xNN> → NN, or -1. */
static int ifd__byte_token_value(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int h = ifd__hexval(s[3]), l = ifd__hexval(s[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
}

static int ifd__build_pieces(ifd_tokenizer_t *t)
{
    /* Decoded pieces are never longer than the raw text (byte-level chars
     * map to one byte; "▁" (3 bytes) → ' '). */
    t->ppool = malloc(t->pool_len + 1);
    if (!t->ppool)
        return IFD_ENOMEM;
    int8_t inv[0x144];
    memset(inv, 0, sizeof inv);
    uint8_t inv_b[0x144];
    for (int b = 0; b < 256; b++) {
        uint32_t cp = ifd__byte_to_cp((uint8_t)b);
        inv[cp] = 1;
        inv_b[cp] = (uint8_t)b;
    }
    size_t o = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        ifd__tok_t *k = &t->toks[id];
        const char *s = t->pool + k->off;
        k->poff = (uint32_t)o;
        int bv;
        if (k->type == IFD_TOKTYPE_BYTE && (bv = ifd__byte_token_value(s, k->len)) >= 0) {
            t->ppool[o++] = (char)bv;
        } else if (k->type == IFD_TOKTYPE_NORMAL || k->type == IFD_TOKTYPE_UNDEFINED) {
            if (t->algo == IFD__ALGO_BPE_BYTES) {
                size_t i = 0;
                while (i < k->len) {
                    size_t l;
                    uint32_t cp = ifd_utf8_get((const uint8_t *)s + i, k->len - i, &l);
                    if (cp < 0x144 && inv[cp]) {
                        t->ppool[o++] = (char)inv_b[cp];
                    } else { /* not in the byte alphabet: keep the text */
                        memcpy(t->ppool + o, s + i, l);
                        o += l;
                    }
                    i += l;
                }
            } else {
                for (size_t i = 0; i < k->len; i++) {
                    if (i + 2 < k->len && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
                        t->ppool[o++] = ' ';
                        i += 2;
                    } else {
                        t->ppool[o++] = s[i];
                    }
                }
            }
        } else {
            /* USER_DEFINED verbatim; CONTROL/UNKNOWN/UNUSED verbatim but only
             * shown with IFD_DETOK_RENDER_SPECIAL */
            memcpy(t->ppool + o, s, k->len);
            o += k->len;
        }
        k->plen = (uint32_t)(o - k->poff);
    }
    return 0;
}

int ifd__tok_finish(ifd_tokenizer_t *t, const char *general_name)
{
    int rc;
    /* special ids out of range are dropped with a warning (llama.cpp) */
    ifd_token_t *ids[] = {&t->bos, &t->eos, &t->eot, &t->eom, &t->unk, &t->pad};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        if (*ids[i] >= t->n_vocab) {
            IFD_WARN("tokenizer: special token id %d out of range (vocab %d), ignored", *ids[i],
                     t->n_vocab);
            *ids[i] = IFD_TOKEN_NONE;
        }
    }
    /* byte tokens */
    for (int b = 0; b < 256; b++) {
        char buf[8];
        if (t->algo == IFD__ALGO_BPE_BYTES) {
            size_t l = ifd_utf8_put((uint8_t *)buf, ifd__byte_to_cp((uint8_t)b));
            t->byte_tok[b] = ifd__tok_lookup(t, buf, l);
        } else {
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            t->byte_tok[b] = ifd__tok_lookup(t, buf, 6);
            if (t->byte_tok[b] < 0 && t->algo == IFD__ALGO_SPM_SCORES) {
                buf[0] = (char)b; /* llama.cpp: fall back to the 1-byte token */
                t->byte_tok[b] = ifd__tok_lookup(t, buf, 1);
            }
        }
    }
    if ((rc = ifd__build_eog(t)))
        return rc;
    /* Phi-3 (llama.cpp sets it by model name): special tokens strip the
     * whitespace on their right, except <unk>, <s>, <|endoftext|>. */
    if (general_name) {
        char low[128];
        size_t i = 0;
        for (; general_name[i] && i + 1 < sizeof low; i++)
            low[i] = (char)(general_name[i] >= 'A' && general_name[i] <= 'Z' ? general_name[i] + 32
                                                                             : general_name[i]);
        low[i] = '\0';
        if (strstr(low, "phi-3") || strstr(low, "phi3")) {
            for (int32_t id = 0; id < t->n_vocab; id++) {
                if (ifd__is_special_type(t->toks[id].type) || ifd__tok_is(t, id, "</s>"))
                    t->toks[id].attr |= IFD__ATTR_RSTRIP;
                if (ifd__tok_is(t, id, "<unk>") || ifd__tok_is(t, id, "<s>") ||
                    ifd__tok_is(t, id, "<|endoftext|>"))
                    t->toks[id].attr &= (uint8_t)~IFD__ATTR_RSTRIP;
            }
        }
    }
    if ((rc = ifd__build_trie(t)))
        return rc;
    return ifd__build_pieces(t);
}

/* ---- public getters ------------------------------------------------------------------- */

void ifd_tokenizer_destroy(ifd_tokenizer_t *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n_re; i++)
        pcre2_code_free(t->re[i]);
    free(t->toks);
    free(t->pool);
    free(t->ppool);
    free(t->text_slots);
    ifd__merges_free(&t->merges);
    ifd_hash_close(&t->trie_index);
    free(t->node_key);
    free(t->node_tok);
    free(t->eog);
    free(t->chat_template);
    free(t);
}

int32_t ifd_tokenizer_n_vocab(const ifd_tokenizer_t *t)
{
    return t->n_vocab;
}
ifd_tokmodel_t ifd_tokenizer_model(const ifd_tokenizer_t *t)
{
    return t->model;
}
const char *ifd_tokenizer_pre(const ifd_tokenizer_t *t)
{
    return t->pre;
}
ifd_token_t ifd_tokenizer_bos(const ifd_tokenizer_t *t)
{
    return t->bos;
}
ifd_token_t ifd_tokenizer_eos(const ifd_tokenizer_t *t)
{
    return t->eos;
}
ifd_token_t ifd_tokenizer_eot(const ifd_tokenizer_t *t)
{
    return t->eot;
}
ifd_token_t ifd_tokenizer_unk(const ifd_tokenizer_t *t)
{
    return t->unk;
}
ifd_token_t ifd_tokenizer_pad(const ifd_tokenizer_t *t)
{
    return t->pad;
}
bool ifd_tokenizer_add_bos(const ifd_tokenizer_t *t)
{
    return t->add_bos && t->bos >= 0;
}
const char *ifd_tokenizer_chat_template(const ifd_tokenizer_t *t)
{
    return t->chat_template;
}

size_t ifd_tokenizer_eog_ids(const ifd_tokenizer_t *t, const ifd_token_t **ids)
{
    *ids = t->eog;
    return t->n_eog;
}

bool ifd_tokenizer_is_eog(const ifd_tokenizer_t *t, ifd_token_t id)
{
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return true;
    return false;
}

ifd_toktype_t ifd_tokenizer_token_type(const ifd_tokenizer_t *t, ifd_token_t id)
{
    if (id < 0 || id >= t->n_vocab)
        return IFD_TOKTYPE_UNDEFINED;
    return (ifd_toktype_t)t->toks[id].type;
}

const char *ifd_tokenizer_token_text(const ifd_tokenizer_t *t, ifd_token_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab)
        return NULL;
    *len = t->toks[id].len;
    return t->pool + t->toks[id].off;
}

ifd_token_t ifd_tokenizer_find(const ifd_tokenizer_t *t, const char *text, size_t len)
{
    return ifd__tok_lookup(t, text, len);
}

/* ---- decoding -------------------------------------------------------------------------------- */

/* The piece of id under flags; NULL/0 when it renders as nothing. */
static const char *ifd__piece(const ifd_tokenizer_t *t, ifd_token_t id, unsigned flags, size_t *n)
{
    const ifd__tok_t *k = &t->toks[id];
    switch (k->type) {
    case IFD_TOKTYPE_NORMAL:
    case IFD_TOKTYPE_BYTE:
    case IFD_TOKTYPE_USER_DEFINED:
    case IFD_TOKTYPE_UNDEFINED:
        *n = k->plen;
        return t->ppool + k->poff;
    default:
        if (flags & IFD_DETOK_RENDER_SPECIAL) {
            *n = k->plen;
            return t->ppool + k->poff;
        }
        *n = 0;
        return NULL;
    }
}

int ifd_tokenizer_token_bytes(const ifd_tokenizer_t *t, ifd_token_t id, unsigned flags, char *buf,
                              size_t cap)
{
    if (id < 0 || id >= t->n_vocab)
        return IFD_ERANGE;
    size_t n;
    const char *p = ifd__piece(t, id, flags, &n);
    if (n && buf)
        memcpy(buf, p, n < cap ? n : cap);
    return (int)n;
}

static bool ifd__strips_space(const ifd_tokenizer_t *t)
{
    return t->algo != IFD__ALGO_BPE_BYTES && t->add_space_prefix;
}

int ifd_tokenizer_decode(const ifd_tokenizer_t *t, const ifd_token_t *ids, size_t n, unsigned flags,
                         char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return IFD_ERANGE;
        total += t->toks[ids[i]].plen;
    }
    char *s = malloc(total + 1);
    if (!s)
        return IFD_ENOMEM;
    size_t o = 0, i = 0;
    if (!(flags & IFD_DETOK_KEEP_BOS) && t->add_bos && n > 0 && ids[0] == t->bos && t->bos >= 0)
        i = 1;
    bool strip = ifd__strips_space(t);
    for (; i < n; i++) {
        size_t l;
        const char *p = ifd__piece(t, ids[i], flags, &l);
        if (l == 0)
            continue;
        if (strip && p[0] == ' ') {
            p++;
            l--;
        }
        strip = false;
        memcpy(s + o, p, l);
        o += l;
    }
    s[o] = '\0';
    *out = s;
    *out_len = o;
    return 0;
}

struct ifd_detok {
    const ifd_tokenizer_t *t;
    unsigned flags;
    bool started; /* a piece with text has been seen (SPM space rule) */
    bool first;   /* no id pushed yet (BOS rule) */
    uint8_t hold[4];
    size_t n_hold;
    char *out;
    size_t out_cap;
};

int ifd_detok_create(ifd_detok_t **out, const ifd_tokenizer_t *t, unsigned flags)
{
    ifd_detok_t *d = calloc(1, sizeof *d);
    if (!d)
        return IFD_ENOMEM;
    d->t = t;
    d->flags = flags;
    ifd_detok_reset(d);
    *out = d;
    return 0;
}

void ifd_detok_destroy(ifd_detok_t *d)
{
    if (!d)
        return;
    free(d->out);
    free(d);
}

void ifd_detok_reset(ifd_detok_t *d)
{
    d->started = false;
    d->first = true;
    d->n_hold = 0;
}

static const char ifd__fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

int ifd_detok_push(ifd_detok_t *d, ifd_token_t id, const char **text, size_t *len)
{
    const ifd_tokenizer_t *t = d->t;
    *text = "";
    *len = 0;
    if (id < 0 || id >= t->n_vocab)
        return IFD_ERANGE;
    bool first = d->first;
    d->first = false;
    if (first && !(d->flags & IFD_DETOK_KEEP_BOS) && t->add_bos && id == t->bos)
        return 0;
    size_t l;
    const char *p = ifd__piece(t, id, d->flags, &l);
    if (l == 0)
        return 0;
    if (!d->started) {
        d->started = true;
        if (ifd__strips_space(t) && p[0] == ' ') {
            p++;
            l--;
        }
    }
    /* worst case: every held/new byte becomes a 3-byte U+FFFD */
    size_t need = (d->n_hold + l) * 3 + 1;
    if (need > d->out_cap) {
        char *q = realloc(d->out, need);
        if (!q)
            return IFD_ENOMEM;
        d->out = q;
        d->out_cap = need;
    }
    /* stage held bytes + the piece contiguously at the end of out */
    uint8_t stage_small[64];
    uint8_t *w = d->n_hold + l <= sizeof stage_small ? stage_small : malloc(d->n_hold + l);
    if (!w)
        return IFD_ENOMEM;
    memcpy(w, d->hold, d->n_hold);
    memcpy(w + d->n_hold, p, l);
    size_t n = d->n_hold + l, i = 0, o = 0;
    d->n_hold = 0;
    while (i < n) {
        int k = ifd_utf8_check(w + i, n - i);
        if (k > 0) {
            memcpy(d->out + o, w + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else if (k == 0) { /* unfinished: keep for the next piece */
            memcpy(d->hold, w + i, n - i);
            d->n_hold = n - i;
            break;
        } else {
            memcpy(d->out + o, ifd__fffd, 3);
            o += 3;
            i += (size_t)-k;
        }
    }
    if (w != stage_small)
        free(w);
    *text = d->out;
    *len = o;
    return 0;
}

int ifd_detok_flush(ifd_detok_t *d, const char **text, size_t *len)
{
    *text = "";
    *len = 0;
    if (d->n_hold) {
        if (d->out_cap < 4) {
            char *q = realloc(d->out, 4);
            if (!q)
                return IFD_ENOMEM;
            d->out = q;
            d->out_cap = 4;
        }
        memcpy(d->out, ifd__fffd, 3);
        d->n_hold = 0;
        *text = d->out;
        *len = 3;
    }
    return 0;
}

/* ---- vocab tests and paths ------------------------------------------------------------------ */

int ifd_tokenizer_run_vocab_test(const ifd_tokenizer_t *t, const char *inp, size_t len, FILE *out)
{
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sl = sizeof sep - 1;
    ifd_tokens_t ids = {0};
    size_t pos = 0;
    while (pos < len) {
        const char *e = memmem(inp + pos, len - pos, sep, sl);
        size_t end = e ? (size_t)(e - inp) : len;
        if (!e && end == pos)
            break;
        ids.n = 0;
        int rc = ifd_tokenizer_encode(t, inp + pos, end - pos, 0, &ids);
        if (rc) {
            ifd_tokens_free(&ids);
            return rc;
        }
        for (size_t i = 0; i < ids.n; i++)
            fprintf(out, " %d", ids.ids[i]);
        fputc('\n', out);
        if (!e)
            break;
        pos = end + sl;
    }
    ifd_tokens_free(&ids);
    return 0;
}

int ifd_tokenizer_create_path(ifd_tokenizer_t **out, const char *path, char *errbuf, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        int err = errno;
        ifd_fail_msg(errbuf, errlen, 0, "tokenizer: %s: %s", path, strerror(err));
        return -err;
    }
    if (S_ISREG(st.st_mode)) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            uint8_t m[4] = {0};
            ssize_t r = read(fd, m, 4);
            close(fd);
            if (r == 4 && memcmp(m, "GGUF", 4) == 0)
                return ifd_tokenizer_create_gguf_file(out, path, errbuf, errlen);
        }
    }
    return ifd_tokenizer_create_hf(out, path, errbuf, errlen);
}

int ifd_tokenizer_create_source(ifd_tokenizer_t **out, const ifd_model_source_t *src,
                                char *errbuf, size_t errlen)
{
    const ifd_gguf_t *g = ifd_model_source_gguf(src);
    if (g)
        return ifd_tokenizer_create_gguf(out, g, errbuf, errlen);
    return ifd_tokenizer_create_hf(out, ifd_model_source_path(src), errbuf, errlen);
}
