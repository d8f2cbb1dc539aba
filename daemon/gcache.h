/*
 * gcache.h — the router's cache of compiled structured-output grammars,
 * keyed by what the request asks for (the constraint's kind and source, the
 * tools it forces or validates): a repeated schema is converted and
 * compiled once (issue 31: "compiled grammars cached by content hash"), and
 * a request whose tools were checked before is not checked again. A value is
 * the compiled grammar's words (ifd_grammar_serialize), possibly none (tools
 * checked, no constraint), and optionally the parsed JSON Schema its
 * outputs are checked against (outcheck.h), so a repeated schema is parsed
 * once too.
 *
 * Bounded: entries and their bytes count against max_bytes; adding past it
 * evicts the least recently used. Entries are immutable; a get copies the
 * words out, so nothing handed out points into the cache.
 *
 * Threading: every function may be called from any thread (the uv
 * threadpool's jobs build grammars): one mutex guards the cache. Ownership:
 * the cache copies keys and words, and holds a reference to a schema (a
 * schema is never modified once cached: every holder only reads it).
 */
#ifndef IFD_DAEMON_GCACHE_H
#define IFD_DAEMON_GCACHE_H

#include "arena.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ifd_gcache ifd_gcache_t;

/* 0 or IFD_ENOMEM. max_bytes 0: a cache that keeps nothing. */
int ifd_gcache_create(ifd_gcache_t **out, size_t max_bytes);
void ifd_gcache_destroy(ifd_gcache_t *c); /* NULL is a no-op */

/* key's entry: 1 with *words (copied into a; NULL when *n is 0) and *n
 * set, and *schema (when not NULL) a new reference to its schema or NULL
 * (the caller json_decrefs it), made the most recent; 0 when absent (or
 * out of memory). */
int ifd_gcache_get(ifd_gcache_t *c, const void *key, size_t klen, ifd_arena_t *a, int32_t **words,
                   size_t *n, json_t **schema);

/* Stores key → words (copied) and schema (may be NULL; the cache takes a
 * reference of its own), the schema counted as schema_bytes; an entry
 * larger than the cache is not stored; a failure to allocate is not an
 * error (the cache is an optimisation). */
void ifd_gcache_put(ifd_gcache_t *c, const void *key, size_t klen, const int32_t *words, size_t n,
                    json_t *schema, size_t schema_bytes);

/* Entries, bytes, hits and misses so far. */
void ifd_gcache_stats(ifd_gcache_t *c, size_t *entries, size_t *bytes, uint64_t *hits,
                      uint64_t *misses);

#endif
