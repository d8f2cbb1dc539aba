/*
 * kvkey.h — the prefix index's identity of image tokens (docs/vision.md).
 *
 * The prefix cache (kvpool.h) chains blocks by the token ids they hold. An
 * image's soft tokens are all one placeholder id whatever the picture, so
 * two prompts that differ only by their image would look like one prefix.
 * Wherever a prompt's tokens meet the prefix index — the worker's engine
 * (lookup, publish: ifd_engine_image_t) and the router's routing probe
 * (daemon/router.c) — each image token is replaced by its key: a function
 * of (token id, the image's 128-bit content hash, index in the image). Both
 * sides must use this one function, or the router would score prefixes the
 * engine never finds.
 *
 * Pure functions: any thread; nothing allocated.
 */
#ifndef IFD_KVPOOL_KVKEY_H
#define IFD_KVPOOL_KVKEY_H

#include <stdint.h>

/* The key of token `tok` at index j of an image with content hash hash
 * (hash[0] the low half, as the wire's hash_lo): negative, so it never
 * equals a token id (ids are >= 0). Two images share a key only where
 * their hashes agree (or a 31-bit hash of the three collides at every
 * position of a block). */
int32_t ifd_kvkey_image(int32_t tok, const uint64_t hash[2], int32_t j);

/* keys[start + j] = ifd_kvkey_image(tokens[start + j], hash, j) for the
 * image's len tokens, clipped to the first n positions (an image past them
 * changes nothing). keys may be tokens (in place). */
void ifd_kvkey_image_span(int32_t *keys, const int32_t *tokens, int32_t n, int32_t start,
                          int32_t len, const uint64_t hash[2]);

#endif
