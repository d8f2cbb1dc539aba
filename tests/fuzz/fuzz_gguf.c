/*
 * fuzz_gguf.c — the GGUF reader (common/modelfile/gguf.h) on an in-memory image, and
 * what the daemon builds from the metadata: the model's hyper-parameters
 * (common/modelfile/model_config.h) and its tokenizer (common/tokenizer/tokenizer.h). Every
 * key, every array element (up to 4096 per array) and every tensor record
 * is read back. Properties: no memory error; an accepted file's tensors lie
 * inside it and its strings inside the image; a refusal carries a message.
 */
#include "fuzz.h"

#include "error.h"
#include "modelfile/gguf.h"
#include "modelfile/model_config.h"
#include "tokenizer/tokenizer.h"

#include <string.h>

static const uint8_t *ifd__lo, *ifd__hi;

static void ifd__check_str(const ifd_str_t *s)
{
    if (s->len)
        IFD_FUZZ_CHECK((const uint8_t *)s->ptr >= ifd__lo &&
                       (const uint8_t *)s->ptr + s->len <= ifd__hi);
}

static void ifd__walk(const ifd_gguf_t *g, const ifd_gguf_value_t *v, int depth)
{
    if (v->type == IFD_GGUF_STRING)
        ifd__check_str(&v->v.s);
    if (v->type != IFD_GGUF_ARRAY || depth > 3)
        return;
    uint64_t n = v->v.arr.count < 4096 ? v->v.arr.count : 4096;
    for (uint64_t i = 0; i < n; i++) {
        ifd_gguf_value_t e;
        if (ifd_gguf_arr_get(g, v, i, &e) == 0)
            ifd__walk(g, &e, depth + 1);
        ifd_str_t s;
        if (ifd_gguf_arr_str(g, v, i, &s) == 0)
            ifd__check_str(&s);
    }
    ifd_gguf_value_t e;
    IFD_FUZZ_CHECK(ifd_gguf_arr_get(g, v, v->v.arr.count, &e) != 0); /* one past the end */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ifd_gguf_t *g = NULL;
    char err[512] = "";
    ifd__lo = data;
    ifd__hi = data + size;
    int rc = ifd_gguf_open_mem(&g, data, size, "fuzz.gguf", err, sizeof err);
    if (rc) {
        IFD_FUZZ_CHECK(rc < 0 && err[0]);
        return 0;
    }
    uint64_t nkv = ifd_gguf_kv_count(g);
    for (uint64_t i = 0; i < nkv; i++) {
        const char *k = ifd_gguf_kv_key(g, i);
        const ifd_gguf_value_t *v = ifd_gguf_kv_value(g, i);
        IFD_FUZZ_CHECK(k && v);
        ifd__walk(g, v, 0);
        IFD_FUZZ_CHECK(ifd_gguf_find_key(g, k) >= 0);
    }
    uint64_t nt = ifd_gguf_tensor_count(g);
    for (uint64_t i = 0; i < nt; i++) {
        const ifd_gguf_tensor_t *t = ifd_gguf_tensor(g, i);
        IFD_FUZZ_CHECK(t && t->name);
        IFD_FUZZ_CHECK(t->n_dims <= IFD_GGUF_MAX_DIMS);
        if (t->nbytes)
            IFD_FUZZ_CHECK((const uint8_t *)t->data >= ifd__lo &&
                           (const uint8_t *)t->data + t->nbytes <= ifd__hi);
        IFD_FUZZ_CHECK(ifd_gguf_find_tensor(g, t->name) != NULL);
    }
    ifd_model_config_t mc;
    (void)ifd_model_config_from_gguf(&mc, g, err, sizeof err);
    ifd_tokenizer_t *tok = NULL;
    if (ifd_tokenizer_create_gguf(&tok, g, err, sizeof err) == 0) {
        ifd_tokens_t ids = {0};
        static const char text[] = "Hello, world! 123 \xe2\x82\xac <|im_start|>";
        if (ifd_tokenizer_encode(tok, text, sizeof text - 1, IFD_TOK_PARSE_SPECIAL, &ids) == 0) {
            char *out = NULL;
            size_t olen = 0;
            if (ifd_tokenizer_decode(tok, ids.ids, ids.n, 0, &out, &olen) == 0)
                free(out);
        }
        ifd_tokens_free(&ids);
        ifd_tokenizer_destroy(tok);
    }
    ifd_gguf_close(g);
    return 0;
}
