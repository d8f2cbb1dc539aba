/*
 * respstore.h — the Responses API's stored responses (POST /v1/responses
 * with "store": true; GET and DELETE /v1/responses/{id};
 * previous_response_id): an in-memory map from response id to the
 * Response object as it was answered and the conversation that led to it
 * (chat messages, for a request continuing it).
 *
 * Owned: every entry carries the identity of the client that stored it
 * (api.h: "uid:1000" on the Unix socket, "key:NAME" on TCP). A get or
 * delete by anyone else finds nothing, exactly as for an id never stored,
 * and leaves the entry as it was (its recency too), so another client's
 * ids can be neither read, continued, deleted nor probed.
 *
 * Bounded: at most max_entries entries and max_bytes bytes (ids, texts and
 * a fixed per-entry overhead counted). When a put goes past either, the
 * store evicts, one at a time, the least recently used entry (a put, or a
 * get that found it, makes an entry its owner's most recent) of the owner
 * holding the most bytes (ties: the most entries), the new entry counted
 * with its owner — so a client flooding the store evicts only its own
 * entries while any other owner holds less than it, and a store with one
 * owner is a plain LRU. A new entry that is itself chosen (its owner holds
 * the most and nothing older) is not kept. The limits are read at every
 * put, so a lowered limit takes effect then; a put with 0 entries or 0
 * bytes empties the store. An entry larger than max_bytes alone is not
 * stored. Nothing survives a restart.
 *
 * The daemon holds its store through ifd_respstore_keep / _lookup, which
 * read the limits from the running configuration (responses_store_entries
 * and _bytes, reloadable): the store is made at the first Response kept and
 * freed at the first use after a reload turned it off (either limit 0), so
 * a daemon that keeps nothing holds nothing.
 *
 * Cost: a put, get or delete is O(1) but for eviction, which scans the
 * owners (identities that hold entries: a few uids and API keys) once per
 * entry evicted.
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
    const char *owner;    /* who stored it */
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

/* Stores (or replaces: ids are unique, whoever held the old one) id's
 * entry for owner within the limits, evicting as described above. 0;
 * IFD_ETOOBIG (not stored: the entry alone is over max_bytes — an older
 * entry of id removed —, or eviction chose it; or a limit is 0: the store
 * emptied); IFD_ENOMEM (not stored). */
int ifd_respstore_put(ifd_respstore_t *s, size_t max_entries, size_t max_bytes, const char *owner,
                      const char *id, const char *response, size_t response_len,
                      const char *conversation, size_t conversation_len);

/* owner's entry of id (made its most recent), or NULL: none, or another
 * owner's (untouched). */
const ifd_respstore_entry_t *ifd_respstore_get(ifd_respstore_t *s, const char *owner,
                                               const char *id);

/* Removes owner's entry of id: true when there was one (another owner's
 * entry is left as it is: false). */
bool ifd_respstore_delete(ifd_respstore_t *s, const char *owner, const char *id);

/* Entries, bytes counted, and entries evicted so far. */
void ifd_respstore_stats(const ifd_respstore_t *s, size_t *entries, size_t *bytes,
                         uint64_t *evicted);

/* The entries and bytes owner holds (0 and 0 when none). */
void ifd_respstore_owner_stats(const ifd_respstore_t *s, const char *owner, size_t *entries,
                               size_t *bytes);

/* ---- the daemon's store, under the running configuration ---------------------------------- */

/* Whether cfg keeps Responses: both limits above 0. */
bool ifd_respstore_enabled(const ifd_config_t *cfg);

/* Stores owner's Response under id in *sp (made here at the first one)
 * within cfg's limits; frees *sp (NULL) when cfg turned the store off. A
 * failure is logged, never the client's (the Response was answered). */
void ifd_respstore_keep(ifd_respstore_t **sp, const ifd_config_t *cfg, const char *owner,
                        const char *id, const char *response, size_t response_len,
                        const char *conversation, size_t conversation_len);

/* owner's entry of id in *sp (*sp may be NULL: none), made its most
 * recent, or NULL (none, or another owner's); frees *sp (NULL) when cfg
 * turned the store off. */
const ifd_respstore_entry_t *ifd_respstore_lookup(ifd_respstore_t **sp, const ifd_config_t *cfg,
                                                  const char *owner, const char *id);

#endif
