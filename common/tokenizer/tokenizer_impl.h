/*
 * tokenizer_impl.h — internals shared by the tokenizer's source files
 * (tokenizer.c: tables and decoding; tokenizer_encode.c: encoding;
 * tokenizer_load.c: the GGUF and Hugging Face loaders). Not part of the public API: nothing outside
 * common/tokenizer*.c includes it.
 *
 * A loader fills an ifd_tokenizer_t through the ifd__tok_* builder calls in
 * this order: alloc → set_vocab_size → set_token (every id) → index →
 * add_merge… → set_pretok → finish. After finish the object is immutable.
 */
#ifndef IFD_TOKENIZER_IMPL_H
#define IFD_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdbool.h>
#include <stdint.h>

#include "hash.h"
#include "tokenizer.h"

/* How raw-text fragments are turned into ids. */
typedef enum {
    IFD__ALGO_BPE_BYTES = 1, /* byte-level BPE, rank merges (GGUF gpt2, HF ByteLevel) */
    IFD__ALGO_SPM_SCORES,    /* llama.cpp SPM: score-ordered merges over UTF-8 chars */
    IFD__ALGO_BPE_CHARS,     /* HF BPE over chars with byte fallback (Llama 2/Gemma json) */
} ifd__algo_t;

#define IFD__ATTR_LSTRIP 1u
#define IFD__ATTR_RSTRIP 2u

#define IFD__MAX_RE 6

typedef struct {
    uint32_t off; /* raw text in pool */
    uint32_t len;
    uint32_t poff; /* decoded piece in piece pool */
    uint32_t plen;
    float score;
    uint8_t type; /* ifd_toktype_t */
    uint8_t attr; /* IFD__ATTR_* */
} ifd__tok_t;

/*
 * The BPE merges: pair (left id << 32 | right id) → (rank, result id). Like
 * the text index, not an ifd_hash_t, on purpose: the encoder looks up every
 * adjacent pair (a third of byte-level encoding time, latency-bound), and
 * an ifd_hash_t over an array of merges adds a second, dependent cache miss
 * per hit (slot → merge record); that measured ~7% slower encoding
 * (bench/bench_tokenizer, SmolLM2 vocabulary), and so did one array of
 * {pair, rank, result} slots (twice the bytes touched by the misses). Here
 * the pairs have an array of their own, probed the way common/hash.h probes
 * (linear, power-of-two capacity, load ≤ 1/2, hash ifd__merge_hash), and rank
 * and result sit at the same index in two more arrays: a miss reads only
 * pairs, and a hit's other loads do not wait for the first. An empty slot
 * holds IFD__MERGE_EMPTY, which no pair of ids (< 2^31) equals.
 */
#define IFD__MERGE_EMPTY UINT64_MAX

typedef struct {
    uint64_t *pair; /* NULL before the first merge */
    int32_t *rank;  /* [capacity] */
    int32_t *res;   /* [capacity] */
    uint32_t mask;  /* capacity - 1 */
    uint32_t count; /* merges so far: the next rank */
} ifd__merges_t;

struct ifd_tokenizer {
    ifd_tokmodel_t model;
    ifd__algo_t algo;
    char pre[64];

    int32_t n_vocab;
    ifd__tok_t *toks;
    char *pool; /* raw texts */
    size_t pool_len, pool_cap;
    char *ppool; /* decoded pieces */

    /* raw text → id (last id wins for duplicates, as in llama.cpp): open
     * addressing over ifd_hash_bytes of the text, probed as common/hash.h
     * probes (linear, power-of-two capacity, load ≤ 1/2), each slot just the
     * id (-1: empty). Why not an ifd_hash_t: SentencePiece encoding looks up
     * every adjacent pair of symbols, and an ifd_hash_t's 8-byte slots (tag
     * and value) double the index (4 MiB for Gemma 3's 262k tokens); that
     * measured ~6% slower encoding (bench/bench_tokenizer, Gemma 3 270M). */
    int32_t *text_slots;
    uint32_t text_mask; /* capacity - 1 */

    ifd__merges_t merges; /* see ifd__merge_get */

    /* BPE_BYTES: id of each byte's stand-in character; SPM/CHARS: <0xNN>
     * byte-fallback id. IFD_TOKEN_NONE when absent. */
    ifd_token_t byte_tok[256];

    pcre2_code *re[IFD__MAX_RE];
    int n_re;
    bool ignore_merges;

    /* BPE_CHARS (HF SentencePiece-like) options */
    bool byte_fallback;
    bool fuse_unk;
    bool space_to_meta; /* replace ' ' by U+2581 before the model */

    ifd_token_t bos, eos, eot, eom, unk, pad;
    bool add_bos, add_eos, add_space_prefix;
    bool clean_spaces; /* recorded (llama.cpp), not applied: decode stays lossless */

    /* special-token trie: node 0 is the root; every other node n is one byte
     * below its parent, node_key[n] = parent << 8 | byte, indexed by that key
     * (ifd__trie_child); node_tok[n] is the token whose text ends there, or -1 */
    ifd_hash_t trie_index;
    uint64_t *node_key;
    int32_t *node_tok;
    size_t n_nodes;
    uint8_t first_byte[256]; /* bit 0: some USER_DEFINED starts here; bit 1: control */
    size_t n_user_defined;

    ifd_token_t *eog;
    size_t n_eog;
    /* generation_config.json's eos_token_id list (HF loader), added to eog */
    ifd_token_t gen_eos[8];
    size_t n_gen_eos;

    char *chat_template;
};

/* ---- shared helpers (tokenizer.c) ---- */

static inline uint64_t ifd__merge_pair(int32_t a, int32_t b)
{
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

/*
 * The hash of the merge table's pairs: the first round of ifd_hash_u64's
 * finalizer. Why not ifd_hash_u64: the merge lookup is the encoder's hottest
 * path and the hash sits on its critical path; the second multiply–xorshift
 * round made encoding ~10% slower (bench/bench_tokenizer, SmolLM2
 * vocabulary), while one round already mixes every key bit into the low bits
 * the table uses.
 */
static inline uint64_t ifd__merge_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

/* The merge of ids (a, b): true with its rank and result id. The encoder's
 * hot path (one call per adjacent pair), hence inline. */
static inline bool ifd__merge_get(const ifd_tokenizer_t *t, int32_t a, int32_t b, int32_t *rank,
                                  int32_t *res)
{
    const ifd__merges_t *m = &t->merges;
    if (!m->pair)
        return false;
    uint64_t pair = ifd__merge_pair(a, b);
    for (uint32_t j = (uint32_t)ifd__merge_hash(pair) & m->mask;; j = (j + 1) & m->mask) {
        if (m->pair[j] == pair) {
            *rank = m->rank[j];
            *res = m->res[j];
            return true;
        }
        if (m->pair[j] == IFD__MERGE_EMPTY)
            return false;
    }
}

/* The trie node one byte below node, or -1. */
static inline int32_t ifd__trie_child(const ifd_tokenizer_t *t, int32_t node, uint8_t byte)
{
    uint64_t key = ((uint64_t)(uint32_t)node << 8) | byte, hv = ifd_hash_u64(key);
    uint32_t it = ifd_hash_first(&t->trie_index, hv);
    for (int32_t c; (c = ifd_hash_next(&t->trie_index, hv, &it)) >= 0;)
        if (t->node_key[c] == key)
            return c;
    return -1;
}

/* builder */
ifd_tokenizer_t *ifd__tok_alloc(ifd_tokmodel_t model, ifd__algo_t algo);
int ifd__tok_set_vocab_size(ifd_tokenizer_t *t, int32_t n);
int ifd__tok_set_token(ifd_tokenizer_t *t, int32_t id, const char *text, size_t len, float score,
                       ifd_toktype_t type);
/* Builds the text index; call once every token is set. */
int ifd__tok_index(ifd_tokenizer_t *t);
/* 0 when added, 1 when skipped (a side or the result is not a token, or a
 * duplicate), IFD_ENOMEM. */
int ifd__tok_add_merge(ifd_tokenizer_t *t, const char *a, size_t alen, const char *b, size_t blen);
/* Sets the pre-tokenizer regex passes (applied in order, isolated). Patterns
 * use \s/\S with Unicode White_Space meaning (rewritten for PCRE2). */
int ifd__tok_set_pretok(ifd_tokenizer_t *t, const char *const *res, int n, char *errbuf,
                        size_t errlen);
/* Looks up a GGUF pre type; 0, or IFD_ENOTSUP naming it. Sets regexes and
 * the type's flag defaults (ignore_merges, add_bos, clean_spaces). */
int ifd__tok_set_pre_type(ifd_tokenizer_t *t, const char *name, char *errbuf, size_t errlen);
/* Computes eot/eog, pieces, trie; forces eog-like tokens to CONTROL. */
int ifd__tok_finish(ifd_tokenizer_t *t, const char *general_name);

ifd_token_t ifd__tok_lookup(const ifd_tokenizer_t *t, const char *text, size_t len);

/* GPT-2 bytes_to_unicode: the code point standing for byte b. */
uint32_t ifd__byte_to_cp(uint8_t b);

#endif
