/*
 * fuzz_tokenizer.c — the tokenizers of the test models (byte-level BPE:
 * SmolLM2; SentencePiece: Gemma 3 when fetched), the first byte choosing.
 * Properties: decode(encode(x)) == x for any bytes x the vocabulary can
 * express (encoding without special-token parsing, as user text is; see
 * ifd__bytes_table for the bytes some vocabularies lack, and SentencePiece's
 * U+2581, which stands for a space); the streaming
 * detokenizer gives
 * the same bytes when x is valid UTF-8; encoding with special tokens parsed
 * and decoding with them rendered never fails or reads out of bounds; ids
 * are in the vocabulary. Without the default model it skips (exit 77).
 */
#include "fuzz.h"

#include "error.h"
#include "modelfile/model_config.h"
#include "tokenizer/tokenizer.h"

#include <limits.h>
#include <string.h>

static ifd_tokenizer_t *ifd__tok[2];
static bool ifd__rep[2][256]; /* byte b survives encode+decode on its own */
static bool ifd__meta[2];     /* "\u2581" comes back as a space (SentencePiece) */
static int ifd__n_tok;

/* A vocabulary may lack some bytes: SmolLM2's has no token for 21 of them
 * (0x04, 0x06, 0x13, …, 0xc0, 0xc1, 0xf1…0xff) and, like HF's BPE without
 * byte fallback or an unknown token, the encoder drops them. The round trip
 * is only promised for text made of bytes the vocabulary can express. */
static void ifd__bytes_table(int k)
{
    for (int b = 0; b < 256; b++) {
        char c = (char)b, *out = NULL;
        size_t olen = 0;
        ifd_tokens_t ids = {0};
        ifd__rep[k][b] = ifd_tokenizer_encode(ifd__tok[k], &c, 1, 0, &ids) == 0 &&
                         ifd_tokenizer_decode(ifd__tok[k], ids.ids, ids.n, 0, &out, &olen) == 0 &&
                         olen == 1 && out[0] == c;
        free(out);
        ifd_tokens_free(&ids);
    }
    /* SentencePiece writes spaces as U+2581, so a literal U+2581 in the text
     * decodes as a space, in llama.cpp and HF alike */
    static const char meta[] = "a\xe2\x96\x81"
                               "b";
    char *out = NULL;
    size_t olen = 0;
    ifd_tokens_t ids = {0};
    ifd__meta[k] = ifd_tokenizer_encode(ifd__tok[k], meta, 5, 0, &ids) == 0 &&
                   ifd_tokenizer_decode(ifd__tok[k], ids.ids, ids.n, 0, &out, &olen) == 0 &&
                   !(olen == 5 && memcmp(out, meta, 5) == 0);
    free(out);
    ifd_tokens_free(&ids);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    char path[PATH_MAX], err[512];
    ifd_default_model_path(path, sizeof path);
    if (ifd_tokenizer_create_gguf_file(&ifd__tok[0], path, err, sizeof err) != 0) {
        printf("SKIPPED: the default model's tokenizer: %s (run deploy/fetch-model.sh)\n", err);
        exit(77);
    }
    ifd__n_tok = 1;
    ifd__bytes_table(0);
    char *slash = strrchr(path, '/');
    if (slash) {
        snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "%s",
                 "gemma-3-270m-q4_k_m.gguf");
        if (ifd_tokenizer_create_gguf_file(&ifd__tok[1], path, err, sizeof err) == 0) {
            ifd__n_tok = 2;
            ifd__bytes_table(1);
        }
    }
    return 0;
}

static bool ifd__valid_utf8(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n)
            return false;
        uint32_t cp = k == 1 ? c : (uint32_t)(c & (0x7f >> k));
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0 || size > 4096) /* long inputs only slow the search down */
        return 0;
    int k = data[0] % ifd__n_tok;
    const ifd_tokenizer_t *t = ifd__tok[k];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t nv = ifd_tokenizer_n_vocab(t);
    ifd_tokens_t ids = {0};
    IFD_FUZZ_CHECK(ifd_tokenizer_encode(t, text, len, 0, &ids) == 0);
    for (size_t i = 0; i < ids.n; i++)
        IFD_FUZZ_CHECK(ids.ids[i] >= 0 && ids.ids[i] < nv);
    char *out = NULL;
    size_t olen = 0;
    IFD_FUZZ_CHECK(ifd_tokenizer_decode(t, ids.ids, ids.n, 0, &out, &olen) == 0);
    bool expressible = true;
    for (size_t i = 0; i < len; i++)
        expressible = expressible && ifd__rep[k][(uint8_t)text[i]];
    if (ifd__meta[k] && memmem(text, len, "\xe2\x96\x81", 3))
        expressible = false;
    if (expressible && (olen != len || memcmp(out, text, len) != 0)) {
        fprintf(stderr, "round trip: %zu bytes in, %zu out\n in: ", len, olen);
        for (size_t i = 0; i < len; i++)
            fprintf(stderr, "%02x", (unsigned char)text[i]);
        fprintf(stderr, "\nout: ");
        for (size_t i = 0; i < olen; i++)
            fprintf(stderr, "%02x", (unsigned char)out[i]);
        fprintf(stderr, "\nids:");
        for (size_t i = 0; i < ids.n; i++)
            fprintf(stderr, " %d", ids.ids[i]);
        fprintf(stderr, "\n");
        IFD_FUZZ_CHECK(!"decode(encode(x)) == x");
    }
    free(out);
    if (expressible && ifd__valid_utf8((const uint8_t *)text, len)) {
        ifd_detok_t *d = NULL;
        IFD_FUZZ_CHECK(ifd_detok_create(&d, t, 0) == 0);
        char *acc = malloc(len + 1);
        size_t alen = 0;
        for (size_t i = 0; i <= ids.n; i++) {
            const char *p;
            size_t n;
            int rc = i < ids.n ? ifd_detok_push(d, ids.ids[i], &p, &n) : ifd_detok_flush(d, &p, &n);
            IFD_FUZZ_CHECK(rc == 0);
            IFD_FUZZ_CHECK(alen + n <= len);
            memcpy(acc + alen, p, n);
            alen += n;
        }
        IFD_FUZZ_CHECK(alen == len && memcmp(acc, text, len) == 0);
        free(acc);
        ifd_detok_destroy(d);
    }
    ifd_tokens_free(&ids);
    /* special tokens parsed and rendered: anything goes, safely */
    IFD_FUZZ_CHECK(
        ifd_tokenizer_encode(t, text, len, IFD_TOK_PARSE_SPECIAL | IFD_TOK_ADD_SPECIAL, &ids) == 0);
    IFD_FUZZ_CHECK(ifd_tokenizer_decode(t, ids.ids, ids.n, IFD_DETOK_RENDER_SPECIAL, &out, &olen) ==
                   0);
    free(out);
    ifd_tokens_free(&ids);
    return 0;
}
