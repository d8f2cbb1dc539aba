/*
 * tokenizer.h — text ↔ token ids for the vocabularies inferd serves, matching
 * the reference tokenizers (llama.cpp / Hugging Face tokenizers) exactly.
 *
 * Two models share one internal representation, loaded either from GGUF
 * metadata (tokenizer.ggml.*) or from a Hugging Face tokenizer.json (+ the
 * tokenizer_config.json next to it):
 *   - byte-level BPE ("gpt2"): GPT-2 byte↔unicode alphabet, merges by rank,
 *     pre-tokenizer regexes (chosen by tokenizer.ggml.pre) run by PCRE2;
 *   - SentencePiece-style BPE ("llama"): "▁" for spaces, merges by score,
 *     optional space prefix, <0xNN> byte fallback, unknown token.
 * Before either model runs, the text is partitioned around special tokens:
 * USER_DEFINED tokens are always cut out; CONTROL/UNKNOWN tokens only when
 * the caller passes IFD_TOK_PARSE_SPECIAL, and never inside a byte range the
 * caller marks as plain (user) text — so a user cannot forge <|im_start|>.
 *
 * Ownership: ifd_tokenizer_create_* returns an object the caller frees with
 * ifd_tokenizer_destroy. It copies everything it needs from the GGUF handle
 * or JSON files, so those may be closed right after loading. Pointers the
 * getters return live as long as the tokenizer.
 *
 * Threading: a loaded tokenizer is immutable; every function taking a
 * `const ifd_tokenizer_t *` may run concurrently from any number of threads
 * (scratch memory is per call). An ifd_detok_t belongs to one thread at a time.
 *
 * Errors: 0 or a negative IFD_E* code; loaders also write a one-line reason
 * into errbuf (when not NULL) — e.g. an unknown tokenizer.ggml.pre names it.
 */
#ifndef IFD_TOKENIZER_H
#define IFD_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "modelfile/gguf.h"
#include "modelfile/model_source.h"

typedef int32_t ifd_token_t;

#define IFD_TOKEN_NONE ((ifd_token_t)-1)

/* Token types, numbered as tokenizer.ggml.token_type stores them. */
typedef enum {
    IFD_TOKTYPE_UNDEFINED = 0,
    IFD_TOKTYPE_NORMAL = 1,
    IFD_TOKTYPE_UNKNOWN = 2,
    IFD_TOKTYPE_CONTROL = 3,
    IFD_TOKTYPE_USER_DEFINED = 4,
    IFD_TOKTYPE_UNUSED = 5,
    IFD_TOKTYPE_BYTE = 6,
} ifd_toktype_t;

typedef enum {
    IFD_TOKMODEL_BPE = 1, /* byte-level BPE, GGUF "gpt2" */
    IFD_TOKMODEL_SPM = 2, /* SentencePiece-style BPE, GGUF "llama" */
} ifd_tokmodel_t;

/* A growable list of token ids. Zero-initialise it ({0}); encode functions
 * append to it; free with ifd_tokens_free. Not thread-safe. */
typedef struct {
    ifd_token_t *ids;
    size_t n;
    size_t cap;
} ifd_tokens_t;

/* Appends one id (grows by doubling). 0 or IFD_ENOMEM. */
int ifd_tokens_push(ifd_tokens_t *v, ifd_token_t id);
void ifd_tokens_free(ifd_tokens_t *v);

/* A byte range [off, off + len) of a text. */
typedef struct {
    size_t off;
    size_t len;
} ifd_span_t;

typedef struct ifd_tokenizer ifd_tokenizer_t;

/* ---- loading --------------------------------------------------------------- */

/*
 * Loads the vocabulary of an open GGUF file (tokenizer.ggml.model "gpt2" or
 * "llama", .pre, .tokens, .scores, .token_type, .merges, the special ids,
 * add_bos/add_eos/add_space_prefix, tokenizer.chat_template).
 * Returns 0; IFD_ENOTFOUND (no tokenizer in the file); IFD_ENOTSUP (another
 * tokenizer model, or an unknown pre type — named in errbuf); IFD_EFORMAT
 * (inconsistent arrays, a merge naming a missing token); IFD_ENOMEM.
 */
int ifd_tokenizer_create_gguf(ifd_tokenizer_t **out, const ifd_gguf_t *g, char *errbuf,
                              size_t errlen);

/* Opens `path` with ifd_gguf_open, loads, closes it. Same errors (+ the
 * GGUF reader's). */
int ifd_tokenizer_create_gguf_file(ifd_tokenizer_t **out, const char *path, char *errbuf,
                                   size_t errlen);

/*
 * Loads a Hugging Face tokenizer: `path` is a model directory holding
 * tokenizer.json (and optionally tokenizer_config.json), or the path of a
 * tokenizer.json whose directory may hold tokenizer_config.json. The
 * pre-tokenizer/normalizer/decoder are mapped onto the same pre types and
 * flags as the GGUF loader (what does not map is IFD_ENOTSUP, named). The
 * chat template comes from tokenizer_config.json, else chat_template.jinja in
 * the same directory; generation_config.json's eos_token_id ids there (when
 * present) join the end-of-generation set.
 */
int ifd_tokenizer_create_hf(ifd_tokenizer_t **out, const char *path, char *errbuf, size_t errlen);

/* Either of the above, by looking at `path`: a file starting with the GGUF
 * magic → GGUF; a directory or any other file → Hugging Face. */
int ifd_tokenizer_create_path(ifd_tokenizer_t **out, const char *path, char *errbuf, size_t errlen);

/* The tokenizer of an open model source: its GGUF metadata, or the HF
 * directory's tokenizer.json (+ tokenizer_config.json, chat_template.jinja,
 * generation_config.json's eos ids). Same results as ifd_tokenizer_create_gguf
 * / _hf. The source is only read and may be closed afterwards. */
int ifd_tokenizer_create_source(ifd_tokenizer_t **out, const ifd_model_source_t *src,
                                char *errbuf, size_t errlen);

/* NULL is a no-op. */
void ifd_tokenizer_destroy(ifd_tokenizer_t *t);

/* ---- vocabulary -------------------------------------------------------------- */

int32_t ifd_tokenizer_n_vocab(const ifd_tokenizer_t *t);
ifd_tokmodel_t ifd_tokenizer_model(const ifd_tokenizer_t *t);
/* The pre type name as given ("smollm", "llama-bpe", …); "default" for SPM. */
const char *ifd_tokenizer_pre(const ifd_tokenizer_t *t);

/* Special ids; IFD_TOKEN_NONE when the vocabulary has none. */
ifd_token_t ifd_tokenizer_bos(const ifd_tokenizer_t *t);
ifd_token_t ifd_tokenizer_eos(const ifd_tokenizer_t *t);
ifd_token_t ifd_tokenizer_eot(const ifd_tokenizer_t *t); /* explicit or auto-detected */
ifd_token_t ifd_tokenizer_unk(const ifd_tokenizer_t *t);
ifd_token_t ifd_tokenizer_pad(const ifd_tokenizer_t *t);
bool ifd_tokenizer_add_bos(const ifd_tokenizer_t *t);

/* End-of-generation ids (llama.cpp's set: eos, eot, eom and tokens whose text
 * is <|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>,
 * <|eom_id|>, <EOT>), sorted ascending. *ids lives as long as t. */
size_t ifd_tokenizer_eog_ids(const ifd_tokenizer_t *t, const ifd_token_t **ids);
bool ifd_tokenizer_is_eog(const ifd_tokenizer_t *t, ifd_token_t id);

/* Type of id; IFD_TOKTYPE_UNDEFINED when out of range. */
ifd_toktype_t ifd_tokenizer_token_type(const ifd_tokenizer_t *t, ifd_token_t id);
/* Raw vocabulary text of id (byte-mapped alphabet for BPE, "▁" for SPM),
 * not NUL-terminated; NULL when out of range. */
const char *ifd_tokenizer_token_text(const ifd_tokenizer_t *t, ifd_token_t id, size_t *len);
/* Id whose raw vocabulary text is exactly text[0..len), or IFD_TOKEN_NONE. */
ifd_token_t ifd_tokenizer_find(const ifd_tokenizer_t *t, const char *text, size_t len);

/* The Jinja chat template from the file (NUL-terminated), or NULL. */
const char *ifd_tokenizer_chat_template(const ifd_tokenizer_t *t);

/* ---- encoding ------------------------------------------------------------------ */

/* Encode flags. */
#define IFD_TOK_ADD_SPECIAL   1u /* prepend BOS / append EOS as the vocab asks */
#define IFD_TOK_PARSE_SPECIAL 2u /* match CONTROL/UNKNOWN token texts in the input */

/*
 * Tokenizes text[0..len) (UTF-8; invalid bytes are encoded as bytes, never
 * rejected) and APPENDS the ids to *out. With IFD_TOK_PARSE_SPECIAL off (what
 * user text and the llama.cpp vocab tests use) control tokens are never
 * produced. Returns 0, IFD_ENOMEM, or IFD_EINTERNAL (regex engine failure,
 * logged). On error out->n is restored to its value at entry.
 */
int ifd_tokenizer_encode(const ifd_tokenizer_t *t, const char *text, size_t len, unsigned flags,
                         ifd_tokens_t *out);

/*
 * As ifd_tokenizer_encode, but with IFD_TOK_PARSE_SPECIAL a special token is
 * recognised only where its match overlaps none of the `plain` spans
 * (sorted, non-overlapping byte ranges of text, e.g. message contents in a
 * rendered chat prompt). Plain text is otherwise tokenized together with its
 * neighbours exactly as the reference tokenizer would, so the ids equal the
 * reference's for any input that contains no forged special text.
 */
int ifd_tokenizer_encode_spans(const ifd_tokenizer_t *t, const char *text, size_t len,
                               unsigned flags, const ifd_span_t *plain, size_t n_plain,
                               ifd_tokens_t *out);

/* ---- decoding ------------------------------------------------------------------ */

/* Decode flags. */
#define IFD_DETOK_RENDER_SPECIAL 1u /* print CONTROL/UNKNOWN tokens' text (else empty) */
#define IFD_DETOK_KEEP_BOS       2u /* keep a leading BOS (else dropped when the vocab adds BOS) */

/*
 * Bytes of one token, out of context: BPE text mapped back to bytes, SPM
 * "▁" → " ", <0xNN> → that single byte, CONTROL → "" unless
 * IFD_DETOK_RENDER_SPECIAL. No leading-space rule. Writes at most cap bytes
 * (no NUL) and returns the full length (like snprintf, so a short buffer can
 * be retried), or IFD_ERANGE for an id out of range.
 */
int ifd_tokenizer_token_bytes(const ifd_tokenizer_t *t, ifd_token_t id, unsigned flags, char *buf,
                              size_t cap);

/*
 * Decodes a whole id sequence into a malloc'ed, NUL-terminated string
 * (*out, caller frees; *out_len excludes the NUL; may contain invalid UTF-8
 * if the ids do). Drops a leading BOS when the vocabulary adds one (unless
 * IFD_DETOK_KEEP_BOS; a dropped BOS renders nothing anyway unless
 * IFD_DETOK_RENDER_SPECIAL) and, for
 * SPM vocabularies with add_space_prefix, strips one leading space of the
 * first text token, so decode(encode(x)) == x. Returns 0, IFD_ERANGE (an id
 * out of range), IFD_ENOMEM.
 */
int ifd_tokenizer_decode(const ifd_tokenizer_t *t, const ifd_token_t *ids, size_t n, unsigned flags,
                         char **out, size_t *out_len);

/*
 * Incremental (streaming) detokenizer. Push ids one at a time; each push
 * returns the bytes that have become final: only complete UTF-8 sequences are
 * ever returned (a multi-byte character split across tokens, including
 * byte-fallback <0xNN> tokens, comes out whole once its last byte arrives),
 * and SPM's leading-space rule applies only to the first text of the stream.
 * The concatenation of every push plus the final flush equals
 * ifd_tokenizer_decode of all ids, except that bytes which can never form
 * valid UTF-8 come out as U+FFFD (so the stream is always valid UTF-8).
 *
 * Ownership: create/destroy; the tokenizer must outlive it. The returned
 * *text points into the detokenizer and is valid until the next call on it.
 */
typedef struct ifd_detok ifd_detok_t;

int ifd_detok_create(ifd_detok_t **out, const ifd_tokenizer_t *t, unsigned flags);
void ifd_detok_destroy(ifd_detok_t *d); /* NULL is a no-op */
/* Starts a new stream (same tokenizer and flags). */
void ifd_detok_reset(ifd_detok_t *d);
/* 0, IFD_ERANGE (id out of range, nothing consumed), IFD_ENOMEM. */
int ifd_detok_push(ifd_detok_t *d, ifd_token_t id, const char **text, size_t *len);
/* Ends the stream: returns held bytes, an unfinished sequence as U+FFFD. */
int ifd_detok_flush(ifd_detok_t *d, const char **text, size_t *len);

/* ---- commands (shared by `infer tokenize/detokenize` and the daemon) ---------- */

/*
 * Reads llama.cpp's vocabulary test format (cases separated by
 * "\n__ggml_vocab_test__\n", trailing separator) from `inp` and writes, per
 * case, one line " id id …" (the .out format) tokenized with no BOS and
 * special parsing off. Returns 0, or an error (logged).
 */
int ifd_tokenizer_run_vocab_test(const ifd_tokenizer_t *t, const char *inp, size_t len, FILE *out);

#endif
