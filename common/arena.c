/*
 * arena.c — see arena.h. Chunks form a singly linked list, newest first;
 * an allocation larger than a chunk gets a chunk of its own.
 */
#include "arena.h"
#include "error.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ifd__arena_chunk {
    ifd__arena_chunk_t *next;
    size_t size; /* usable bytes after the header */
    size_t used;
    _Alignas(16) unsigned char mem[];
};

void ifd_arena_init(ifd_arena_t *a, size_t chunk_size)
{
    a->head = NULL;
    a->chunk_size = chunk_size ? chunk_size : 64 * 1024;
    a->total = 0;
}

static void free_chunks(ifd__arena_chunk_t *c)
{
    while (c) {
        ifd__arena_chunk_t *next = c->next;
        free(c);
        c = next;
    }
}

void ifd_arena_close(ifd_arena_t *a)
{
    free_chunks(a->head);
    a->head = NULL;
    a->total = 0;
}

void ifd_arena_reset(ifd_arena_t *a)
{
    if (!a->head)
        return;
    ifd__arena_chunk_t *keep = a->head;
    free_chunks(keep->next);
    keep->next = NULL;
    keep->used = 0;
    a->total = 0;
}

void *ifd_arena_alloc_aligned(ifd_arena_t *a, size_t n, size_t align)
{
    if (align == 0 || (align & (align - 1)) != 0 || align > 4096)
        return NULL;
    if (n == 0)
        n = 1;
    ifd__arena_chunk_t *c = a->head;
    if (c) {
        uintptr_t base = (uintptr_t)c->mem;
        size_t off = (size_t)(((base + c->used + align - 1) & ~(uintptr_t)(align - 1)) - base);
        if (off <= c->size && n <= c->size - off) {
            c->used = off + n;
            a->total += n;
            return c->mem + off;
        }
    }
    if (n > SIZE_MAX - align - sizeof(ifd__arena_chunk_t))
        return NULL;
    size_t want = n + align;
    size_t size = want > a->chunk_size ? want : a->chunk_size;
    c = malloc(sizeof(ifd__arena_chunk_t) + size);
    if (!c)
        return NULL;
    c->size = size;
    c->used = 0;
    c->next = a->head;
    a->head = c;
    uintptr_t base = (uintptr_t)c->mem;
    size_t off = (size_t)(((base + align - 1) & ~(uintptr_t)(align - 1)) - base);
    c->used = off + n;
    a->total += n;
    return c->mem + off;
}

void *ifd_arena_alloc(ifd_arena_t *a, size_t n)
{
    return ifd_arena_alloc_aligned(a, n, 16);
}

void *ifd_arena_calloc(ifd_arena_t *a, size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        return NULL;
    void *p = ifd_arena_alloc(a, count * size);
    if (p)
        memset(p, 0, count * size);
    return p;
}

char *ifd_arena_strndup(ifd_arena_t *a, const char *s, size_t n)
{
    if (n == SIZE_MAX)
        return NULL;
    char *p = ifd_arena_alloc_aligned(a, n + 1, 1);
    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *ifd_arena_strdup(ifd_arena_t *a, const char *s)
{
    return ifd_arena_strndup(a, s, strlen(s));
}

char *ifd_arena_sprintf(ifd_arena_t *a, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = NULL;
    if (n >= 0 && (p = ifd_arena_alloc_aligned(a, (size_t)n + 1, 1)) != NULL)
        vsnprintf(p, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return p;
}

int ifd_buf_reserve(ifd_buf_t *b, size_t extra)
{
    if (extra > SIZE_MAX - 1 - b->len)
        return IFD_EOVERFLOW;
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (!p)
        return IFD_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int ifd_buf_append(ifd_buf_t *b, const void *p, size_t n)
{
    int rc = ifd_buf_reserve(b, n);
    if (rc)
        return rc;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int ifd_buf_puts(ifd_buf_t *b, const char *s)
{
    return ifd_buf_append(b, s, strlen(s));
}

int ifd_buf_vprintf(ifd_buf_t *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return IFD_EFORMAT;
    int rc = ifd_buf_reserve(b, (size_t)n);
    if (rc)
        return rc;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int ifd_buf_printf(ifd_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = ifd_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void *ifd_grow(void *v, size_t n, size_t *cap, size_t elem, size_t first)
{
    if (n < *cap)
        return v;
    size_t c = *cap ? *cap * 2 : first;
    if (c < *cap || c > SIZE_MAX / elem)
        return NULL;
    void *nv = realloc(v, c * elem);
    if (nv)
        *cap = c;
    return nv;
}

void ifd_buf_consume(ifd_buf_t *b, size_t n)
{
    IFD_ASSERT(n <= b->len);
    if (n == 0)
        return;
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

void ifd_buf_clear(ifd_buf_t *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void ifd_buf_free(ifd_buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
