/*
 * ids.c — see ids.h.
 */
#include "ids.h"

uint64_t ifd_ids_random(uint64_t *state)
{
    /* splitmix64: ids and default seeds need to differ, not to be secret */
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

char *ifd_ids_tool_call(ifd_arena_t *a, uint64_t *state)
{
    uint64_t hi = ifd_ids_random(state);
    uint64_t lo = ifd_ids_random(state) & 0xffffffffu;
    return ifd_arena_sprintf(a, "call_%016llx%08llx", (unsigned long long)hi,
                             (unsigned long long)lo);
}
