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

#endif
