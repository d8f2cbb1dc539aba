/*
 * gguf_builder.h — builds small GGUF images in memory for the reader's
 * tests: header, metadata of every type (including nested arrays) and
 * tensors. Header-only; test code, not a general writer.
 */
#ifndef IFD_TEST_GGUF_BUILDER_H
#define IFD_TEST_GGUF_BUILDER_H

#include "arena.h"
#include "modelfile/gguf.h"

#include <stdint.h>
#include <string.h>

static inline void gb_u8(ifd_buf_t *b, uint8_t v)
{
    ifd_buf_append(b, &v, 1);
}
static inline void gb_u32(ifd_buf_t *b, uint32_t v)
{
    uint8_t p[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    ifd_buf_append(b, p, 4);
}
static inline void gb_u64(ifd_buf_t *b, uint64_t v)
{
    gb_u32(b, (uint32_t)v);
    gb_u32(b, (uint32_t)(v >> 32));
}
static inline void gb_str(ifd_buf_t *b, const char *s)
{
    gb_u64(b, strlen(s));
    ifd_buf_append(b, s, strlen(s));
}
static inline void gb_header(ifd_buf_t *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    gb_u32(b, IFD_GGUF_MAGIC);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}
static inline void gb_key(ifd_buf_t *b, const char *key, uint32_t type)
{
    gb_str(b, key);
    gb_u32(b, type);
}
static inline void gb_kv_u32(ifd_buf_t *b, const char *key, uint32_t v)
{
    gb_key(b, key, IFD_GGUF_UINT32);
    gb_u32(b, v);
}
static inline void gb_kv_str(ifd_buf_t *b, const char *key, const char *v)
{
    gb_key(b, key, IFD_GGUF_STRING);
    gb_str(b, v);
}
static inline void gb_tensor_info(ifd_buf_t *b, const char *name, uint32_t n_dims,
                                  const uint64_t *ne, uint32_t type, uint64_t offset)
{
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        gb_u64(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}
static inline void gb_pad(ifd_buf_t *b, size_t align)
{
    while (b->len % align)
        gb_u8(b, 0);
}

/* A GGUF holding only a byte-level ("gpt2") tokenizer: the 256 byte
 * characters (token i is byte i), then `extra` tokens (type types[i]),
 * merges "a b" for the given pairs; pre: tokenizer.ggml.pre, or NULL. */
static inline void gb_bpe_vocab(ifd_buf_t *b, const char *pre, const char *const *extra,
                                const int *types, int n_extra, const char *const *merges,
                                int n_merges)
{
    int n_kv = 4 + (pre ? 1 : 0);
    gb_header(b, 3, 0, (uint64_t)n_kv);
    gb_kv_str(b, "tokenizer.ggml.model", "gpt2");
    if (pre)
        gb_kv_str(b, "tokenizer.ggml.pre", pre);
    gb_key(b, "tokenizer.ggml.tokens", IFD_GGUF_ARRAY);
    gb_u32(b, IFD_GGUF_STRING);
    gb_u64(b, 256 + (uint64_t)n_extra);
    /* the GPT-2 stand-in of each byte */
    for (int i = 0; i < 256; i++) {
        uint32_t cp = (uint32_t)i;
        if (!((i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE)) {
            int k = 0;
            for (int x = 0; x < i; x++)
                if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE))
                    k++;
            cp = 0x100 + (uint32_t)k;
        }
        char s[4];
        size_t l;
        if (cp < 0x80) {
            s[0] = (char)cp;
            l = 1;
        } else {
            s[0] = (char)(0xC0 | (cp >> 6));
            s[1] = (char)(0x80 | (cp & 0x3F));
            l = 2;
        }
        gb_u64(b, l);
        ifd_buf_append(b, s, l);
    }
    for (int i = 0; i < n_extra; i++)
        gb_str(b, extra[i]);
    gb_key(b, "tokenizer.ggml.token_type", IFD_GGUF_ARRAY);
    gb_u32(b, IFD_GGUF_INT32);
    gb_u64(b, 256 + (uint64_t)n_extra);
    for (int i = 0; i < 256 + n_extra; i++)
        gb_u32(b, i < 256 ? 1u : (uint32_t)types[i - 256]);
    gb_key(b, "tokenizer.ggml.merges", IFD_GGUF_ARRAY);
    gb_u32(b, IFD_GGUF_STRING);
    gb_u64(b, (uint64_t)n_merges);
    for (int i = 0; i < n_merges; i++)
        gb_str(b, merges[i]);
}

#endif
