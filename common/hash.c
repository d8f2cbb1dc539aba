/*
 * hash.c — the open-addressing index of hash.h. Invariants: capacity is a
 * power of two (or 0), count ≤ capacity / 2, and every stored value sits at
 * or after its home slot (tag & mask) with no empty slot in between — which
 * is what makes the walk of ifd_hash_next and backward-shift deletion right.
 */
#include "hash.h"

#include "error.h"

#include <stdlib.h>
#include <xxhash.h>

#define IFD__HASH_MAX_CAP (1u << 31)

static int ifd__hash_alloc(ifd_hash_t *h, uint32_t cap)
{
    ifd_hash_slot_t *s = malloc((size_t)cap * sizeof *s);
    if (!s)
        return IFD_ENOMEM;
    for (uint32_t i = 0; i < cap; i++)
        s[i] = (ifd_hash_slot_t){0, -1};
    h->slots = s;
    h->mask = cap - 1;
    h->count = 0;
    return 0;
}

static uint32_t ifd__hash_cap_for(size_t n)
{
    uint32_t cap = 16;
    while (cap < IFD__HASH_MAX_CAP && (size_t)cap < 2 * n)
        cap <<= 1;
    return cap;
}

int ifd_hash_init(ifd_hash_t *h, size_t n)
{
    h->slots = NULL;
    h->mask = 0;
    h->count = 0;
    return n ? ifd__hash_alloc(h, ifd__hash_cap_for(n)) : 0;
}

void ifd_hash_close(ifd_hash_t *h)
{
    free(h->slots);
    h->slots = NULL;
    h->mask = 0;
    h->count = 0;
}

void ifd_hash_clear(ifd_hash_t *h)
{
    if (!h->slots)
        return;
    for (uint32_t i = 0; i <= h->mask; i++)
        h->slots[i] = (ifd_hash_slot_t){0, -1};
    h->count = 0;
}

static void ifd__hash_place(ifd_hash_t *h, ifd_hash_slot_t s)
{
    uint32_t i = s.tag & h->mask;
    while (h->slots[i].val >= 0)
        i = (i + 1) & h->mask;
    h->slots[i] = s;
    h->count++;
}

static int ifd__hash_grow(ifd_hash_t *h)
{
    uint32_t cap = h->slots ? (h->mask + 1) * 2 : 16;
    if (cap > IFD__HASH_MAX_CAP)
        return IFD_EINVAL;
    ifd_hash_t n;
    int rc = ifd__hash_alloc(&n, cap);
    if (rc)
        return rc;
    for (uint32_t i = 0; h->slots && i <= h->mask; i++)
        if (h->slots[i].val >= 0)
            ifd__hash_place(&n, h->slots[i]);
    free(h->slots);
    *h = n;
    return 0;
}

int ifd_hash_insert(ifd_hash_t *h, uint64_t hash, int32_t val)
{
    if (val < 0)
        return IFD_EINVAL;
    if (!h->slots || (size_t)(h->count + 1) * 2 > (size_t)h->mask + 1) {
        int rc = ifd__hash_grow(h);
        if (rc)
            return rc;
    }
    ifd__hash_place(h, (ifd_hash_slot_t){(uint32_t)hash, val});
    return 0;
}

static int64_t ifd__hash_find_slot(const ifd_hash_t *h, uint64_t hash, int32_t val)
{
    if (!h->slots)
        return -1;
    for (uint32_t i = (uint32_t)hash & h->mask;; i = (i + 1) & h->mask) {
        const ifd_hash_slot_t *s = &h->slots[i];
        if (s->val < 0)
            return -1;
        if (s->val == val && s->tag == (uint32_t)hash)
            return i;
    }
}

int ifd_hash_remove(ifd_hash_t *h, uint64_t hash, int32_t val)
{
    int64_t found = ifd__hash_find_slot(h, hash, val);
    if (found < 0)
        return IFD_ENOTFOUND;
    uint32_t hole = (uint32_t)found;
    /* Shift back every entry after the hole whose home is not between the
     * hole (exclusive) and its own slot: it could no longer be reached. */
    for (uint32_t j = (hole + 1) & h->mask;; j = (j + 1) & h->mask) {
        ifd_hash_slot_t s = h->slots[j];
        if (s.val < 0)
            break;
        uint32_t home = s.tag & h->mask;
        uint32_t dist_j = (j - home) & h->mask;
        uint32_t dist_hole = (j - hole) & h->mask;
        if (dist_j >= dist_hole) {
            h->slots[hole] = s;
            hole = j;
        }
    }
    h->slots[hole] = (ifd_hash_slot_t){0, -1};
    h->count--;
    return 0;
}

int ifd_hash_replace(ifd_hash_t *h, uint64_t hash, int32_t old, int32_t new_val)
{
    if (new_val < 0)
        return IFD_EINVAL;
    int64_t found = ifd__hash_find_slot(h, hash, old);
    if (found < 0)
        return IFD_ENOTFOUND;
    h->slots[found].val = new_val;
    return 0;
}

uint64_t ifd_hash_bytes(const void *p, size_t n)
{
    return XXH3_64bits(p, n);
}

void ifd_hash_bytes128(const void *p, size_t n, uint64_t *lo, uint64_t *hi)
{
    XXH128_hash_t h = XXH3_128bits(p, n);
    *lo = h.low64;
    *hi = h.high64;
}
