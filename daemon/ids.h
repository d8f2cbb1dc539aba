/*
 * ids.h — the random numbers behind the daemon's ids (chatcmpl-…, cmpl-…,
 * resp_… through ifd_oai_make_id, and tool call ids call_…) and behind the
 * seeds of requests that give none.
 *
 * splitmix64 over a 64-bit state the caller holds (the API context's `rng`,
 * seeded by main from the start time and the pid): ids and default seeds
 * need to differ, not to be secret.
 *
 * Threading: one state per thread (the daemon's loop); no allocation but
 * the arena's.
 */
#ifndef IFD_DAEMON_IDS_H
#define IFD_DAEMON_IDS_H

#include "arena.h"

#include <stdint.h>

/* The next random number of *state (which it advances). */
uint64_t ifd_ids_random(uint64_t *state);

/* A tool call id, "call_" and 24 hex digits, in a; NULL when out of memory. */
char *ifd_ids_tool_call(ifd_arena_t *a, uint64_t *state);

#endif
