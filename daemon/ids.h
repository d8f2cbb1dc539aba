/*
 * ids.h — the daemon's random numbers: the ids clients see (chatcmpl-…,
 * cmpl-…, resp_… through ifd_oai_make_id, and tool call ids call_…), and
 * the seeds of requests that give none.
 *
 * Ids come straight from the kernel's CSPRNG (getrandom(2)), 128 bits
 * each: a stored Response is reachable by its id alone (GET, DELETE,
 * previous_response_id; owners are checked too, respstore.h), so an id
 * must not be guessable from any other id a client has seen. A draw that
 * fails is an error the caller answers with a 500, never a weaker id.
 *
 * Default sampling seeds only need to differ: they come from splitmix64
 * over a 64-bit state the caller holds (the API context's `rng`), itself
 * seeded from getrandom at start (ifd_ids_seed), so neither the start time
 * nor the pid shows through them. The two never share state: a seed says
 * nothing about an id.
 *
 * Test hook (builds with -DINFERD_TEST_HOOKS=ON only): with
 * $INFERD_TEST_IDS_FAIL set, ifd_ids_make and ifd_ids_tool_call fail as a
 * failing getrandom would (-EIO), so the 500 path can be tested.
 *
 * Threading: any thread (getrandom is thread-safe); a seed state belongs
 * to one thread (the daemon's loop). No allocation but the arena's.
 */
#ifndef IFD_DAEMON_IDS_H
#define IFD_DAEMON_IDS_H

#include "arena.h"
#include "proto/openai.h"

#include <stddef.h>
#include <stdint.h>

/* Bits of randomness in every id a client sees. */
#define IFD_IDS_BITS 128

/* Fills buf[0..n) from getrandom(2) (retried on EINTR and short reads).
 * 0, or -errno (logged). */
int ifd_ids_fill(void *buf, size_t n);

/* The id of a response of `kind` (ifd_oai_make_id's shape: prefix and 32
 * hex digits) in out (IFD_OAI_ID_MAX bytes). 0 or -errno (out is then ""). */
int ifd_ids_make(char *out, ifd_oai_kind_t kind);

/* A tool call id, "call_" and 32 hex digits, in a. NULL with *rc set:
 * -errno (getrandom failed) or IFD_ENOMEM. */
char *ifd_ids_tool_call(ifd_arena_t *a, int *rc);

/* Seeds *state, the default seeds' generator, from getrandom. 0 or -errno. */
int ifd_ids_seed(uint64_t *state);

/* The next default seed from *state (which it advances): splitmix64. */
uint64_t ifd_ids_random(uint64_t *state);

#endif
