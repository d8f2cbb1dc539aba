/*
 * gen.h — one completion request (POST /v1/chat/completions,
 * /v1/completions, or /v1/responses: a chat request answered as a Response,
 * proto/responses.h) from its body to its last byte.
 *
 * Life: parse and validate (proto/openai.h) → model check → admission (a
 * place in the bounded queue is reserved before any tokenizing; 503 +
 * Retry-After when max_queue is reached) → chat template + tokenize on the
 * uv threadpool → context-length check (400 context_length_exceeded) → one
 * router sequence per choice (n per prompt, seed + i when a seed is given)
 * → tokens come back: detokenized incrementally (UTF-8 safe), stop strings
 * matched on the text (and never returned; text that could still become a
 * stop string or a tool call is held back: textout.h), logprobs collected
 * → streamed as SSE chunks or gathered into one response with usage
 * (cached_tokens from the prefix cache).
 *
 * Every failure before the first byte is an HTTP error; after a stream has
 * started it is an error event followed by [DONE]. A client that goes away
 * cancels every sequence of its request in the workers.
 *
 * Ownership: a request object owns its arena, texts (textout.h) and
 * buffers; it frees itself when its response is complete or its client is
 * gone (never while a threadpool job of it is pending). Threading: loop
 * thread, except the tokenizing job.
 */
#ifndef IFD_DAEMON_GEN_H
#define IFD_DAEMON_GEN_H

#include "api.h"

/* Serves one completion request on c. Always answers (now or later). */
void ifd_gen_handle(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r,
                    ifd_oai_kind_t kind);

/*
 * Background Responses (POST /v1/responses with "background": true; at
 * most responses_background_max at once, 429 beyond, 400 when 0): answered
 * at once with status "queued" once its prompt is tokenized and queued
 * (every error found up to then is still the request's own 4xx), then run
 * without the connection; streamed (`stream`), its events go to the
 * connection while the client reads, and a client that leaves or stops
 * reading does not stop it. The Response is kept in the store when it ends
 * (completed, incomplete, or failed with its error) under its owner.
 *
 * ifd_gen_background_status: the Response JSON of owner's background
 * Response id while it runs (status "queued" until a worker takes it, then
 * "in_progress"; output [], usage null) appended to out — 0, IFD_ENOTFOUND
 * (none running: finished, another owner's, or never), IFD_ENOMEM.
 * ifd_gen_background_cancel: stops it (its sequences are released; a stream
 * still read ends), keeps
 * it with status "cancelled" and appends that Response to out (out may be
 * NULL) — 0, IFD_ENOTFOUND, IFD_ENOMEM (it is cancelled all the same).
 */
int ifd_gen_background_status(ifd_api_t *api, const char *owner, const char *id, ifd_buf_t *out);
int ifd_gen_background_cancel(ifd_api_t *api, const char *owner, const char *id, ifd_buf_t *out);

/* Ends every request in progress (shutdown grace over): streams get an
 * error event and [DONE], others a 503; their sequences are cancelled. */
void ifd_gen_abort_all(ifd_api_t *api);

#endif
