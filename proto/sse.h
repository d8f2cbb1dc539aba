/*
 * sse.h — Server-Sent Events framing: writing events (the daemon's
 * streaming responses) and parsing them incrementally (clients, tests).
 *
 * Writing: an event is one or more "data: <line>" lines and a blank line.
 * A payload holding newlines is split across several data lines, so any
 * text round-trips through a conforming reader. Comments (": ping") keep
 * idle connections alive; the official openai client ignores them.
 *
 * Parsing follows the WHATWG event-stream rules clients use: lines end in
 * "\n" or "\r\n" (a lone "\r" is not treated as an end of line), "data:"
 * lines of one event are joined with "\n", one space after the colon is
 * dropped, lines starting with ":" are comments, "event:" sets the event
 * name, other fields ("id:", "retry:") are ignored, and a blank line
 * dispatches the event if it has data.
 *
 * Pure functions over caller buffers; no I/O. A parser belongs to one
 * thread at a time.
 */
#ifndef IFD_SSE_H
#define IFD_SSE_H

#include "arena.h"

#include <stddef.h>

/* Appends "data: <payload>\n\n" (payload lines split as above).
 * 0 or IFD_ENOMEM. */
int ifd_sse_data(ifd_buf_t *out, const char *payload, size_t len);

/* Appends ": <text>\n\n" (newlines in text become spaces). 0 or IFD_ENOMEM. */
int ifd_sse_comment(ifd_buf_t *out, const char *text);

/* Appends "data: [DONE]\n\n", the end of an OpenAI stream. 0 or IFD_ENOMEM. */
int ifd_sse_done(ifd_buf_t *out);

typedef struct {
    ifd_buf_t in;    /* bytes not yet split into lines */
    size_t off;      /* first unparsed byte of in */
    ifd_buf_t data;  /* data of the event being assembled */
    ifd_buf_t event; /* its event name */
    ifd_buf_t out;   /* the event handed out last */
    ifd_buf_t out_name;
    int has_data;
    size_t max_event; /* largest event accepted */
} ifd_sse_parser_t;

typedef struct {
    const char *event; /* "" when no event: line came */
    const char *data;  /* NUL-terminated; len bytes */
    size_t len;
} ifd_sse_event_t;

/* max_event 0 means 8 MiB. Never fails. */
void ifd_sse_parser_init(ifd_sse_parser_t *p, size_t max_event);
void ifd_sse_parser_close(ifd_sse_parser_t *p);

/* Copies n bytes in: 0 or IFD_ENOMEM. Call next() until it returns 0
 * before feeding more: then at most one unfinished line stays buffered. */
int ifd_sse_parser_feed(ifd_sse_parser_t *p, const char *bytes, size_t n);

/* 1 with *ev set (its strings live until the next call), 0 when more bytes
 * are needed, IFD_ETOOBIG when a line or an event's data exceeds max_event
 * (the stream is then broken), IFD_ENOMEM. */
int ifd_sse_parser_next(ifd_sse_parser_t *p, ifd_sse_event_t *ev);

#endif
