/*
 * safetensors.h — a validating reader of Hugging Face safetensors weights:
 * one `*.safetensors` file, or the shards listed by a
 * `model.safetensors.index.json` (MODEL-FORMATS.md §4.1).
 *
 * Every shard is mmapped read-only (no copy of the weights is made); its
 * 8-byte little-endian header length, its JSON header (jansson), every
 * tensor's dtype, shape and data_offsets are checked against the file size
 * before anything is returned: offsets must lie inside the data section,
 * hold exactly shape × element-size bytes, and no two tensors may overlap.
 * An index must name only shards that exist, in the index's directory, and
 * every tensor it lists must be in the shard it names. A failure is one line
 * in errbuf naming the file (and the tensor when there is one).
 *
 * dtypes: F32, F16 and BF16 are loadable (ggml_type set to the matching
 * ggml id, so common dequantization applies); the other safetensors dtypes
 * (F64, I8…I64, U8…U64, BOOL, F8_*) are accepted for validation with
 * ggml_type = IFD_ST_UNSUPPORTED, so a checkpoint that carries, say, an int
 * buffer still opens and only a loader that asks for that tensor fails.
 * An unknown dtype string is an error.
 *
 * Ownership: ifd_safetensors_open returns an object freed with
 * ifd_safetensors_close; tensor records, names and data pointers live until
 * then. Threading: immutable after open; any thread may read it.
 */
#ifndef IFD_SAFETENSORS_H
#define IFD_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define IFD_ST_MAX_DIMS    8
#define IFD_ST_UNSUPPORTED UINT32_MAX

typedef struct {
    const char *name;   /* NUL-terminated copy */
    char dtype[12];     /* as the header spells it: "BF16" */
    uint32_t ggml_type; /* 0 F32, 1 F16, 30 BF16 (ggml ids), or IFD_ST_UNSUPPORTED */
    uint32_t n_dims;
    int64_t shape[IFD_ST_MAX_DIMS]; /* outermost first (PyTorch order) */
    uint64_t n_elems;
    uint64_t nbytes;
    const void *data; /* inside the shard's mapping; may be unaligned */
    const char *file; /* path of the shard holding it */
} ifd_st_tensor_t;

typedef struct ifd_safetensors ifd_safetensors_t;

/*
 * Opens `path`: a `.safetensors` file, a `model.safetensors.index.json`, or
 * a directory holding one of those (the index wins; else
 * `model.safetensors`). Returns 0; -errno when a file cannot be opened or
 * mapped (e.g. -ENOENT for a missing shard); IFD_ETRUNC for a file shorter
 * than its header or data promise; IFD_EFORMAT for a malformed header,
 * index, shape or offsets; IFD_ENOTSUP for an unknown dtype; IFD_ETOOBIG
 * for a header over 100 MiB; IFD_ENOMEM. The message goes to errbuf, or to
 * the log when errbuf is NULL.
 */
int ifd_safetensors_open(ifd_safetensors_t **out, const char *path, char *errbuf, size_t errlen);
/* NULL is a no-op. Unmaps every shard. */
void ifd_safetensors_close(ifd_safetensors_t *st);

/* Tensors sorted by name. */
size_t ifd_safetensors_count(const ifd_safetensors_t *st);
const ifd_st_tensor_t *ifd_safetensors_at(const ifd_safetensors_t *st, size_t i);
/* NULL when absent. O(log n). */
const ifd_st_tensor_t *ifd_safetensors_find(const ifd_safetensors_t *st, const char *name);

/* The shard files, in the order they were opened. */
size_t ifd_safetensors_n_files(const ifd_safetensors_t *st);
const char *ifd_safetensors_file(const ifd_safetensors_t *st, size_t i);
/* Sum of the shards' sizes in bytes. */
uint64_t ifd_safetensors_total_bytes(const ifd_safetensors_t *st);

/* Gives back this process's resident pages of tensor t's data (whole pages
 * inside it; MADV_DONTNEED), for a loader that has copied it. The data stays
 * readable (a later read faults the pages back in from the file). t NULL:
 * nothing. ifd_safetensors_release_all: every shard's data. Advice only: a
 * failure costs RSS, nothing else. */
void ifd_safetensors_release(const ifd_safetensors_t *st, const ifd_st_tensor_t *t);
void ifd_safetensors_release_all(const ifd_safetensors_t *st);

/* Element size in bytes of a safetensors dtype name, or 0 when unknown. */
size_t ifd_safetensors_dtype_size(const char *dtype);

#endif
