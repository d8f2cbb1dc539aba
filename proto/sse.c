/*
 * sse.c — Server-Sent Events writer and incremental parser (see sse.h).
 *
 * The parser keeps unparsed input in one buffer and consumes whole lines
 * from it; the event under construction lives in a second buffer. Both are
 * bounded by max_event, so a peer that never sends a newline cannot grow
 * memory without limit.
 */
#include "sse.h"

#include "error.h"

#include <string.h>

#define SSE_DEFAULT_MAX (8u << 20)

int ifd_sse_data(ifd_buf_t *out, const char *payload, size_t len)
{
    size_t start = out->len;
    size_t i = 0;
    int rc;
    for (;;) {
        const char *nl = i < len ? memchr(payload + i, '\n', len - i) : NULL;
        size_t end = nl ? (size_t)(nl - payload) : len;
        size_t line_end = end;
        if (line_end > i && payload[line_end - 1] == '\r')
            line_end--; /* "\r\n" in the payload is one line break */
        if ((rc = ifd_buf_append(out, "data: ", 6)) < 0 ||
            (rc = ifd_buf_append(out, payload + i, line_end - i)) < 0 ||
            (rc = ifd_buf_append(out, "\n", 1)) < 0)
            goto fail;
        if (!nl)
            break;
        i = end + 1;
    }
    if ((rc = ifd_buf_append(out, "\n", 1)) < 0)
        goto fail;
    return 0;
fail:
    out->len = start;
    if (out->data)
        out->data[start] = '\0';
    return rc;
}

int ifd_sse_comment(ifd_buf_t *out, const char *text)
{
    size_t start = out->len;
    int rc = ifd_buf_append(out, ": ", 2);
    if (rc == 0)
        rc = ifd_buf_puts(out, text);
    if (rc == 0)
        rc = ifd_buf_append(out, "\n\n", 2);
    if (rc < 0) {
        out->len = start;
        if (out->data)
            out->data[start] = '\0';
        return rc;
    }
    for (size_t i = start + 2; i < out->len - 2; i++)
        if (out->data[i] == '\n' || out->data[i] == '\r')
            out->data[i] = ' ';
    return 0;
}

int ifd_sse_done(ifd_buf_t *out)
{
    return ifd_buf_puts(out, "data: [DONE]\n\n");
}

void ifd_sse_parser_init(ifd_sse_parser_t *p, size_t max_event)
{
    memset(p, 0, sizeof(*p));
    p->max_event = max_event ? max_event : SSE_DEFAULT_MAX;
}

void ifd_sse_parser_close(ifd_sse_parser_t *p)
{
    ifd_buf_free(&p->in);
    ifd_buf_free(&p->data);
    ifd_buf_free(&p->event);
    ifd_buf_free(&p->out);
    ifd_buf_free(&p->out_name);
    p->off = 0;
}

int ifd_sse_parser_feed(ifd_sse_parser_t *p, const char *bytes, size_t n)
{
    if (p->off > 0) {
        ifd_buf_consume(&p->in, p->off);
        p->off = 0;
    }
    /* After next() returned 0 only an unfinished line (<= max_event, else
     * next() fails) stays buffered, so memory is bounded by max_event plus
     * the size of one feed. */
    return ifd_buf_append(&p->in, bytes, n);
}

/* Handles one line (without its terminator). 1: an event is ready. */
static int sse_line(ifd_sse_parser_t *p, const char *line, size_t len)
{
    int rc;
    if (len == 0) {
        if (!p->has_data) {
            ifd_buf_clear(&p->event);
            return 0;
        }
        ifd_buf_clear(&p->out);
        ifd_buf_clear(&p->out_name);
        if ((rc = ifd_buf_append(&p->out, p->data.data, p->data.len)) < 0 ||
            (rc = ifd_buf_append(&p->out_name, p->event.data ? p->event.data : "", p->event.len)) <
                0)
            return rc;
        ifd_buf_clear(&p->data);
        ifd_buf_clear(&p->event);
        p->has_data = 0;
        return 1;
    }
    if (line[0] == ':')
        return 0; /* comment */
    const char *colon = memchr(line, ':', len);
    size_t nlen = colon ? (size_t)(colon - line) : len;
    const char *val = colon ? colon + 1 : line + len;
    size_t vlen = len - (size_t)(val - line);
    if (vlen > 0 && val[0] == ' ')
        val++, vlen--;
    if (nlen == 4 && memcmp(line, "data", 4) == 0) {
        if (p->data.len + vlen + 1 > p->max_event)
            return IFD_ETOOBIG;
        if (p->has_data && (rc = ifd_buf_append(&p->data, "\n", 1)) < 0)
            return rc;
        if ((rc = ifd_buf_append(&p->data, val, vlen)) < 0)
            return rc;
        p->has_data = 1;
    } else if (nlen == 5 && memcmp(line, "event", 5) == 0) {
        ifd_buf_clear(&p->event);
        if ((rc = ifd_buf_append(&p->event, val, vlen)) < 0)
            return rc;
    }
    return 0;
}

int ifd_sse_parser_next(ifd_sse_parser_t *p, ifd_sse_event_t *ev)
{
    while (p->off < p->in.len) {
        const char *s = p->in.data + p->off;
        size_t left = p->in.len - p->off;
        const char *nl = memchr(s, '\n', left);
        if (!nl) {
            if (left > p->max_event)
                return IFD_ETOOBIG;
            return 0;
        }
        size_t len = (size_t)(nl - s);
        p->off += len + 1;
        if (len > 0 && s[len - 1] == '\r')
            len--;
        int rc = sse_line(p, s, len);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            ev->data = p->out.data ? p->out.data : "";
            ev->len = p->out.len;
            ev->event = p->out_name.data ? p->out_name.data : "";
            return 1;
        }
    }
    return 0;
}
