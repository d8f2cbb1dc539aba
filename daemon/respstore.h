/*
 * respstore.h — the Responses API's stored responses (POST /v1/responses
 * with "store": true; GET and DELETE /v1/responses/{id};
 * previous_response_id): an in-memory map from response id to the
 * Response object as it was answered and the conversation that led to it
 * (chat messages, for a request continuing it).
 *
 * Bounded: at most max_entries entries and max_bytes bytes (ids, texts and
 * a fixed per-entry overhead counted); adding past either evicts the least
 * recently used entries (a put, or a get that found it, makes an entry the
 * most recent). The limits are read at every put, so a lowered limit takes
 * effect then; a put with 0 entries or 0 bytes empties the store. An
 * entry larger than max_bytes alone is not stored. Nothing survives a restart.
 *
 * The daemon holds its store through ifd_respstore_keep / _lookup, which
 * read the limits from the running configuration (responses_store_entries
 * and _bytes, reloadable): the store is made at the first Response kept and
 * freed at the first use after a reload turned it off (either limit 0), so
 * a daemon that keeps nothing holds nothing.
 *
 * Ownership: the store copies what it is given; a get returns pointers
 * into the entry, valid until the next put, delete, keep or lookup on the
 * store. Threading: one thread (the daemon's loop).
 */
#ifndef IFD_DAEMON_RESPSTORE_H
#define IFD_DAEMON_RESPSTORE_H

#include "config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ifd_respstore ifd_respstore_t;

/* What one stored response holds; every string NUL-terminated. */
typedef struct {
    const char *id;
    const char *response; /* the Response object's JSON */
    size_t response_len;
    const char *conversation; /* JSON array of chat messages, the answer's last */
    size_t conversation_len;
} ifd_respstore_entry_t;

/* Bytes one entry counts besides its strings (the map's bookkeeping). */
#define IFD_RESPSTORE_ENTRY_OVERHEAD 128

/* An empty store: 0 or IFD_ENOMEM. */
int ifd_respstore_create(ifd_respstore_t **out);
void ifd_respstore_destroy(ifd_respstore_t *s); /* NULL is fine */

/* Stores (or replaces) id's entry within the limits, evicting the least
 * recently used as needed. 0; IFD_ETOOBIG (the entry alone is over
 * max_bytes: not stored, an older entry of id removed; or a limit is 0:
 * the store emptied); IFD_ENOMEM (not stored). */
int ifd_respstore_put(ifd_respstore_t *s, size_t max_entries, size_t max_bytes, const char *id,
                      const char *response, size_t response_len, const char *conversation,
                      size_t conversation_len);

/* The entry of id (made the most recent), or NULL. */
const ifd_respstore_entry_t *ifd_respstore_get(ifd_respstore_t *s, const char *id);

/* Removes id's entry: true when there was one. */
bool ifd_respstore_delete(ifd_respstore_t *s, const char *id);

/* Entries, bytes counted, and entries evicted so far. */
void ifd_respstore_stats(const ifd_respstore_t *s, size_t *entries, size_t *bytes,
                         uint64_t *evicted);

/* ---- the daemon's store, under the running configuration ---------------------------------- */

/* Whether cfg keeps Responses: both limits above 0. */
bool ifd_respstore_enabled(const ifd_config_t *cfg);

/* Stores a Response under id in *sp (made here at the first one) within
 * cfg's limits; frees *sp (NULL) when cfg turned the store off. A failure
 * is logged, never the client's (the Response was answered). */
void ifd_respstore_keep(ifd_respstore_t **sp, const ifd_config_t *cfg, const char *id,
                        const char *response, size_t response_len, const char *conversation,
                        size_t conversation_len);

/* The entry of id in *sp (*sp may be NULL: none), made the most recent, or
 * NULL; frees *sp (NULL) when cfg turned the store off. */
const ifd_respstore_entry_t *ifd_respstore_lookup(ifd_respstore_t **sp, const ifd_config_t *cfg,
                                                  const char *id);

#endif
