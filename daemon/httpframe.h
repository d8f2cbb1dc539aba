/*
 * httpframe.h — strict HTTP/1.1 request framing (RFC 9112), checked byte by
 * byte in front of http-parser.
 *
 * http-parser (built without HTTP_PARSER_STRICT, as Debian ships it) is
 * lenient where leniency lets a request be framed differently by a proxy in
 * front of the daemon and by the daemon itself ("request smuggling"): a
 * space before a header's colon, chunk data not followed by CRLF, a
 * Transfer-Encoding list, unknown versions, HTTP/0.9 request lines. This
 * checker sees the same bytes first and stops at the first byte that breaks
 * one of the rules below, so http-parser only ever parses requests that
 * every conforming parser frames the same way. Each rule and its status is
 * listed in docs/api.md ("Strict HTTP/1.1 framing"):
 *
 *   request line  method = 1*tchar (at most 32), one SP, a target of visible
 *                 ASCII, one SP, "HTTP/1.0" or "HTTP/1.1", CRLF. No version
 *                 (HTTP/0.9) → 400; another well-formed version → 505.
 *   line ends     CRLF everywhere; a bare CR or LF → 400. Empty lines before
 *                 the request line are skipped (RFC 9112 §2.2).
 *   field lines   name = 1*tchar immediately followed by ':' (whitespace
 *                 before the colon → 400); the value holds no control
 *                 characters but HTAB (→ 400); a line starting with SP/HTAB
 *                 (obs-fold) → 400.
 *   Host          HTTP/1.1 needs exactly one Host field (→ 400).
 *   Content-Length  1*DIGIT (at most 18 digits), one field only; a list, a
 *                 duplicate, a sign or anything else → 400.
 *   Transfer-Encoding  exactly one field whose value is "chunked" (any
 *                 case); any other coding or list → 501; together with
 *                 Content-Length → 400; in an HTTP/1.0 request → 400.
 *   chunks        chunk-size = 1*HEXDIG (at most 15 digits), optional
 *                 extensions (visible characters, at most 1 KiB), CRLF; the
 *                 data is followed by CRLF (→ 400 otherwise); trailer fields
 *                 after the last chunk → 400 (none are accepted).
 *
 * Sizes (header bytes, body bytes) are not limited here: http-parser's
 * callbacks do that (431, 413). Plain data, no allocation, no I/O;
 * threading: one checker per connection, used by one thread.
 */
#ifndef IFD_DAEMON_HTTPFRAME_H
#define IFD_DAEMON_HTTPFRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int state;       /* internal */
    int status;      /* 0, or the HTTP status of the rule broken (400, 501, 505) */
    const char *why; /* static text naming the rule broken, for the error body */
    bool done;       /* a whole request was checked (ifd_httpframe_reset for the next) */
    bool http10;
    bool chunked;
    uint64_t remain; /* body or chunk bytes still to come */
    uint32_t n;      /* bytes in the current token (method, version, chunk size, …) */
    int n_host, n_cl, n_te;
    uint64_t cl;
    char name[24]; /* the current field name, lower case, if it fits */
    uint32_t name_len;
    char val[24]; /* the current value of an interesting field, trimmed later */
    uint32_t val_len;
    bool val_long;
    char ver[8];
} ifd_httpframe_t;

/* Ready for the first request of a connection. */
void ifd_httpframe_init(ifd_httpframe_t *f);

/* Ready for the next request after one that was done. */
void ifd_httpframe_reset(ifd_httpframe_t *f);

/* Checks data[0..len) as the next bytes of the connection. Returns how many
 * were checked: all of them, or fewer when a request ended (f->done, the
 * count includes its last byte) or a rule was broken (f->status set; the
 * count stops before the offending byte). Once done or failed it returns 0
 * until reset. */
size_t ifd_httpframe_feed(ifd_httpframe_t *f, const char *data, size_t len);

#endif
