/*
 * image_prompt.c — Gemma 3's image placeholder expansion (image_prompt.h).
 *
 * The placeholders outside the plain spans cut the text into pieces; the
 * tokenizers split their input at special tokens and tokenize each piece on
 * its own (llama.cpp and Hugging Face alike), so piece k is tokenized as
 * "\n\n" (after a placeholder) + its text + "\n\n" (before one), and
 * between two pieces come <start_of_image>, the soft ids, <end_of_image>:
 * the ids of the processor's expanded text. A <start_of_image> the user's
 * text holds (a user-defined token, which the tokenizer matches anywhere)
 * stays a plain token of its piece.
 */
#include "image_prompt.h"

#include "error.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char ifd__boi_text[] = "<start_of_image>";
static const char ifd__eoi_text[] = "<end_of_image>";
static const char ifd__nl2[] = "\n\n";
#define IFD__LEN(s) (sizeof(s) - 1)

int ifd_image_prompt_gemma3(const ifd_tokenizer_t *t, ifd_token_t soft, int32_t n_soft,
                            ifd_image_prompt_t *ip)
{
    if (soft < 0 || n_soft < 1)
        return IFD_EINVAL;
    ip->boi = ifd_tokenizer_find(t, ifd__boi_text, IFD__LEN(ifd__boi_text));
    ip->eoi = ifd_tokenizer_find(t, ifd__eoi_text, IFD__LEN(ifd__eoi_text));
    ip->soft = soft;
    ip->n_soft = n_soft;
    return ip->boi == IFD_TOKEN_NONE || ip->eoi == IFD_TOKEN_NONE ? IFD_ENOTSUP : 0;
}

/* Byte offsets of the placeholders outside the plain spans, into *at
 * (malloc'ed; *n of them). */
static int ifd__find_placeholders(const char *text, size_t len, const ifd_span_t *plain,
                                  size_t n_plain, size_t **at, size_t *n)
{
    const size_t bl = IFD__LEN(ifd__boi_text);
    size_t cap = 0, k = 0;
    *at = NULL, *n = 0;
    for (size_t i = 0; i + bl <= len; i++) {
        while (k < n_plain && plain[k].off + plain[k].len <= i)
            k++;
        if (k < n_plain && plain[k].off < i + bl) { /* overlaps a plain span: skip it */
            i = plain[k].off + plain[k].len - 1;
            continue;
        }
        if (memcmp(text + i, ifd__boi_text, bl) != 0)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 4;
            size_t *p = realloc(*at, cap * sizeof *p);
            if (!p) {
                free(*at);
                *at = NULL;
                return IFD_ENOMEM;
            }
            *at = p;
        }
        (*at)[(*n)++] = i;
        i += bl - 1;
    }
    return 0;
}

static int ifd__check_plain(const ifd_span_t *plain, size_t n_plain, size_t len)
{
    for (size_t k = 0; k < n_plain; k++)
        if (plain[k].off > len || plain[k].len > len - plain[k].off ||
            (k > 0 && plain[k].off < plain[k - 1].off + plain[k - 1].len))
            return IFD_EINVAL;
    return 0;
}

/* Tokenizes piece k: "\n\n" (after a placeholder) + text[from, to) +
 * "\n\n" (before one), with the plain spans inside [from, to) shifted. */
static int ifd__piece(const ifd_tokenizer_t *t, const char *text, size_t from, size_t to,
                      bool after, bool before, unsigned flags, const ifd_span_t *plain,
                      size_t n_plain, ifd_tokens_t *out)
{
    const size_t pl = IFD__LEN(ifd__nl2), lead = after ? pl : 0;
    char *x = malloc(to - from + 2 * pl + 1);
    ifd_span_t *xp = malloc((n_plain ? n_plain : 1) * sizeof *xp);
    if (!x || !xp) {
        free(x), free(xp);
        return IFD_ENOMEM;
    }
    size_t w = 0, np = 0;
    if (after)
        memcpy(x, ifd__nl2, pl), w += pl;
    memcpy(x + w, text + from, to - from), w += to - from;
    if (before)
        memcpy(x + w, ifd__nl2, pl), w += pl;
    for (size_t k = 0; k < n_plain; k++)
        if (plain[k].off >= from && plain[k].off + plain[k].len <= to)
            xp[np++] = (ifd_span_t){plain[k].off - from + lead, plain[k].len};
    int rc = ifd_tokenizer_encode_spans(t, x, w, flags, xp, np, out);
    free(x), free(xp);
    return rc;
}

/* One image's tokens: <start_of_image>, n_soft soft ids (its span), then
 * <end_of_image>. */
static int ifd__image_ids(const ifd_image_prompt_t *ip, ifd_tokens_t *out, ifd_image_pos_t *pos)
{
    int rc = ifd_tokens_push(out, ip->boi);
    *pos = (ifd_image_pos_t){(int32_t)out->n, ip->n_soft};
    for (int32_t s = 0; s < ip->n_soft && rc == 0; s++)
        rc = ifd_tokens_push(out, ip->soft);
    return rc ? rc : ifd_tokens_push(out, ip->eoi);
}

int ifd_image_prompt_encode(const ifd_tokenizer_t *t, const ifd_image_prompt_t *ip,
                            const char *text, size_t len, unsigned flags, const ifd_span_t *plain,
                            size_t n_plain, ifd_tokens_t *out, ifd_image_pos_t *spans,
                            size_t max_spans, size_t *n_spans)
{
    int rc = ifd__check_plain(plain, n_plain, len);
    if (rc)
        return rc;
    size_t *at = NULL, n = 0;
    if (flags & IFD_TOK_PARSE_SPECIAL)
        rc = ifd__find_placeholders(text, len, plain, n_plain, &at, &n);
    if (rc == 0 && (*n_spans > max_spans || n > max_spans - *n_spans))
        rc = IFD_ERANGE;
    const size_t first = out->n, bl = IFD__LEN(ifd__boi_text);
    for (size_t k = 0; k <= n && rc == 0; k++) {
        const size_t from = k ? at[k - 1] + bl : 0, to = k < n ? at[k] : len;
        rc = ifd__piece(t, text, from, to, k > 0, k < n, k ? flags & ~IFD_TOK_ADD_SPECIAL : flags,
                        plain, n_plain, out);
        if (rc == 0 && k < n)
            rc = ifd__image_ids(ip, out, &spans[*n_spans + k]);
    }
    if (rc)
        out->n = first;
    else
        *n_spans += n;
    free(at);
    return rc;
}
