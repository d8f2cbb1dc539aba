/*
 * arena.h — a bump allocator for request-scoped memory, and a growable
 * byte buffer.
 *
 * ifd_arena_t: allocations come from chunks that are freed all at once by
 * ifd_arena_reset/ifd_arena_close. Pointers returned stay valid until then.
 * The caller embeds the struct (_init/_close). Not thread-safe: one owner.
 *
 * ifd_buf_t: a heap byte buffer that grows by doubling; always kept
 * NUL-terminated past `len` so text can be used as a C string. The caller
 * embeds it and frees it with ifd_buf_free. Not thread-safe.
 *
 * ifd_grow: the same doubling for the caller's own heap arrays.
 */
#ifndef IFD_ARENA_H
#define IFD_ARENA_H

#include <stdarg.h>
#include <stddef.h>

typedef struct ifd__arena_chunk ifd__arena_chunk_t;

typedef struct {
    ifd__arena_chunk_t *head; /* newest chunk first */
    size_t chunk_size;        /* default size of a new chunk */
    size_t total;             /* bytes handed out, for stats */
} ifd_arena_t;

/* chunk_size 0 picks 64 KiB. Never fails (allocates lazily). */
void ifd_arena_init(ifd_arena_t *a, size_t chunk_size);

/* Frees every chunk. The arena may be reused after ifd_arena_init. */
void ifd_arena_close(ifd_arena_t *a);

/* Frees everything allocated so far but keeps one chunk for reuse. */
void ifd_arena_reset(ifd_arena_t *a);

/* n bytes aligned to 16 (or to `align`, a power of two ≤ 4096).
 * NULL only when malloc fails or the size overflows. */
void *ifd_arena_alloc(ifd_arena_t *a, size_t n);
void *ifd_arena_alloc_aligned(ifd_arena_t *a, size_t n, size_t align);
void *ifd_arena_calloc(ifd_arena_t *a, size_t count, size_t size);

/* Copies of a string / of n bytes plus a NUL. NULL on allocation failure. */
char *ifd_arena_strdup(ifd_arena_t *a, const char *s);
char *ifd_arena_strndup(ifd_arena_t *a, const char *s, size_t n);
char *ifd_arena_sprintf(ifd_arena_t *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

typedef struct {
    char *data; /* NULL until the first append; data[len] == '\0' afterwards */
    size_t len;
    size_t cap;
} ifd_buf_t;

#define IFD_BUF_INIT {NULL, 0, 0}

/* Make room for `extra` more bytes. 0 or IFD_ENOMEM / IFD_EOVERFLOW. */
int ifd_buf_reserve(ifd_buf_t *b, size_t extra);
int ifd_buf_append(ifd_buf_t *b, const void *p, size_t n);
int ifd_buf_puts(ifd_buf_t *b, const char *s);
int ifd_buf_printf(ifd_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ifd_buf_vprintf(ifd_buf_t *b, const char *fmt, va_list ap);
/* Drops the first n bytes (n ≤ len), keeping the capacity. */
void ifd_buf_consume(ifd_buf_t *b, size_t n);
void ifd_buf_clear(ifd_buf_t *b); /* len = 0, keeps the capacity */
void ifd_buf_free(ifd_buf_t *b);  /* releases the memory; b is empty again */

/*
 * Room for one more element in the heap array v of n elements (elem bytes
 * each) that holds *cap: returns v while n < *cap, else v realloc'ed to
 * twice *cap elements (first when *cap is 0) with *cap updated. NULL when
 * out of memory or the size overflows; v and *cap are then unchanged and v
 * is still the caller's to free. Typical use:
 *     T *nv = ifd_grow(a->v, a->n, &a->cap, sizeof *nv, 16);
 *     if (!nv) return IFD_ENOMEM;
 *     a->v = nv;
 *     a->v[a->n++] = x;
 */
void *ifd_grow(void *v, size_t n, size_t *cap, size_t elem, size_t first);

#endif
