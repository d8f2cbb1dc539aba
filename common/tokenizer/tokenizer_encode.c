/*
 * tokenizer_encode.c — text → ids (the encoding half of tokenizer.h; tables
 * and decoding are in tokenizer.c, loaders in tokenizer_load.c).
 *
 * Encoding follows llama.cpp's llama_tokenize_impl step by step, because its
 * vocab test vectors are the reference: (1) partition the text around special
 * tokens (longest token text first, leftmost occurrences; USER_DEFINED always,
 * CONTROL/UNKNOWN only when parsing specials and outside plain spans);
 * (2) each raw fragment goes to the model — SPM: optional space prefix, ' ' →
 * "▁", score-ordered bigram merges, <0xNN> byte fallback; byte-level BPE: the
 * pre-tokenizer regexes (PCRE2, isolated splits) then rank-ordered merges on
 * token ids; HF-style char BPE likewise over characters; (3) BOS/EOS.
 *
 * Invariants: merges live in id space — (left id, right id) → (rank, result) —
 * so the merge loop never compares strings; a min-heap keyed (rank, left
 * position) yields exactly the reference order (lowest rank, then leftmost),
 * and stale heap entries are recognised by re-checking both symbols' ids and
 * adjacency. Everything per call (symbols, heap, buffers, PCRE2 match data)
 * lives in an ifd__enc_t on the caller's stack, so a tokenizer is read-only
 * after loading and safe to share between threads.
 */
#include "tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "utf8.h"

/* Length of the character at p[0..n) for splitting text into symbols: a
 * valid UTF-8 sequence is one symbol; each byte of an invalid one is its own.
 * (llama.cpp trusts the lead byte alone; for valid text both agree, and this
 * way invalid input still round-trips through byte fallback.) */
static inline size_t ifd__char_len(const uint8_t *p, size_t n)
{
    if (p[0] < 0x80)
        return 1;
    int k = ifd_utf8_check(p, n);
    return k > 0 ? (size_t)k : 1;
}

/* ---- encoding: per-call scratch --------------------------------------------------------- */

typedef struct {
    int32_t id; /* BPE: token id (or -1: no token, dropped); SPM: unused */
    int32_t prev, next;
    uint32_t start, n; /* SPM: byte range in the buffer; n == 0 once merged away */
} ifd__sym_t;

typedef struct {
    uint64_t key; /* (priority << 32) | left position: min-heap */
    int32_t right;
    int32_t lid, rid; /* BPE: the ids the pair was made of; SPM: size in lid */
    int32_t res;
} ifd__hent_t;

typedef struct {
    const ifd_tokenizer_t *t;
    ifd_tokens_t *out;
    ifd__sym_t *syms;
    size_t syms_cap;
    ifd__hent_t *heap;
    size_t heap_n, heap_cap;
    char *buf; /* normalised text (SPM, BPE_CHARS) or mapped word */
    size_t buf_cap;
    pcre2_match_data *md;
} ifd__enc_t;

static int ifd__reserve(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return IFD_ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

static int ifd__heap_push(ifd__enc_t *e, ifd__hent_t h)
{
    int rc = ifd__reserve((void **)&e->heap, &e->heap_cap, e->heap_n + 1, sizeof *e->heap);
    if (rc)
        return rc;
    size_t i = e->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (e->heap[p].key <= h.key)
            break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = h;
    return 0;
}

static ifd__hent_t ifd__heap_pop(ifd__enc_t *e)
{
    ifd__hent_t top = e->heap[0];
    ifd__hent_t last = e->heap[--e->heap_n];
    size_t n = e->heap_n, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && e->heap[c + 1].key < e->heap[c].key)
            c++;
        if (last.key <= e->heap[c].key)
            break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n)
        e->heap[i] = last;
    return top;
}

static inline int ifd__emit(ifd__enc_t *e, ifd_token_t id)
{
    return ifd_tokens_push(e->out, id);
}

/* ---- rank-ordered BPE over the ids in e->syms[0..n) ----------------------------------- */

static int ifd__bpe_try_pair(ifd__enc_t *e, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return 0;
    int32_t a = e->syms[l].id, b = e->syms[r].id;
    if (a < 0 || b < 0)
        return 0;
    int32_t rank, res;
    if (!ifd__merge_get(e->t, a, b, &rank, &res))
        return 0;
    ifd__hent_t h = {((uint64_t)(uint32_t)rank << 32) | (uint32_t)l, r, a, b, res};
    return ifd__heap_push(e, h);
}

static int ifd__bpe_merge(ifd__enc_t *e, size_t n)
{
    int rc;
    if (n == 1)
        return e->syms[0].id >= 0 ? ifd__emit(e, e->syms[0].id) : 0;
    e->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if ((rc = ifd__bpe_try_pair(e, (int32_t)i, (int32_t)i + 1)))
            return rc;
    while (e->heap_n) {
        ifd__hent_t h = ifd__heap_pop(e);
        int32_t l = (int32_t)(uint32_t)h.key, r = h.right;
        ifd__sym_t *L = &e->syms[l], *R = &e->syms[r];
        /* stale: a side was merged away or changed since the pair was queued */
        if (L->n == 0 || R->n == 0 || L->next != r || L->id != h.lid || R->id != h.rid)
            continue;
        L->id = h.res;
        L->next = R->next;
        if (R->next >= 0)
            e->syms[R->next].prev = l;
        R->n = 0;
        if ((rc = ifd__bpe_try_pair(e, L->prev, l)) || (rc = ifd__bpe_try_pair(e, l, L->next)))
            return rc;
    }
    for (int32_t i = 0; i >= 0; i = e->syms[i].next)
        if (e->syms[i].id >= 0 && (rc = ifd__emit(e, e->syms[i].id)))
            return rc;
    return 0;
}

/* Byte-level BPE of one pre-token. */
static int ifd__bpe_bytes_word(ifd__enc_t *e, const char *w, size_t n)
{
    const ifd_tokenizer_t *t = e->t;
    int rc;
    if (n == 0)
        return 0;
    if (n == 1) {
        ifd_token_t id = t->byte_tok[(uint8_t)w[0]];
        return id >= 0 ? ifd__emit(e, id) : 0;
    }
    if (t->ignore_merges) {
        if ((rc = ifd__reserve((void **)&e->buf, &e->buf_cap, n * 2, 1)))
            return rc;
        size_t o = 0;
        for (size_t i = 0; i < n; i++)
            o += ifd_utf8_put((uint8_t *)e->buf + o, ifd__byte_to_cp((uint8_t)w[i]));
        ifd_token_t id = ifd__tok_lookup(t, e->buf, o);
        if (id >= 0)
            return ifd__emit(e, id);
    }
    if ((rc = ifd__reserve((void **)&e->syms, &e->syms_cap, n, sizeof *e->syms)))
        return rc;
    for (size_t i = 0; i < n; i++) {
        ifd__sym_t *s = &e->syms[i];
        s->id = t->byte_tok[(uint8_t)w[i]];
        s->prev = (int32_t)i - 1;
        s->next = i + 1 < n ? (int32_t)i + 1 : -1;
        s->start = (uint32_t)i;
        s->n = 1;
    }
    return ifd__bpe_merge(e, n);
}

/* HF-style BPE over characters with byte fallback (BPE_CHARS). */
static int ifd__bpe_chars_word(ifd__enc_t *e, const char *w, size_t n)
{
    const ifd_tokenizer_t *t = e->t;
    int rc;
    if (n == 0)
        return 0;
    if (t->ignore_merges) {
        ifd_token_t id = ifd__tok_lookup(t, w, n);
        if (id >= 0)
            return ifd__emit(e, id);
    }
    if ((rc = ifd__reserve((void **)&e->syms, &e->syms_cap, n, sizeof *e->syms)))
        return rc;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t l = ifd__char_len((const uint8_t *)w + i, n - i);
        ifd_token_t id = ifd__tok_lookup(t, w + i, l);
        if (id < 0 && t->byte_fallback) {
            bool all = true;
            for (size_t j = 0; j < l; j++)
                all = all && t->byte_tok[(uint8_t)w[i + j]] >= 0;
            if (all) {
                for (size_t j = 0; j < l; j++) {
                    e->syms[k] = (ifd__sym_t){t->byte_tok[(uint8_t)w[i + j]], (int32_t)k - 1,
                                              (int32_t)k + 1, (uint32_t)(i + j), 1};
                    k++;
                }
                i += l;
                continue;
            }
        }
        if (id < 0) {
            id = t->unk;
            if (t->fuse_unk && k > 0 && e->syms[k - 1].id == t->unk && id >= 0) {
                e->syms[k - 1].n += (uint32_t)l;
                i += l;
                continue;
            }
        }
        e->syms[k] = (ifd__sym_t){id, (int32_t)k - 1, (int32_t)k + 1, (uint32_t)i, (uint32_t)l};
        k++;
        i += l;
    }
    if (k == 0)
        return 0;
    e->syms[k - 1].next = -1;
    return ifd__bpe_merge(e, k);
}

typedef int (*ifd__word_fn)(ifd__enc_t *e, const char *w, size_t n);

/* Regex pass `level` over base[start..end): matches and the gaps between them
 * both become pieces for the next pass (HF "Isolated"); the last pass hands
 * each piece to `word`. */
static int ifd__pretok(ifd__enc_t *e, const char *base, size_t start, size_t end, int level,
                       ifd__word_fn word)
{
    const ifd_tokenizer_t *t = e->t;
    if (level == t->n_re)
        return word(e, base + start, end - start);
    int rc;
    size_t gap = start, from = start;
    while (from < end) {
        int m = pcre2_match(t->re[level], (PCRE2_SPTR)(base + start), end - start, from - start, 0,
                            e->md, NULL);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(m, msg, sizeof msg);
            IFD_ERROR("tokenizer: pcre2_match: %s", (const char *)msg);
            return IFD_EINTERNAL;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t ms = start + ov[0], me = start + ov[1];
        if (me <= ms) { /* empty match: no piece; search on from the next byte */
            from = ms + 1;
            continue;
        }
        if (ms > gap && (rc = ifd__pretok(e, base, gap, ms, level + 1, word)))
            return rc;
        if ((rc = ifd__pretok(e, base, ms, me, level + 1, word)))
            return rc;
        gap = from = me;
    }
    if (gap < end && (rc = ifd__pretok(e, base, gap, end, level + 1, word)))
        return rc;
    return 0;
}

/* ---- SentencePiece (llama.cpp llm_tokenizer_spm) ---------------------------------------- */

static inline uint32_t ifd__score_order(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* monotone in f */
    return ~u;                                      /* higher score pops first */
}

static int ifd__spm_try(ifd__enc_t *e, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return 0;
    const ifd__sym_t *L = &e->syms[l], *R = &e->syms[r];
    ifd_token_t id = ifd__tok_lookup(e->t, e->buf + L->start, L->n + R->n);
    if (id < 0)
        return 0;
    ifd__hent_t h = {((uint64_t)ifd__score_order(e->t->toks[id].score) << 32) | (uint32_t)l, r,
                     (int32_t)(L->n + R->n), 0, 0};
    return ifd__heap_push(e, h);
}

static int ifd__spm_session(ifd__enc_t *e, size_t n)
{
    const ifd_tokenizer_t *t = e->t;
    int rc;
    if ((rc = ifd__reserve((void **)&e->syms, &e->syms_cap, n, sizeof *e->syms)))
        return rc;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t l = ifd__char_len((const uint8_t *)e->buf + i, n - i);
        e->syms[k] = (ifd__sym_t){0, (int32_t)k - 1, (int32_t)k + 1, (uint32_t)i, (uint32_t)l};
        k++;
        i += l;
    }
    if (k == 0)
        return 0;
    e->syms[k - 1].next = -1;
    e->heap_n = 0;
    for (size_t i = 1; i < k; i++)
        if ((rc = ifd__spm_try(e, (int32_t)i - 1, (int32_t)i)))
            return rc;
    while (e->heap_n) {
        ifd__hent_t h = ifd__heap_pop(e);
        int32_t l = (int32_t)(uint32_t)h.key, r = h.right;
        ifd__sym_t *L = &e->syms[l], *R = &e->syms[r];
        if (L->n == 0 || R->n == 0 || (int32_t)(L->n + R->n) != h.lid)
            continue;
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0)
            e->syms[R->next].prev = l;
        if ((rc = ifd__spm_try(e, L->prev, l)) || (rc = ifd__spm_try(e, l, L->next)))
            return rc;
    }
    for (int32_t i = 0; i >= 0; i = e->syms[i].next) {
        const ifd__sym_t *s = &e->syms[i];
        ifd_token_t id = ifd__tok_lookup(t, e->buf + s->start, s->n);
        if (id >= 0) {
            if ((rc = ifd__emit(e, id)))
                return rc;
            continue;
        }
        for (uint32_t j = 0; j < s->n; j++) {
            ifd_token_t b = t->byte_tok[(uint8_t)e->buf[s->start + j]];
            if (b < 0)
                b = t->unk;
            if (b >= 0 && (rc = ifd__emit(e, b)))
                return rc;
        }
    }
    return 0;
}

/* Normalises a raw fragment into e->buf: optional leading space, ' ' → ▁. */
static int ifd__spm_normalize(ifd__enc_t *e, const char *s, size_t n, bool prefix, size_t *len)
{
    int rc = ifd__reserve((void **)&e->buf, &e->buf_cap, (n + 1) * 3 + 1, 1);
    if (rc)
        return rc;
    size_t o = 0;
    if (prefix) {
        memcpy(e->buf, "\xE2\x96\x81", 3);
        o = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(e->buf + o, "\xE2\x96\x81", 3);
            o += 3;
        } else {
            e->buf[o++] = s[i];
        }
    }
    *len = o;
    return 0;
}

static int ifd__encode_raw(ifd__enc_t *e, const char *s, size_t n, bool prev_special)
{
    const ifd_tokenizer_t *t = e->t;
    size_t len;
    int rc;
    switch (t->algo) {
    case IFD__ALGO_SPM_SCORES:
        if ((rc = ifd__spm_normalize(e, s, n, t->add_space_prefix && prev_special, &len)))
            return rc;
        return ifd__spm_session(e, len);
    case IFD__ALGO_BPE_CHARS: {
        if (t->space_to_meta) {
            if ((rc = ifd__spm_normalize(e, s, n, t->add_space_prefix && prev_special, &len)))
                return rc;
        } else {
            if ((rc = ifd__reserve((void **)&e->buf, &e->buf_cap, n + 1, 1)))
                return rc;
            memcpy(e->buf, s, n);
            len = n;
        }
        /* the word function reads its piece and never writes e->buf */
        return ifd__pretok(e, e->buf, 0, len, 0, ifd__bpe_chars_word);
    }
    case IFD__ALGO_BPE_BYTES:
    default:
        return ifd__pretok(e, s, 0, n, 0, ifd__bpe_bytes_word);
    }
}

/* ---- special-token partition ------------------------------------------------------------- */

typedef struct {
    uint32_t pos;
    int32_t id;
} ifd__occ_t;

static int ifd__cmp_cand(const void *a, const void *b, void *ctx)
{
    const ifd_tokenizer_t *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->toks[x].len, ly = t->toks[y].len;
    if (lx != ly)
        return lx > ly ? -1 : 1; /* longest token first */
    return (x > y) - (x < y);
}

static int ifd__cmp_occ_pos(const void *a, const void *b)
{
    const ifd__occ_t *x = a, *y = b;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static bool ifd__is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static bool ifd__overlaps(const ifd_span_t *plain, size_t n_plain, size_t a, size_t b)
{
    /* spans are sorted: binary search the first span ending after a */
    size_t lo = 0, hi = n_plain;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (plain[mid].off + plain[mid].len <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n_plain && plain[lo].off < b && plain[lo].len > 0;
}

/* Adds id to the set: 0 when added, 1 when it was there, IFD_ENOMEM. */
static int ifd__seen_add(ifd_hash_t *seen, int32_t id)
{
    uint64_t hv = ifd_hash_u64((uint64_t)id);
    uint32_t it = ifd_hash_first(seen, hv);
    for (int32_t v; (v = ifd_hash_next(seen, hv, &it)) >= 0;)
        if (v == id)
            return 1;
    return ifd_hash_insert(seen, hv, id);
}

/* The special-token partition's per-call memory (freed by the caller). */
typedef struct {
    int32_t *cand; /* the eligible tokens that occur, distinct ids */
    size_t n_cand, cand_cap;
    uint8_t *mask;   /* [len]: 0 raw, 1 token start, 2 token continuation, 3 stripped */
    ifd__occ_t *acc; /* the accepted occurrences */
    size_t n_acc, acc_cap;
} ifd__parts_t;

/* Step 1: which eligible special tokens occur in the text at all. */
static int ifd__special_candidates(const ifd_tokenizer_t *t, const char *text, size_t len,
                                   bool parse, ifd__parts_t *p)
{
    ifd_hash_t seen = {0}; /* the candidate ids (values: the ids themselves) */
    uint8_t want = parse ? 3 : 1;
    int rc = 0;
    for (size_t i = 0; i < len && rc >= 0; i++) {
        if (!(t->first_byte[(uint8_t)text[i]] & want))
            continue;
        int32_t node = 0;
        for (size_t j = i; j < len; j++) {
            if ((node = ifd__trie_child(t, node, (uint8_t)text[j])) < 0)
                break;
            int32_t id = t->node_tok[node];
            if (id < 0 || (!parse && t->toks[id].type != IFD_TOKTYPE_USER_DEFINED))
                continue;
            if ((rc = ifd__seen_add(&seen, id)) < 0)
                break;
            if (rc == 0) {
                if ((rc = ifd__reserve((void **)&p->cand, &p->cand_cap, p->n_cand + 1,
                                       sizeof *p->cand)))
                    break;
                p->cand[p->n_cand++] = id;
            }
            rc = 0;
        }
    }
    ifd_hash_close(&seen);
    return rc < 0 ? rc : 0;
}

/* Step 2, llama.cpp's order: longest token first (then lowest id); each
 * token's occurrences left to right, taken while their bytes are all still
 * raw (and, for control tokens, outside the plain spans); marks p->mask. */
static int ifd__special_accept(const ifd_tokenizer_t *t, const char *text, size_t len,
                               const ifd_span_t *plain, size_t n_plain, ifd__parts_t *p)
{
    qsort_r(p->cand, p->n_cand, sizeof *p->cand, ifd__cmp_cand, (void *)t);
    uint8_t *mask = p->mask = calloc(len, 1);
    if (!mask)
        return IFD_ENOMEM;
    for (size_t k = 0; k < p->n_cand; k++) {
        int32_t id = p->cand[k];
        const char *tt = t->pool + t->toks[id].off;
        size_t l = t->toks[id].len, pos = 0;
        bool user = t->toks[id].type == IFD_TOKTYPE_USER_DEFINED;
        uint8_t attr = t->toks[id].attr;
        const char *hit;
        while (pos + l <= len && (hit = memmem(text + pos, len - pos, tt, l)) != NULL) {
            size_t q = (size_t)(hit - text);
            size_t busy = q + l; /* last non-raw byte of [q, q+l), if any */
            while (busy > q && mask[busy - 1] == 0)
                busy--;
            if (busy > q) { /* no occurrence can start before the next raw byte */
                pos = busy;
                while (pos < len && mask[pos] != 0)
                    pos++;
                continue;
            }
            if (!user && ifd__overlaps(plain, n_plain, q, q + l)) {
                pos = q + 1;
                continue;
            }
            mask[q] = 1;
            memset(mask + q + 1, 2, l - 1);
            if (attr & IFD__ATTR_LSTRIP)
                for (size_t j = q; j > 0 && mask[j - 1] == 0 && ifd__is_space(text[j - 1]); j--)
                    mask[j - 1] = 3;
            if (attr & IFD__ATTR_RSTRIP)
                for (size_t j = q + l; j < len && mask[j] == 0 && ifd__is_space(text[j]); j++)
                    mask[j] = 3;
            int rc = ifd__reserve((void **)&p->acc, &p->acc_cap, p->n_acc + 1, sizeof *p->acc);
            if (rc)
                return rc;
            p->acc[p->n_acc++] = (ifd__occ_t){(uint32_t)q, id};
            pos = q + l;
        }
    }
    return 0;
}

/* Step 3: walk the text; raw runs go to the model, accepted tokens out as
 * their ids, stripped spaces nowhere. */
static int ifd__special_walk(ifd__enc_t *e, const char *text, size_t len, ifd__parts_t *p)
{
    const ifd_tokenizer_t *t = e->t;
    const uint8_t *mask = p->mask;
    bool prev_special = true;
    int rc;
    if (p->n_acc > 1)
        qsort(p->acc, p->n_acc, sizeof *p->acc, ifd__cmp_occ_pos);
    size_t i = 0, next_acc = 0;
    while (i < len) {
        if (mask[i] == 0) {
            size_t j = i;
            while (j < len && mask[j] == 0)
                j++;
            if ((rc = ifd__encode_raw(e, text + i, j - i, prev_special)))
                return rc;
            prev_special = false;
            i = j;
        } else if (mask[i] == 1) {
            IFD_ASSERT(next_acc < p->n_acc && p->acc[next_acc].pos == i);
            if ((rc = ifd_tokens_push(e->out, p->acc[next_acc].id)))
                return rc;
            i += t->toks[p->acc[next_acc].id].len;
            next_acc++;
            prev_special = true;
        } else {
            i++;
        }
    }
    return 0;
}

int ifd_tokenizer_encode_spans(const ifd_tokenizer_t *t, const char *text, size_t len,
                               unsigned flags, const ifd_span_t *plain, size_t n_plain,
                               ifd_tokens_t *out)
{
    size_t n0 = out->n;
    ifd__enc_t e = {.t = t, .out = out};
    ifd__parts_t p = {0};
    int rc = 0;
    bool parse = (flags & IFD_TOK_PARSE_SPECIAL) != 0;

    if (t->n_re) {
        e.md = pcre2_match_data_create(4, NULL);
        if (!e.md)
            return IFD_ENOMEM;
    }
    if ((flags & IFD_TOK_ADD_SPECIAL) && t->add_bos && t->bos >= 0 &&
        (rc = ifd_tokens_push(out, t->bos)))
        goto fail;
    if (len && (parse || t->n_user_defined) &&
        (rc = ifd__special_candidates(t, text, len, parse, &p)))
        goto fail;
    if (p.n_cand == 0) {
        if (len && (rc = ifd__encode_raw(&e, text, len, true)))
            goto fail;
    } else {
        if (len > INT32_MAX) {
            rc = IFD_ETOOBIG;
            goto fail;
        }
        if ((rc = ifd__special_accept(t, text, len, plain, n_plain, &p)) ||
            (rc = ifd__special_walk(&e, text, len, &p)))
            goto fail;
    }
    if ((flags & IFD_TOK_ADD_SPECIAL) && t->add_eos && t->eos >= 0 &&
        (rc = ifd_tokens_push(out, t->eos)))
        goto fail;
    goto done;
fail:
    out->n = n0;
done:
    free(p.mask);
    free(p.cand);
    free(p.acc);
    free(e.syms);
    free(e.heap);
    free(e.buf);
    if (e.md)
        pcre2_match_data_free(e.md);
    return rc;
}

int ifd_tokenizer_encode(const ifd_tokenizer_t *t, const char *text, size_t len, unsigned flags,
                         ifd_tokens_t *out)
{
    return ifd_tokenizer_encode_spans(t, text, len, flags, NULL, 0, out);
}
