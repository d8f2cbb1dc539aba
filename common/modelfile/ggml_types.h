/*
 * ggml_types.h — the ggml tensor element types that GGUF files use, with
 * their block geometry, defined once in a table.
 *
 * A row of ne0 elements of type t takes ne0 / block_elems(t) blocks of
 * block_bytes(t) bytes; ne0 must be a multiple of block_elems(t).
 * All functions are pure and thread-safe.
 */
#ifndef IFD_GGML_TYPES_H
#define IFD_GGML_TYPES_H

#include <stdbool.h>
#include <stdint.h>

/* X(NAME, id, block elements, block bytes) — ids as written in files. */
#define IFD_GGML_TYPES(X)                                                                   \
    X(F32, 0, 1, 4)                                                                         \
    X(F16, 1, 1, 2)                                                                         \
    X(Q4_0, 2, 32, 18)                                                                      \
    X(Q4_1, 3, 32, 20)                                                                      \
    X(Q5_0, 6, 32, 22)                                                                      \
    X(Q5_1, 7, 32, 24)                                                                      \
    X(Q8_0, 8, 32, 34)                                                                      \
    X(Q8_1, 9, 32, 36)                                                                      \
    X(Q2_K, 10, 256, 84)                                                                    \
    X(Q3_K, 11, 256, 110)                                                                   \
    X(Q4_K, 12, 256, 144)                                                                   \
    X(Q5_K, 13, 256, 176)                                                                   \
    X(Q6_K, 14, 256, 210)                                                                   \
    X(Q8_K, 15, 256, 292)                                                                   \
    X(IQ2_XXS, 16, 256, 66)                                                                 \
    X(IQ2_XS, 17, 256, 74)                                                                  \
    X(IQ3_XXS, 18, 256, 98)                                                                 \
    X(IQ1_S, 19, 256, 50)                                                                   \
    X(IQ4_NL, 20, 32, 18)                                                                   \
    X(IQ3_S, 21, 256, 110)                                                                  \
    X(IQ2_S, 22, 256, 82)                                                                   \
    X(IQ4_XS, 23, 256, 136)                                                                 \
    X(I8, 24, 1, 1)                                                                         \
    X(I16, 25, 1, 2)                                                                        \
    X(I32, 26, 1, 4)                                                                        \
    X(I64, 27, 1, 8)                                                                        \
    X(F64, 28, 1, 8)                                                                        \
    X(IQ1_M, 29, 256, 56)                                                                   \
    X(BF16, 30, 1, 2)                                                                       \
    X(TQ1_0, 34, 256, 54)                                                                   \
    X(TQ2_0, 35, 256, 66)                                                                   \
    X(MXFP4, 39, 32, 17)

typedef enum {
#define IFD__GGML_ENUM(name, id, be, bb) IFD_GGML_##name = (id),
    IFD_GGML_TYPES(IFD__GGML_ENUM)
#undef IFD__GGML_ENUM
} ifd_ggml_type_t;

/* True for ids listed in the table. */
bool ifd_ggml_type_valid(uint32_t id);
/* "Q4_K"; "?" for unknown ids. */
const char *ifd_ggml_type_name(uint32_t id);
/* Block geometry; 0 for unknown ids. */
uint32_t ifd_ggml_block_elems(uint32_t id);
uint32_t ifd_ggml_block_bytes(uint32_t id);
/* Bytes of a row of ne0 elements into *out. IFD_EINVAL when ne0 is not a
 * multiple of the block size or the type is unknown; IFD_EOVERFLOW. */
int ifd_ggml_row_bytes(uint32_t id, uint64_t ne0, uint64_t *out);

#endif
