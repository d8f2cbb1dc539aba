/*
 * image_prompt.h — Gemma 3's image placeholders in a prompt, expanded as
 * transformers' Gemma3Processor does (processing_gemma3.py: each
 * "<start_of_image>" of the text becomes full_image_sequence =
 * "\n\n<start_of_image>" + image_seq_length x "<image_soft_token>" +
 * "<end_of_image>\n\n", and the text is then tokenized whole), returning the
 * token ids and where each image's soft tokens lie (the spans the engine
 * takes: worker/engine.h, ifd_engine_image_t). docs/vision.md.
 *
 * The tokenizers split their input at special tokens and tokenize the
 * pieces between them on their own, so the pieces around each placeholder
 * are tokenized with their "\n\n" and the image's ids put between them:
 * the ids of the processor's text, also with a tokenizer that lacks
 * "<image_soft_token>" (Gemma 3 270M's has 262144 ids; the 4B's config puts
 * image_token_index at 262144, past them). A "<start_of_image>" in the
 * plain spans (user text) is no placeholder: it stays whatever the
 * tokenizer makes of it there.
 *
 * Ownership: everything is borrowed for the call; results are appended to
 * the caller's arrays. Threading: reentrant (the tokenizer is read only).
 */
#ifndef IFD_IMAGE_PROMPT_H
#define IFD_IMAGE_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* The ids an image's tokens take. */
typedef struct {
    ifd_token_t boi;  /* <start_of_image>: also the placeholder's text */
    ifd_token_t eoi;  /* <end_of_image> */
    ifd_token_t soft; /* <image_soft_token> (config image_token_index) */
    int32_t n_soft;   /* soft tokens per image (mm_tokens_per_image: 256) */
} ifd_image_prompt_t;

/* One image's soft tokens: ids start .. start + len - 1 of the output. */
typedef struct {
    int32_t start, len;
} ifd_image_pos_t;

/* Fills *ip for tokenizer t: boi and eoi looked up by their text, soft and
 * n_soft as given (n_soft >= 1, soft >= 0). IFD_ENOTSUP when t has no
 * "<start_of_image>" or "<end_of_image>" (not a Gemma 3 vocabulary),
 * IFD_EINVAL for bad soft / n_soft. */
int ifd_image_prompt_gemma3(const ifd_tokenizer_t *t, ifd_token_t soft, int32_t n_soft,
                            ifd_image_prompt_t *ip);

/*
 * Tokenizes text[0..len) as ifd_tokenizer_encode_spans does (flags, plain:
 * the spans where special text is not recognised, e.g. message contents),
 * with each "<start_of_image>" outside the plain spans expanded as the
 * processor does, and APPENDS the ids to *out and one ifd_image_pos_t per
 * image, in order, to spans[*n_spans ..] (positions in *out, counting
 * its ids at entry), advancing *n_spans. max_spans: spans' size. flags
 * must include IFD_TOK_PARSE_SPECIAL for placeholders to be expanded;
 * IFD_TOK_ADD_SPECIAL applies to the first piece only (Gemma's vocabulary
 * adds a BOS, no EOS). Returns 0,
 * IFD_ERANGE (more images than max_spans), IFD_EINVAL (plain spans
 * unsorted, overlapping or past len), IFD_ENOMEM, or the tokenizer's
 * errors; on error *out and *n_spans are as at entry.
 */
int ifd_image_prompt_encode(const ifd_tokenizer_t *t, const ifd_image_prompt_t *ip,
                            const char *text, size_t len, unsigned flags, const ifd_span_t *plain,
                            size_t n_plain, ifd_tokens_t *out, ifd_image_pos_t *spans,
                            size_t max_spans, size_t *n_spans);

#endif
