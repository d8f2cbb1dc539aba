/*
 * kvkey.c — the prefix index's keys of image tokens (kvkey.h): a 64-bit
 * mix of (token, hash, index) in two rounds of splitmix64's finalizer,
 * folded to 31 bits with the sign bit set.
 */
#include "kvkey.h"

int32_t ifd_kvkey_image(int32_t tok, const uint64_t hash[2], int32_t j)
{
    uint64_t x =
        hash[0] ^ (hash[1] * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)(uint32_t)tok << 32 | (uint32_t)j);
    x ^= x >> 30, x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27, x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    x ^= hash[1] + (uint64_t)j * 0xd6e8feb86659fd93ull;
    x ^= x >> 29, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 32;
    return (int32_t)(0x80000000u | (uint32_t)x);
}

void ifd_kvkey_image_span(int32_t *keys, const int32_t *tokens, int32_t n, int32_t start,
                          int32_t len, const uint64_t hash[2])
{
    for (int32_t j = 0; j < len && start >= 0 && start + j < n; j++)
        keys[start + j] = ifd_kvkey_image(tokens[start + j], hash, j);
}
