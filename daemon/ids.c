/*
 * ids.c — see ids.h.
 */
#include "ids.h"

#include "error.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

int ifd_ids_fill(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = getrandom(p, n, 0);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            IFD_ERROR("getrandom(%zu): %s", n, strerror(e));
            return -e;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* 128 bits for an id, or -errno. */
static int ifd__id_bits(uint64_t r[2])
{
#ifdef IFD_TEST_HOOKS
    if (getenv("INFERD_TEST_IDS_FAIL")) {
        IFD_ERROR("getrandom(16): %s (test hook $INFERD_TEST_IDS_FAIL)", strerror(EIO));
        return -EIO;
    }
#endif
    return ifd_ids_fill(r, 2 * sizeof r[0]);
}

int ifd_ids_make(char *out, ifd_oai_kind_t kind)
{
    uint64_t r[2];
    int rc = ifd__id_bits(r);
    out[0] = '\0';
    if (rc)
        return rc;
    ifd_oai_make_id(out, kind, r[0], r[1]);
    return 0;
}

char *ifd_ids_tool_call(ifd_arena_t *a, int *rc)
{
    uint64_t r[2];
    if ((*rc = ifd__id_bits(r)) != 0)
        return NULL;
    char *id = ifd_arena_sprintf(a, "call_%016" PRIx64 "%016" PRIx64, r[0], r[1]);
    if (!id)
        *rc = IFD_ENOMEM;
    return id;
}

int ifd_ids_seed(uint64_t *state)
{
    return ifd_ids_fill(state, sizeof *state);
}

uint64_t ifd_ids_random(uint64_t *state)
{
    /* splitmix64: default seeds need to differ, not to be secret (ids never
     * come from here) */
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
