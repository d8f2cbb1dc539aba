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

/* Open-addressing u64 → (i32, i32) map; keys never equal UINT64_MAX. */
typedef struct {
    uint64_t *keys;
    int32_t *v1;
    int32_t *v2;
    size_t mask; /* capacity - 1, capacity a power of two */
    size_t count;
} ifd__map_t;

struct ifd_tokenizer {
    ifd_tokmodel_t model;
    ifd__algo_t algo;
    char pre[64];

    int32_t n_vocab;
    ifd__tok_t *toks;
    char *pool; /* raw texts */
    size_t pool_len, pool_cap;
    char *ppool; /* decoded pieces */

    /* raw text → id (last id wins for duplicates, as in llama.cpp) */
    int32_t *text_ht;
    size_t text_ht_mask;

    /* (left id << 32 | right id) → (rank, result id) */
    ifd__map_t merges;

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

    /* special-token trie: (node << 8 | byte) → (child node, -); node_tok[node] */
    ifd__map_t trie;
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

int ifd__map_init(ifd__map_t *m, size_t n);
void ifd__map_free(ifd__map_t *m);
/* Inserts key unless present: 1 when it was present (untouched), 0 when
 * inserted, IFD_ENOMEM. */
int ifd__map_put(ifd__map_t *m, uint64_t key, int32_t v1, int32_t v2);

static inline size_t ifd__mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

static inline bool ifd__map_get(const ifd__map_t *m, uint64_t key, int32_t *v1, int32_t *v2)
{
    if (!m->keys)
        return false;
    size_t j = ifd__mix(key) & m->mask;
    while (m->keys[j] != UINT64_MAX) {
        if (m->keys[j] == key) {
            *v1 = m->v1[j];
            if (v2)
                *v2 = m->v2[j];
            return true;
        }
        j = (j + 1) & m->mask;
    }
    return false;
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
