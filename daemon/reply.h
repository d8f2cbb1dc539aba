/*
 * reply.h — answers in OpenAI's shapes, shared by every endpoint (api.c) and
 * by the completion requests (gen.c): the error object with its status and
 * headers, and a JSON body built by a proto/ writer.
 *
 * Headers added: Retry-After when asked (503s: queue full, no worker,
 * shutting down), WWW-Authenticate: Bearer on a 401. A body that cannot be
 * built (out of memory) becomes a 500.
 *
 * Each function answers the request exactly once (http.h's contract): the
 * caller must not answer it again. Pointers are borrowed for the call.
 * Threading: loop thread only.
 */
#ifndef IFD_DAEMON_REPLY_H
#define IFD_DAEMON_REPLY_H

#include "arena.h"
#include "http.h"
#include "proto/openai.h"

/* Answers with the error object e (its status). retry_after > 0 adds
 * Retry-After. */
void ifd_reply_error(ifd_http_conn_t *c, const ifd_oai_error_t *e, int retry_after);

/* Answers with an error of a formatted message, type from the status (code
 * and param may be NULL); a 503 says Retry-After: 1. */
void ifd_reply_errorf(ifd_http_conn_t *c, int status, const char *code, const char *param,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* A parser refused the request: its 400 (or other status) in e, or, when
 * e->status is 0 (the parser ran out of memory), a 500. */
void ifd_reply_parse_error(ifd_http_conn_t *c, ifd_oai_error_t *e);

/* Answers 200 with the JSON in b when rc (the writer's result) is 0, else a
 * 500 "Out of memory.". b stays the caller's to free. */
void ifd_reply_json(ifd_http_conn_t *c, int rc, const ifd_buf_t *b);

#endif
