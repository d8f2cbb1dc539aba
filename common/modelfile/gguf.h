/*
 * gguf.h — a read-only GGUF (v2/v3) reader over an mmap'ed file.
 *
 * ifd_gguf_open maps the file, parses the header, every metadata value
 * (all 13 value types, arrays of any type including nested arrays), and the
 * tensor infos; it validates every count, length and offset against the
 * file size with overflow-checked arithmetic before touching a byte. A
 * corrupt or truncated file yields IFD_EFORMAT / IFD_ETRUNC / IFD_EVERSION
 * and a message naming the file, the byte offset and what was expected —
 * never a crash or an out-of-bounds read.
 *
 * Ownership: the ifd_gguf_t owns the mapping and every pointer it hands out
 * (strings, array data, tensor infos, tensor data); they stay valid until
 * ifd_gguf_close. Strings from the file are NOT NUL-terminated: they come as
 * ifd_str_t (pointer + length). Tensor and key names are copied and
 * NUL-terminated for convenience.
 *
 * Threading: open/close from one thread; every getter is read-only and may
 * be called from any number of threads concurrently.
 */
#ifndef IFD_GGUF_H
#define IFD_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ggml_types.h"

#define IFD_GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define IFD_GGUF_DEFAULT_ALIGNMENT 32u
#define IFD_GGUF_MAX_DIMS 4

/* Metadata value types, as numbered in the file. */
typedef enum {
    IFD_GGUF_UINT8 = 0,
    IFD_GGUF_INT8 = 1,
    IFD_GGUF_UINT16 = 2,
    IFD_GGUF_INT16 = 3,
    IFD_GGUF_UINT32 = 4,
    IFD_GGUF_INT32 = 5,
    IFD_GGUF_FLOAT32 = 6,
    IFD_GGUF_BOOL = 7,
    IFD_GGUF_STRING = 8,
    IFD_GGUF_ARRAY = 9,
    IFD_GGUF_UINT64 = 10,
    IFD_GGUF_INT64 = 11,
    IFD_GGUF_FLOAT64 = 12,
    IFD_GGUF_TYPE_COUNT
} ifd_gguf_type_t;

/* A string inside the mapping; not NUL-terminated. */
typedef struct {
    const char *ptr;
    size_t len;
} ifd_str_t;

typedef struct ifd_gguf ifd_gguf_t;

/* A metadata value. For ARRAY, `arr` describes the elements; use
 * ifd_gguf_arr_* to read element i (O(1) for every element type: string and
 * nested-array elements are indexed at open time). */
typedef struct {
    ifd_gguf_type_t type;
    union {
        uint64_t u;  /* UINT8/16/32/64 */
        int64_t i;   /* INT8/16/32/64 */
        double f;    /* FLOAT32/64 */
        bool b;      /* BOOL */
        ifd_str_t s; /* STRING */
        struct {
            ifd_gguf_type_t elem; /* element type */
            uint64_t count;
            const void *data;  /* first element in the mapping (raw, little-endian) */
            uint64_t node;     /* internal: index used by ifd_gguf_arr_get */
        } arr;
    } v;
} ifd_gguf_value_t;

/* One tensor. ne[] is innermost-first as in the file, unused dims are 1. */
typedef struct {
    const char *name; /* NUL-terminated copy */
    uint32_t n_dims;
    uint64_t ne[IFD_GGUF_MAX_DIMS];
    ifd_ggml_type_t type;
    uint64_t offset;  /* relative to the data section */
    uint64_t nbytes;  /* validated: offset + nbytes lies inside the file */
    const void *data; /* inside the mapping */
} ifd_gguf_tensor_t;

/*
 * Opens and validates `path`. On success *out owns the mapping.
 * On failure returns IFD_EFORMAT, IFD_ETRUNC, IFD_EVERSION, IFD_ENOMEM or
 * -errno, and writes a one-line message (file, byte offset, what was
 * expected) into errbuf when errbuf is not NULL; with errbuf NULL the message
 * is logged at error level instead.
 */
int ifd_gguf_open(ifd_gguf_t **out, const char *path, char *errbuf, size_t errlen);

/* Same, over a caller-owned memory image (which must outlive the handle);
 * `name` is used in messages. For tests and fuzzing. */
int ifd_gguf_open_mem(ifd_gguf_t **out, const void *data, size_t size, const char *name,
                      char *errbuf, size_t errlen);

void ifd_gguf_close(ifd_gguf_t *g);

/* Gives back this process's resident pages of the tensor data of a mapped
 * file (MADV_DONTNEED; nothing for ifd_gguf_open_mem images). For a loader
 * that has copied every tensor into memory of its own: without it the file's
 * pages it read stay in its RSS as long as the file is mapped. Tensor data
 * stays readable (a later read faults the pages back in from the file).
 * g NULL: nothing. */
void ifd_gguf_release_tensor_pages(const ifd_gguf_t *g);
/* The same for one tensor's data (t from this handle, or NULL: nothing),
 * as soon as the loader has copied it: keeps the load's peak RSS near what
 * the loader keeps. */
void ifd_gguf_release_tensor(const ifd_gguf_t *g, const ifd_gguf_tensor_t *t);

const char *ifd_gguf_path(const ifd_gguf_t *g);
uint32_t ifd_gguf_version(const ifd_gguf_t *g);
uint32_t ifd_gguf_alignment(const ifd_gguf_t *g);
uint64_t ifd_gguf_data_offset(const ifd_gguf_t *g); /* absolute file offset of tensor data */
uint64_t ifd_gguf_file_size(const ifd_gguf_t *g);

/* Metadata in file order. */
uint64_t ifd_gguf_kv_count(const ifd_gguf_t *g);
const char *ifd_gguf_kv_key(const ifd_gguf_t *g, uint64_t i); /* NUL-terminated copy */
const ifd_gguf_value_t *ifd_gguf_kv_value(const ifd_gguf_t *g, uint64_t i);
/* Index of `key`, or -1. O(1) average (hash table built at open). */
int64_t ifd_gguf_find_key(const ifd_gguf_t *g, const char *key);
const ifd_gguf_value_t *ifd_gguf_get(const ifd_gguf_t *g, const char *key); /* NULL if absent */

/*
 * Typed getters. 0 on success; IFD_ENOTFOUND when the key is missing;
 * IFD_ETYPE when the stored type cannot be read as the asked one;
 * IFD_ERANGE when an integer does not fit. Integer getters accept any
 * integer type whose value fits (hyper-parameters are usually u32 but the
 * spec allows u64); get_f32/get_f64 accept FLOAT32 and FLOAT64.
 * On failure *out is left untouched, so callers may pre-load a default.
 */
int ifd_gguf_get_u32(const ifd_gguf_t *g, const char *key, uint32_t *out);
int ifd_gguf_get_i32(const ifd_gguf_t *g, const char *key, int32_t *out);
int ifd_gguf_get_u64(const ifd_gguf_t *g, const char *key, uint64_t *out);
int ifd_gguf_get_i64(const ifd_gguf_t *g, const char *key, int64_t *out);
int ifd_gguf_get_f32(const ifd_gguf_t *g, const char *key, float *out);
int ifd_gguf_get_f64(const ifd_gguf_t *g, const char *key, double *out);
int ifd_gguf_get_bool(const ifd_gguf_t *g, const char *key, bool *out);
int ifd_gguf_get_str(const ifd_gguf_t *g, const char *key, ifd_str_t *out);
/* An ARRAY value (any element type). */
int ifd_gguf_get_arr(const ifd_gguf_t *g, const char *key, const ifd_gguf_value_t **out);

/* Array element access; `arr` must be an ARRAY value from this file and
 * i < count (checked: IFD_ERANGE / IFD_ETYPE otherwise). */
int ifd_gguf_arr_get(const ifd_gguf_t *g, const ifd_gguf_value_t *arr, uint64_t i,
                     ifd_gguf_value_t *out);
int ifd_gguf_arr_str(const ifd_gguf_t *g, const ifd_gguf_value_t *arr, uint64_t i,
                     ifd_str_t *out);

/* Tensors in file order. */
uint64_t ifd_gguf_tensor_count(const ifd_gguf_t *g);
const ifd_gguf_tensor_t *ifd_gguf_tensor(const ifd_gguf_t *g, uint64_t i);
/* By name, or NULL. O(1) average. */
const ifd_gguf_tensor_t *ifd_gguf_find_tensor(const ifd_gguf_t *g, const char *name);

#endif
