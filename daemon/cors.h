/*
 * cors.h — Cross-Origin Resource Sharing: which browser origins may call the
 * API (setting allowed_origins), the answer to a preflight, and the headers
 * every response to an allowed origin carries.
 *
 * Policy (docs/security.md, "Browsers"): none by default — no CORS header is
 * ever sent, and every preflight is refused (403); "*" only when configured
 * explicitly; otherwise a list of exact origins ("scheme://host[:port]",
 * compared case-insensitively). A preflight (OPTIONS with Origin and
 * Access-Control-Request-Method) is answered by the HTTP layer before any
 * authentication, since a browser never sends credentials with it: 204 with
 * Allow-Origin (the origin itself and Vary: Origin, or "*"), Allow-Methods,
 * Allow-Headers (the requested headers, each of which must be in
 * IFD_CORS_ALLOWED_HEADERS or start with "x-stainless-", the OpenAI SDKs'
 * telemetry headers) and Max-Age; or 403 naming what is not allowed (the
 * origin, the method or a header). The actual request then goes through
 * authentication as any other, and its response — errors and SSE streams
 * included — carries Allow-Origin and Expose-Headers.
 *
 * Plain data, no allocation: ifd_cors_t is a copy of the parsed list, which
 * the HTTP server holds by value in its limits (replaced on SIGHUP).
 * Threading: any thread; pure functions.
 */
#ifndef IFD_DAEMON_CORS_H
#define IFD_DAEMON_CORS_H

#include "arena.h"

#include <stdbool.h>
#include <stddef.h>

#define IFD_CORS_MAX_ORIGINS    16
#define IFD_CORS_ORIGIN_MAX     256 /* bytes of one origin, NUL included */
#define IFD_CORS_MAX_AGE        600 /* seconds a browser may cache a preflight */
#define IFD_CORS_METHODS        "GET, POST, DELETE, OPTIONS"
#define IFD_CORS_EXPOSE_HEADERS "X-Request-Id, Retry-After, endpoint-load-metrics"

typedef struct {
    bool any; /* "*" */
    int n;    /* origins listed (0 with any) */
    char origins[IFD_CORS_MAX_ORIGINS][IFD_CORS_ORIGIN_MAX];
} ifd_cors_t;

/* Parses allowed_origins: "" or NULL (none), "*", or a comma-separated list
 * of origins (spaces around commas ignored). 0, or IFD_EINVAL with a
 * one-line reason naming the entry in err ("*" mixed with origins, a path,
 * no scheme, too long, too many). */
int ifd_cors_parse(ifd_cors_t *out, const char *list, char *err, size_t errlen);

/* Whether cors sends any CORS header at all (something is allowed). */
bool ifd_cors_enabled(const ifd_cors_t *cors);

/* Appends the headers of an actual response to a request from origin
 * (NULL: no Origin header) as "Name: value\r\n" lines: Allow-Origin and
 * Expose-Headers when the origin is allowed, and Vary: Origin whenever the
 * answer depends on the origin (a list is configured). 0 or IFD_ENOMEM. */
int ifd_cors_response_headers(const ifd_cors_t *cors, const char *origin, ifd_buf_t *out);

/* Whether a request is a CORS preflight: OPTIONS (method_is_options) with
 * an Origin and an Access-Control-Request-Method. */
bool ifd_cors_is_preflight(bool method_is_options, const char *origin, const char *req_method);

/* Answers a preflight: returns 204 with its own headers appended to hdrs
 * (Allow-Methods, Max-Age, Allow-Headers: the head adds Allow-Origin and
 * Vary through ifd_cors_response_headers, as for any response), or 403 with
 * nothing appended and a one-sentence reason in why (for the error body);
 * IFD_ENOMEM. req_headers: Access-Control-Request-Headers or NULL. */
int ifd_cors_preflight(const ifd_cors_t *cors, const char *origin, const char *req_method,
                       const char *req_headers, ifd_buf_t *hdrs, char *why, size_t whylen);

#endif
